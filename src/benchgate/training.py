"""One training step of a workload, split into the named ranges the profiler trace shows.

bench (timed), trace (profiled) and the tests share this step, so what is timed is what is traced.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.profiler import record_function

from benchgate.workloads.base import Workload

RANGES = ("data", "forward", "loss", "backward", "optimizer_step")


def resolve_device(requested: str, local_rank: int = 0) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def resolve_precision(requested: str, device: torch.device) -> str:
    if requested == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return requested


@dataclass
class Trainer:
    workload: Workload
    model: nn.Module  # possibly DDP-wrapped
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    device: torch.device
    precision: str

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self) -> torch.Tensor:
        """Run one optimizer step; returns the detached loss without synchronising the device."""
        with record_function("data"):
            batch = self.workload.make_batch(self.generator, self.device)
        with self._autocast():
            with record_function("forward"):
                output = self.workload.forward(self.model, batch)
            with record_function("loss"):
                loss = self.workload.loss(output, batch)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer_step"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


def build_trainer(
    workload: Workload, device: torch.device, precision: str, seed: int, rank: int = 0, ddp: bool = False
) -> Trainer:
    # Same seed on every rank: DDP needs identical initial weights; batches differ per rank below.
    torch.manual_seed(seed)
    model = workload.build_model(device)
    if ddp:
        device_ids = [device.index] if device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    optimizer = workload.make_optimizer(model)
    generator = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + rank)
    return Trainer(workload, model, optimizer, generator, device, precision)
