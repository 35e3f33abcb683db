"""The strict value types of the config's fields: what a number, a switch, a path and a workload
argument may be, and which world sizes the pipeline can run.

Strict where a user writes values (the TOML file, JSON flags, the pipeline's parameters): a number is
a number (an integer one an integer), a switch is true or false, and nothing is read out of a string.
Kept apart from the models in `benchgate.config`, which use these types, so `kfp.params` can check
the resolved defaults with the same rules.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

WorkloadArg = str | int | float | bool

# Every value travels as JSON (config.json, the pipeline's parameters), where KFP keeps numbers as
# doubles: a larger integer would arrive changed, and one past 4300 digits cannot be written at all.
MAX_INT = 2**53 - 1


def _a_number(value: Any) -> Any:
    # pydantic would read `true` as 1 and "10" as 10 where a number is expected: `steps = true` and
    # `steps = "10"` are mistakes in the file, not one step and ten.
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(value, str):
        raise ValueError("expected a number, got a string: write the number without quotes")
    return value


def _an_integer(value: Any) -> Any:
    # pydantic would read 10.0 as 10. A float where a count is meant is a mistake in the file; the one
    # place numbers arrive as floats, KFP's dict parameters, restores them (kfp.params).
    if isinstance(value, float):
        raise ValueError("expected an integer, got a float")
    return _a_number(value)


def _a_boolean(value: Any) -> Any:
    # pydantic would read "yes", "off", 1 and 0 as booleans: a switch is written true or false.
    if not isinstance(value, bool):
        kind = "a string" if isinstance(value, str) else type(value).__name__
        raise ValueError(f"expected true or false, got {kind}")
    return value


def _usable_path(value: Any) -> Any:
    # An empty string would become Path("."), the working directory; a NUL byte fails every system call,
    # and so does a lone surrogate (JSON can carry one), which has no bytes to name a file with.
    if isinstance(value, str):
        try:
            value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise ValueError("expected a path: it has characters no file name can hold") from None
        if not value.strip() or "\x00" in value:
            raise ValueError("expected a path: not empty, without NUL characters")
    return value


def is_workload_arg(value: Any) -> bool:
    """Whether `value` can be a workload argument: a string, a boolean, or a finite JSON-safe number."""
    if isinstance(value, str | bool):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and abs(value) <= MAX_INT


def _json_safe(value: int) -> int:
    # A validator, not a Field bound: a second `le` in the same field would replace the field's own.
    if abs(value) > MAX_INT:
        raise ValueError(f"expected at most {MAX_INT} in magnitude (JSON and KFP keep numbers as doubles)")
    return value


Int = Annotated[int, BeforeValidator(_an_integer), AfterValidator(_json_safe)]
Float = Annotated[float, BeforeValidator(_a_number)]
Bool = Annotated[bool, BeforeValidator(_a_boolean)]
UsablePath = Annotated[Path, BeforeValidator(_usable_path)]


def check_world_sizes(sizes: list[int]) -> list[int]:
    """`sizes` as given; ValueError unless they are [1] or [1, N] with N >= 2, in that order.

    The pipeline has one ws=1 bench task and one ws=N task (N = world_size_n), and the scaling check
    compares exactly those two, so no other list can run. A list out of order or with a repeat is
    refused rather than reordered: it is not what was asked for, and the user should see that. Shared
    by the config model (the TOML file, the flags, the pipeline's parameters) and `kfp.params` (the
    resolved defaults).
    """
    if not sizes:
        raise ValueError("needs at least one world size")
    if any(n < 1 for n in sizes):
        raise ValueError("every world size must be >= 1")
    if len(set(sizes)) != len(sizes):
        raise ValueError("world sizes must be distinct: each one is benchmarked once")
    if sizes != sorted(sizes):
        raise ValueError(f"world sizes must be in increasing order: {sorted(sizes)}")
    if sizes[0] != 1 or len(sizes) > 2:
        raise ValueError("expected [1] or [1, N] with N >= 2 (the pipeline runs ws=1 and one larger ws=N)")
    return sizes
