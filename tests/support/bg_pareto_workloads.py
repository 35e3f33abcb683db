"""A variant of the reference GPT for the Pareto view's tests, importable by torchrun workers (conftest).

`padded_gpt` is gpt-tiny with a fixed sleep in every measured step: surely slower than gpt-tiny however
busy the host, and of exactly its perplexity (the eval trains and scores through `logits`, never
`forward`, with fixed seeds), so a suite of real runs holds an entry that gpt-tiny dominates, on a tie.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from benchgate.workloads.gpt import SIZES, GPTWorkload


class PaddedGPT(GPTWorkload):
    def __init__(self, pad_ms: float) -> None:
        super().__init__("tiny", SIZES["tiny"])
        self.name = "gpt-tiny-padded"
        self.pad_s = pad_ms / 1000

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        time.sleep(self.pad_s)
        return super().forward(model, batch)


def padded_gpt(pad_ms: float = 150.0) -> PaddedGPT:
    return PaddedGPT(float(pad_ms))
