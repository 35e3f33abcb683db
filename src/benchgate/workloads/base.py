"""The Workload protocol: what benchgate needs to know to train, time and evaluate a user's model.

A workload is any object with these members, returned by a factory named as 'module:function'
(``benchgate run --workload my_pkg.bench:make_workload --workload-arg size=large``). benchgate owns the
loop, the timing, the seeds and the process group; the workload owns the model and its data.

Required
    name                 str   identifies workload and size in baselines ("gpt-tiny"); change it when
                               the work per step changes, so old baselines are not compared against
    tokens_per_step      int   tokens one rank consumes per optimizer step
    build_model(device)        -> nn.Module on `device`; benchgate seeds torch before calling it
    make_optimizer(model)      -> torch.optim.Optimizer
    make_batch(generator, device)  -> any batch; draw randomness only from `generator` (seeded per rank)
    forward(model, batch)      -> model output (timed as the 'forward' range)
    loss(output, batch)        -> scalar tensor (the 'loss' range)
    flops_per_token()          -> FlopsPerToken: model FLOPs per trained token by both estimators

Optional eval hook (the eval stage is skipped without it)
    logits(model, tokens)      -> [batch, time, 256] next-byte logits for int64 byte tokens [batch, time]
    eval_seq_len         int   context length the model accepts
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from benchgate.errors import WorkloadError
from benchgate.flops import ModelShape, flops_per_token_6nd, flops_per_token_attention


@dataclass(frozen=True)
class FlopsPerToken:
    """Training FLOPs per token: 6N (Kaplan et al.) and 6N + attention (PaLM appendix B)."""

    dense_6n: float
    attention_aware: float

    @classmethod
    def from_shape(cls, shape: ModelShape) -> FlopsPerToken:
        return cls(flops_per_token_6nd(shape), flops_per_token_attention(shape))


@runtime_checkable
class Workload(Protocol):
    name: str
    tokens_per_step: int

    def build_model(self, device: torch.device) -> nn.Module: ...
    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer: ...
    def make_batch(self, generator: torch.Generator, device: torch.device) -> Any: ...
    def forward(self, model: nn.Module, batch: Any) -> Any: ...
    def loss(self, output: Any, batch: Any) -> torch.Tensor: ...
    def flops_per_token(self) -> FlopsPerToken: ...


REQUIRED_MEMBERS = (
    "name",
    "tokens_per_step",
    "build_model",
    "make_optimizer",
    "make_batch",
    "forward",
    "loss",
    "flops_per_token",
)


def supports_eval(workload: Workload) -> bool:
    return callable(getattr(workload, "logits", None)) and isinstance(
        getattr(workload, "eval_seq_len", None), int
    )


def load_workload(spec: str, args: dict[str, Any] | None = None) -> Workload:
    """Import 'module:function', call it with `args`, and check the result against the protocol."""
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any import-time failure of user code is a bad workload spec
        raise WorkloadError(
            f"bench.workload: cannot import module {module_name!r} ({type(e).__name__}: {e})"
        ) from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise WorkloadError(f"bench.workload: {module_name!r} has no callable {func_name!r}")
    try:
        workload = factory(**(args or {}))
    except Exception as e:
        raise WorkloadError(
            f"bench.workload: {spec}({_format_args(args)}) raised {type(e).__name__}: {e}"
        ) from None
    missing = [m for m in REQUIRED_MEMBERS if not hasattr(workload, m)]
    if missing:
        raise WorkloadError(
            f"bench.workload: {spec} returned {type(workload).__name__}, which lacks {', '.join(missing)}"
        )
    if not isinstance(workload.tokens_per_step, int) or workload.tokens_per_step <= 0:
        raise WorkloadError(
            f"bench.workload: {spec}: tokens_per_step must be a positive int, got "
            f"{workload.tokens_per_step!r}"
        )
    return workload  # type: ignore[no-any-return]


def _format_args(args: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in (args or {}).items())
