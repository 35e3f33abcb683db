"""The workload contract checked: a loaded workload against the protocol of `benchgate.workloads.base`.

`check_members` runs wherever a workload is loaded (`load_workload`): cheap, nothing is built, every
member checked for its type and value, and the first bad one named in a WorkloadError (exit 2). What can
only be checked by running the workload's code is checked where it runs: `check_loss` on each step's
loss, `check_logits` on the eval hook's output, `declared_flops` on `flops_per_token()`; the pipeline's
first task runs one real step (`benchgate.workloads.training.check_training_step`) so that these fail
within seconds instead of after the benchmark.

Every message has one form, ``<where>: workload member `<member>` <problem>`` (`member_error`), where
`where` says which workload was loaded, e.g. "bench.workload: my_bench:make_workload".

This module knows the protocol's member names, not its types: `base` imports it (`load_workload`
checks what it loads), so it cannot import `base`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Protocol

import torch

from benchgate.config import shown
from benchgate.errors import WorkloadError
from benchgate.workloads.parallel import check_mesh_dims

# `name` becomes a directory of the baseline store and a value in MLflow filter strings: nothing that
# could climb out of a directory or close a quoted string.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_NAME_LENGTH = 100
# A workload's `unit`: it names the rate in rows and tables ("images/s") and goes into MLflow params.
UNIT_PATTERN = re.compile(r"[a-z]{1,20}")
VOCAB_SIZE = 256  # the eval's byte tokens (benchgate.workloads.shard)

METHODS = ("build_model", "make_optimizer", "make_batch", "forward", "loss")
REQUIRED_MEMBERS = ("name", "tokens_per_step", *METHODS)


class FlopsFields(Protocol):
    """What `flops_per_token()` returns: a FlopsPerToken, or any object with its two fields."""

    @property
    def dense_6n(self) -> float: ...
    @property
    def attention_aware(self) -> float: ...


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
    """The WorkloadError for one bad member: ``<where>: workload member `<member>` <problem>``."""
    return WorkloadError(f"{where}: workload member `{member}` {problem}")


def missing_eval_hook(workload: object) -> str | None:
    """Why the eval stage cannot run `workload` (which part of the optional eval hook it lacks), or None."""
    see = "see the Workload protocol in benchgate/workloads/base.py"
    reason = getattr(workload, "eval_skipped", None)
    if isinstance(reason, str) and reason and not callable(getattr(workload, "logits", None)):
        return f"the workload has no eval hook: {reason}"  # the workload's own reason (an image model's)
    if not callable(getattr(workload, "logits", None)):
        return f"the workload has no eval hook: it has no `logits` method, so no logits to score ({see})"
    if not is_count(getattr(workload, "eval_seq_len", None)):
        return f"the workload has no eval hook: it has `logits` but no `eval_seq_len` ({see})"
    return None


def supports_eval(workload: object) -> bool:
    """Whether `workload` has the whole optional eval hook: a `logits` method and an `eval_seq_len` > 0."""
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
    unit = getattr(workload, "unit", None)
    if unit is not None and not (isinstance(unit, str) and UNIT_PATTERN.fullmatch(unit)):
        raise member_error(
            where,
            "unit",
            f'is {_described(unit)}; expected a plural noun in lowercase letters, at most 20 ("images", '
            '"clips": what tokens_per_step counts), or no such member',
        )
    eval_seq_len = getattr(workload, "eval_seq_len", None)
    if eval_seq_len is not None and not is_count(eval_seq_len):
        raise member_error(where, "eval_seq_len", f"is {_described(eval_seq_len)}; expected an int > 0")
    logits = getattr(workload, "logits", None)
    if logits is not None and not callable(logits):
        raise member_error(where, "logits", f"is {_described(logits)}; expected a method")


def declared_flops(workload: Any, where: str) -> FlopsFields | None:
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
