"""Comparable or refused: whether a baseline and this run measured the same thing.

A timing comparison means something only when the two runs differ in the code under test and in nothing
that changes the speed by itself. A difference in any field below makes the two numbers measure different
things, so the comparison is refused (BaselineError, exit 2) instead of reported as a regression:

    machine profile         hardware and performance-relevant software; another machine is another speed
    workload                another model, data or step is another benchmark
    world_size              a metrics file must hold the world size its name says; ws=2 is not ws=1
    device                  "cpu" or a GPU name: the hardware that ran the steps, not only the host's
    precision               fp32, bf16, fp16 run different kernels at different speeds
    tokens_per_step_global  changes what one step is: its time and its tokens/s measure different work
    threads_per_rank        changes the per-rank speed: more intra-op threads make a CPU step faster

A world size that only this run has is not refused: compare shows it as NEW.

Some differences leave the runs comparable, and are returned as notes:

    steps                   p50s compare, but tails and confidence intervals rest on different sample counts
    warmup                  with fewer warmup steps, early measured steps may still be warming up

Older metrics files may lack `device` or `threads_per_rank`; a field missing on either side is unknown and
is not grounds for refusal, and a note says it was not checked.

Within one run every metrics-ws<N>.json must also record the machine profile of its env.json: on a
cluster each bench task runs in its own pod, perhaps on another node, and a run whose files come from
two machines is not one run (`check_profiles`).
"""

from __future__ import annotations

from typing import Any

from benchgate.errors import BaselineError
from benchgate.results.bundle import Bundle
from benchgate.results.figures import counted_unit

# (field of metrics-ws<N>.json, why a difference makes the runs incomparable), in the order checked.
REFUSED_FIELDS = (
    ("device", "the steps ran on other hardware"),
    ("precision", "another number format runs other kernels"),
    ("tokens_per_step_global", "a step is a different amount of work"),
    ("threads_per_rank", "the thread count changes the per-rank speed"),
)
# (field, what its difference does to the comparison): noted, never refused.
NOTED_FIELDS = (
    ("steps", "steps differ", "p50s compare, but tails and CIs are not like for like"),
    ("warmup", "warmup differs", "early measured steps of one run may still be warming up"),
)
_MISSING = object()


def check_profiles(bundle: Bundle) -> None:
    """Every metrics-ws<N>.json of one run must record the machine profile that its env.json records
    (on a cluster each bench task runs in its own pod, maybe on another node): raise BaselineError naming
    the file and both profiles otherwise. A metrics file that records no profile is not checked."""
    expected = bundle.machine_profile
    for ws, metrics in sorted(bundle.metrics.items()):
        recorded = metrics.get("machine_profile")
        if recorded is not None and recorded != expected:
            raise BaselineError(
                f"{bundle.path}: metrics-ws{ws}.json records machine profile {recorded!r}, env.json records "
                f"{expected!r}: the bench ran on another machine than the env stage described, so this "
                "run mixes results from two machines"
            )


def check_comparable(baseline: Bundle, current: Bundle) -> list[str]:
    """Raise BaselineError (exit 2) when the two runs cannot be compared; return notes for differences that
    do not prevent comparison.

    Each run's own files must agree on its machine profile (`check_profiles`, this run first); then the
    machine profile and workload, and per world size present in both runs the fields of REFUSED_FIELDS,
    must be equal. Differences in NOTED_FIELDS, and fields an older file does not record, become notes.
    """
    check_profiles(current)
    check_profiles(baseline)
    if baseline.machine_profile != current.machine_profile:
        raise BaselineError(
            f"baseline {baseline.path} is of machine profile {baseline.machine_profile!r}, this run is "
            f"{current.machine_profile!r}: results from different machines are never compared"
        )
    if baseline.workload != current.workload:
        raise BaselineError(
            f"baseline {baseline.path} is of workload {baseline.workload!r}, this run is "
            f"{current.workload!r}: different workloads are never compared"
        )
    notes: list[str] = []
    for ws, cur in sorted(current.metrics.items()):
        base = baseline.metrics.get(ws)
        if base is not None:
            notes.extend(_check_world_size(baseline, ws, base, cur))
    return notes


def _refusal(baseline: Bundle, ws: int, key: str, base: Any, cur: Any, why: str) -> BaselineError:
    return BaselineError(
        f"baseline {baseline.path}: metrics-ws{ws}.json has {key}={base!r}, this run has {cur!r}: "
        f"not comparable ({why})"
    )


def _check_world_size(baseline: Bundle, ws: int, base: dict[str, Any], cur: dict[str, Any]) -> list[str]:
    base_ws, cur_ws = base.get("world_size", _MISSING), cur.get("world_size", _MISSING)
    if base_ws != ws or cur_ws != ws:
        raise _refusal(
            baseline,
            ws,
            "world_size",
            None if base_ws is _MISSING else base_ws,
            None if cur_ws is _MISSING else cur_ws,
            f"a metrics-ws{ws}.json must hold world size {ws}",
        )
    # A file without `unit` was written before workloads could count anything but tokens: tokens.
    if counted_unit(base) != counted_unit(cur):
        why = "tokens/s counts different things"
        raise _refusal(baseline, ws, "unit", counted_unit(base), counted_unit(cur), why)
    unknown: dict[str, list[str]] = {"the baseline's": [], "this run's": []}
    for key, why in REFUSED_FIELDS:
        base_value, cur_value = base.get(key, _MISSING), cur.get(key, _MISSING)
        if base_value is _MISSING or cur_value is _MISSING:
            if base_value is _MISSING:
                unknown["the baseline's"].append(key)
            if cur_value is _MISSING:
                unknown["this run's"].append(key)
            continue
        if base_value != cur_value:
            raise _refusal(baseline, ws, key, base_value, cur_value, why)
    notes = [
        f"ws={ws}: {side} metrics-ws{ws}.json does not record {', '.join(keys)} (an older file): "
        "unknown, so not checked"
        for side, keys in unknown.items()
        if keys
    ]
    for key, label, consequence in NOTED_FIELDS:
        base_value, cur_value = base.get(key), cur.get(key)
        if base_value is not None and cur_value is not None and base_value != cur_value:
            notes.append(f"ws={ws}: {label} (baseline {base_value}, this run {cur_value}): {consequence}")
    return notes
