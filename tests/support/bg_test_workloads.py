"""Workloads for benchgate's own tests, importable by torchrun workers through PYTHONPATH (conftest).

`sleepy` spends a fixed sleep per step on top of a tiny model, so its step time barely depends on how
busy the shared test machine is: gate tests then check the gate's logic, not the host's noise.
The others fail on purpose: on one rank, at one step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchgate.workloads.base import FlopsPerToken


class _SleepyCore:
    """sleepy without `flops_per_token()` (the member is optional): its FLOPs are counted."""

    name = "sleepy"
    tokens_per_step = 64

    def __init__(self, step_ms: float = 20.0) -> None:
        self.step_s = step_ms / 1000
        self.steps = 0  # optimizer steps taken; the step under way is number steps + 1

    def build_model(self, device: torch.device) -> nn.Module:
        return nn.Linear(16, 16).to(device)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        # Counted as the optimizer takes them: the bench's FLOP count runs a forward that is no step.
        optimizer.register_step_post_hook(lambda *_: self._step_taken())
        return optimizer

    def _step_taken(self) -> None:
        self.steps += 1

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        return torch.randn(4, 16, generator=generator).to(device)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        time.sleep(self.step_s)
        return model(batch)

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        # Learn the identity map: the loss falls steadily, so the loss-slope check passes.
        return F.mse_loss(output, batch)


class Sleepy(_SleepyCore):
    def flops_per_token(self) -> FlopsPerToken:
        return FlopsPerToken(dense_6n=6 * 272, attention_aware=6 * 272)


def sleepy(step_ms: float = 20.0) -> Sleepy:
    return Sleepy(step_ms)


def without_flops() -> _SleepyCore:
    workload = _SleepyCore(step_ms=1.0)
    workload.name = "without-flops"
    return workload


class _Faulty(Sleepy):
    def __init__(self, rank: int, at_step: int, fault: str) -> None:
        super().__init__(step_ms=1.0)
        self.rank, self.at_step, self.fault = rank, at_step, fault

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        out = super().forward(model, batch)
        if int(os.environ.get("RANK", "0")) == self.rank and self.steps + 1 == self.at_step:
            if self.fault == "raise":
                raise RuntimeError(f"injected failure at step {self.at_step}")
            if self.fault == "hang":
                time.sleep(3600)
        return out

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        loss = super().loss(output, batch)
        if self.fault == "nan" and self.steps + 1 >= self.at_step:
            return loss * float("nan")
        return loss


def failing(rank: int = 1, at_step: int = 3) -> Sleepy:
    return _Faulty(rank, at_step, "raise")


def hanging(rank: int = 1, at_step: int = 3) -> Sleepy:
    return _Faulty(rank, at_step, "hang")


def nan_loss(at_step: int = 2) -> Sleepy:
    return _Faulty(0, at_step, "nan")


class _Diverging(Sleepy):
    """Trains as sleepy until step `at_step` (from 1, warmup included), where rank `rank`'s loss is inf:
    its gradients then spoil every rank's weights, and every later loss is nan."""

    def __init__(self, at_step: int, rank: int) -> None:
        super().__init__(step_ms=1.0)
        self.at_step, self.rank = at_step, rank

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        loss = super().loss(output, batch)
        if int(os.environ.get("RANK", "0")) == self.rank and self.steps + 1 == self.at_step:
            return loss * float("inf")
        return loss


def diverging(at_step: int = 13, rank: int = 1) -> Sleepy:
    return _Diverging(at_step, rank)


def slow_learner(scale: float = 0.3, step_ms: float = 1.0) -> Sleepy:
    """sleepy whose gradients are scaled by `scale` before each optimizer step: the same losses at its
    first step, then a loss that falls more slowly (a commit that broke a learning-rate schedule)."""

    class SlowLearner(Sleepy):
        def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
            optimizer = super().make_optimizer(model)
            optimizer.register_step_pre_hook(lambda opt, *_: _scale_gradients(opt, scale))
            return optimizer

    return SlowLearner(step_ms)


def _scale_gradients(optimizer: torch.optim.Optimizer, scale: float) -> None:
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if parameter.grad is not None:
                parameter.grad.mul_(scale)


def rising_loss() -> Any:
    class Rising(Sleepy):
        def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
            return super().loss(output, batch) * 0 + 0.1 * self.steps  # grows every step

    return Rising(step_ms=1.0)


def raising_factory() -> Sleepy:
    raise ValueError("the factory is broken")


def incomplete() -> object:
    class NoLoss:
        name = "incomplete"
        tokens_per_step = 1

    return NoLoss()


def slow_once(marker: str, step_ms: float = 20.0) -> Sleepy:
    """50% slower in the first torchrun launch only (a burst of interference, as far as the gate can tell).

    Only torchrun workers (LOCAL_RANK set) count as launches: the CLI also imports the workload once
    to check it before anything runs.
    """
    if "LOCAL_RANK" not in os.environ:
        return Sleepy(step_ms)
    path = Path(marker)
    first_launch = not path.exists()
    if first_launch and os.environ["LOCAL_RANK"] == "0":
        path.write_text("launched")
    return Sleepy(step_ms * 1.5 if first_launch else step_ms)


# Workloads that break the contract (benchgate.workloads.base); the env task must refuse each one
# within seconds, naming the member and the value, before any bench runs.


class _ScalarOfShapeOne(Sleepy):
    name = "loss-shape-one"

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return super().loss(output, batch).reshape(1)  # [1], not []: a common slip with .view(-1)


def loss_shape_one() -> Sleepy:
    return _ScalarOfShapeOne(step_ms=1.0)


class _FlopsAsText(Sleepy):
    name = "flops-as-text"

    def flops_per_token(self) -> Any:
        return "6N"


def flops_as_text() -> Sleepy:
    return _FlopsAsText(step_ms=1.0)


class _FlopsAsNumber(Sleepy):
    name = "flops-as-number"
    flops_per_token = 6.0  # type: ignore[assignment]  # a figure where a method belongs


def flops_as_number() -> Sleepy:
    return _FlopsAsNumber(step_ms=1.0)


class _TokensPerStepBool(Sleepy):
    name = "tokens-per-step-bool"
    tokens_per_step = True  # type: ignore[assignment]  # True is an int to Python, and would count as 1


def tokens_per_step_bool() -> Sleepy:
    return _TokensPerStepBool(step_ms=1.0)


def named(name: str) -> Sleepy:
    """`sleepy` under another name, e.g. one with a quote or a slash (it becomes a path and a filter)."""
    workload = Sleepy(step_ms=1.0)
    workload.name = name
    return workload


class _IntegerLoss(Sleepy):
    name = "integer-loss"

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return super().loss(output, batch).round().long()


def integer_loss() -> Sleepy:
    return _IntegerLoss(step_ms=1.0)


class _WrongLogits(Sleepy):
    """Has the eval hook, but its logits are [batch, time, 16] instead of [batch, time, 256]."""

    name = "wrong-logits"
    eval_seq_len = 128

    def logits(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*tokens.shape, 16)


def wrong_logits() -> Sleepy:
    return _WrongLogits(step_ms=1.0)
