"""The Workload protocol: what benchgate needs to know to train, time and evaluate a user's model.

A workload is any object with these members, returned by a factory named as 'module:function'
(``benchgate run --workload my_pkg.bench:make_workload --workload-arg size=large``). benchgate owns the
loop, the timing, the seeds and the process group; the workload owns the model and its data.

Required
    name                 str   identifies workload and size in baselines ("gpt-tiny"); change it when
                               the work per step changes, so old baselines are not compared against.
                               Letters, digits, '.', '_' and '-', starting with a letter or digit, at
                               most 100 characters: it names a directory and goes into MLflow filters
    tokens_per_step      int   tokens one rank (one data-parallel replica, see mesh_dims) consumes
                               per optimizer step (> 0)
    build_model(device)        -> nn.Module on `device`; benchgate seeds torch before calling it
    make_optimizer(model)      -> torch.optim.Optimizer
    make_batch(generator, device)  -> any batch; draw randomness only from `generator` (seeded per rank)
    forward(model, batch)      -> model output (timed as the 'forward' range)
    loss(output, batch)        -> scalar tensor (shape []), floating point, finite (the 'loss' range)

Optional FLOPs by hand
    flops_per_token()          -> FlopsPerToken: model FLOPs per trained token by 6N and attention-aware
                               (> 0). Without it the metrics have no 6N or attention-aware figures;
                               the counted FLOPs (one training step under torch's FlopCounterMode,
                               benchgate.workloads.counted_flops) are there for every workload.

Optional parallelism (workloads/parallel.py; without it: DDP at world sizes above 1)
    parallelize(model, mesh)   -> nn.Module to train: the workload's own parallelism (FSDP2's
                               fully_shard, tensor parallel, activation checkpointing, float8, a
                               compiled block) applied to build_model's model, given a DeviceMesh of
                               the launch's ranks; called at every world size, ws=1 included
    mesh_dims            dict  the mesh's dimensions, outermost first, one size may be -1 (the rest):
                               {"dp": -1} by default, {"dp": -1, "tp": 2} for 2-way tensor parallel.
                               Dimensions named "dp..." are data parallel: their ranks read different
                               batches, and `tokens_per_step` counts one such replica's tokens

Optional periodic event (none without it)
    period_steps         int   the workload does something every this many steps (a checkpoint, an
                               eval, a log flush; its own count, warmup included) (> 0): every A/B round
                               measures a whole number of such periods, at least one, so that each
                               round holds the event alike (ab/round_plan.py)

Optional eval hook (the eval stage is skipped without it)
    logits(model, tokens)      -> [batch, time, 256] next-byte logits for int64 byte tokens [batch, time]
    eval_seq_len         int   context length the model accepts (> 0)

The members are checked when the workload is loaded (`check_members`), and the pipeline's first task
runs one real training step on the bench's device to check the loss
(`benchgate.workloads.training.check_training_step`), so a broken contract is refused (exit 2) within seconds
instead of after the benchmark.
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from benchgate.config import shown
from benchgate.errors import WorkloadError
from benchgate.workloads.flops import ModelShape, flops_per_token_6nd, flops_per_token_attention
from benchgate.workloads.parallel import check_mesh_dims

# `name` becomes a directory of the baseline store and a value in MLflow filter strings: nothing that
# could climb out of a directory or close a quoted string.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_NAME_LENGTH = 100
VOCAB_SIZE = 256  # the eval's byte tokens (benchgate.workloads.shard)


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


METHODS = ("build_model", "make_optimizer", "make_batch", "forward", "loss")
REQUIRED_MEMBERS = ("name", "tokens_per_step", *METHODS)


def is_count(value: Any) -> bool:
    """An int > 0 that is not a bool (True is an int to Python, and would count as 1)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def is_positive_real(value: Any) -> bool:
    """A finite int or float > 0 that is not a bool."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0


def _described(value: Any) -> str:
    return f"{shown(value)} ({type(value).__name__})"


def member_error(where: str, member: str, problem: str) -> WorkloadError:
    return WorkloadError(f"{where}: workload member `{member}` {problem}")


def missing_eval_hook(workload: Workload) -> str | None:
    """Why the eval stage cannot run `workload` (which part of the optional eval hook it lacks), or None."""
    see = "see the Workload protocol in benchgate/workloads/base.py"
    if not callable(getattr(workload, "logits", None)):
        return f"the workload has no eval hook: it has no `logits` method, so no logits to score ({see})"
    if not is_count(getattr(workload, "eval_seq_len", None)):
        return f"the workload has no eval hook: it has `logits` but no `eval_seq_len` ({see})"
    return None


def supports_eval(workload: Workload) -> bool:
    return missing_eval_hook(workload) is None


def check_members(workload: Any, where: str) -> None:
    """Check every member of the protocol for its type and value; WorkloadError names the first bad one.

    Cheap (flops_per_token() is called where the workload has one, nothing is built), so every stage
    that loads the workload runs it. `where` starts each message, e.g.
    "bench.workload: my_bench:make_workload".
    """
    missing = [m for m in REQUIRED_MEMBERS if not hasattr(workload, m)]
    if missing:
        raise WorkloadError(f"{where} returned {type(workload).__name__}, which lacks {', '.join(missing)}")
    name = workload.name
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not NAME_PATTERN.fullmatch(name):
        raise member_error(
            where,
            "name",
            f"is {_described(name)}; expected letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit, at most {MAX_NAME_LENGTH} characters (it names the baseline directory and goes "
            "into MLflow filters)",
        )
    if not is_count(workload.tokens_per_step):
        raise member_error(
            where, "tokens_per_step", f"is {_described(workload.tokens_per_step)}; expected an int > 0"
        )
    for method in METHODS:
        if not callable(getattr(workload, method)):
            raise member_error(
                where, method, f"is {_described(getattr(workload, method))}; expected a method"
            )
    declared_flops(workload, where)
    parallelize = getattr(workload, "parallelize", None)
    if parallelize is not None and not callable(parallelize):
        raise member_error(where, "parallelize", f"is {_described(parallelize)}; expected a method")
    check_mesh_dims(workload, where)
    period_steps = getattr(workload, "period_steps", None)
    if period_steps is not None and not is_count(period_steps):
        raise member_error(
            where,
            "period_steps",
            f"is {_described(period_steps)}; expected an int > 0 (the steps from one of the workload's "
            "periodic events to the next), or no such member",
        )
    eval_seq_len = getattr(workload, "eval_seq_len", None)
    if eval_seq_len is not None and not is_count(eval_seq_len):
        raise member_error(where, "eval_seq_len", f"is {_described(eval_seq_len)}; expected an int > 0")
    logits = getattr(workload, "logits", None)
    if logits is not None and not callable(logits):
        raise member_error(where, "logits", f"is {_described(logits)}; expected a method")


def declared_flops(workload: Any, where: str) -> FlopsPerToken | None:
    """The workload's own `flops_per_token()`, checked; None when it has none (the member is optional)."""
    method = getattr(workload, "flops_per_token", None)
    if method is None:
        return None
    if not callable(method):
        raise member_error(where, "flops_per_token", f"is {_described(method)}; expected a method")
    try:
        flops = method()
    except Exception as e:  # the user's code: any failure is the workload's
        raise member_error(where, "flops_per_token()", f"raised {type(e).__name__}: {e}") from None
    check_flops(flops, where)
    return flops  # type: ignore[no-any-return]


def check_flops(flops: Any, where: str) -> None:
    """flops_per_token() returns a FlopsPerToken (or any object with its two fields) of finite numbers > 0."""
    fields = ("dense_6n", "attention_aware")
    if not all(hasattr(flops, field) for field in fields):
        raise member_error(
            where,
            "flops_per_token()",
            f"returned {_described(flops)}; expected a FlopsPerToken(dense_6n=..., attention_aware=...)",
        )
    for field in fields:
        value = getattr(flops, field)
        if not is_positive_real(value):
            raise member_error(
                where,
                f"flops_per_token().{field}",
                f"is {_described(value)}; expected a finite number > 0 (FLOPs per trained token)",
            )


def check_loss(loss: Any, where: str) -> None:
    """The loss must be a 0-dim floating-point tensor. Reads no value, so it never waits on a GPU."""
    if not isinstance(loss, torch.Tensor):
        raise member_error(where, "loss", f"returned {_described(loss)}; expected a scalar torch.Tensor")
    if loss.dim() != 0:
        raise member_error(where, "loss", f"has shape {list(loss.shape)}; expected a scalar (shape [])")
    if not loss.is_floating_point():
        raise member_error(where, "loss", f"has dtype {loss.dtype}; expected a floating-point tensor")


def check_logits(logits: Any, tokens: torch.Tensor, where: str) -> None:
    """The eval hook's output for `tokens` [batch, time]: finite floating [batch, time, 256] logits."""
    expected = [*tokens.shape, VOCAB_SIZE]
    if not isinstance(logits, torch.Tensor):
        raise member_error(where, "logits", f"returned {_described(logits)}; expected a tensor {expected}")
    if list(logits.shape) != expected or not logits.is_floating_point():
        raise member_error(
            where,
            "logits",
            f"returned shape {list(logits.shape)} of {logits.dtype} for tokens of shape "
            f"{list(tokens.shape)}; expected floating-point logits of shape {expected}",
        )
    if not bool(torch.isfinite(logits).all()):
        raise member_error(where, "logits", "returned non-finite values; expected finite logits")


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
    check_members(workload, f"bench.workload: {spec}")
    return workload  # type: ignore[no-any-return]


def _format_args(args: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in (args or {}).items())
