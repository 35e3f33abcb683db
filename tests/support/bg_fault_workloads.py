"""Workloads for the tests that act on processes from outside (tests/distributed/test_process_faults.py).

`announcing` is `sleepy` that, once every rank has reached a given step, leaves one file per rank naming
its pid, so a test can `kill -9` a rank that is known to be in the middle of a step.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from bg_test_workloads import Sleepy
from torch import nn


class _Announcing(Sleepy):
    def __init__(self, directory: str, at_step: int | str, step_ms: float | str) -> None:
        super().__init__(float(step_ms))
        self.directory, self.at_step = Path(directory), int(at_step)  # a CLI --workload-arg is text

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        if self.steps + 1 == self.at_step and "LOCAL_RANK" in os.environ:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / f"rank{os.environ['RANK']}.pid").write_text(str(os.getpid()))
        return super().forward(model, batch)


def announcing(directory: str, at_step: int = 3, step_ms: float = 50.0) -> Sleepy:
    return _Announcing(directory, at_step, step_ms)
