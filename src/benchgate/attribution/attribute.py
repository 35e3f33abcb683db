"""Which entries (operators, kernels, ranges' Python) the change in step time is made of, with intervals.

Input: the profiled rounds of an A/B (ab/explain.py), per round and side the ranks' traces
(attribution/trace_ops.py) and the step times the bench's own timer measured. The sides took turns
step by step, so step i of the base and step i of the candidate ran side by side: each entry's change is
the mean over rounds and steps of the paired differences (candidate - base, milliseconds per step, the
entry's time averaged over ranks), with a circular block bootstrap interval (steps are autocorrelated,
kit/stats.py). The measured change is the same pairing of the timer's step times (the slowest rank's).

An entry's share is its change over the change the A/B's deciding rounds measured (in ms per step, from
their base step time), which many rounds measure better than the profiled ones; where that is not
given, over the profiled rounds' own. Entries are ranked by how much of the change
they surely carry: the end of their interval nearer zero (a slowdown: the largest sure increases first;
a speed-up: the largest sure decreases), so that an operator whose time wanders from step to step on a
busy host does not outrank a smaller change measured on every step. On CPU the
entries' self times partition the host step, so the shares add up to the host's change; on CUDA a kernel
and the operator that launched it are both entries (device and host time overlap), so shares can add up
beyond 100%. An entry seen on one side only is marked `only_in` ("base": gone, "candidate": new).

Ranges whole (trace_ops: a record_function range with every operator inside it) get the same figures
in a list of their own, `ranges`, ranked by their estimated change (a range holds noisy operators, so
its interval is wide even where its change is plain): where a cause scales every operator of a range
(the forward run twice), no five operators carry it and its range does. Ranges nest and hold the
entries, so their shares are read one by one, never summed with the entries'.

What moved against the change is listed apart too, `offsetting`: an operator gone from a slower
candidate (the flash-attention kernel a changed layout no longer reaches, beside the math path's new
matmuls) ranks last by its contribution, and is half of the story. Each operator and kernel carries its
calls per step on each side, and the block the sides' operator counts: a cause spread thin over many
operators (the forward run twice) reads there as every count grown.

Collectives (trace_ops.COMMUNICATION) are also summed apart: at ws=N a scaling regression then reads as
communication or as compute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchgate.attribution.trace_ops import Entry, TraceSteps
from benchgate.kit import stats

SCHEMA_VERSION = 1
TOP = 5  # the entries each view shows
KEPT = 40  # the entries compare.json keeps (the rest carry a negligible share)
RANGES_KEPT = 10
OFFSETTING_KEPT = 5  # entries that surely moved against the change (kept even beyond KEPT)
# ... and carry at least this much of it: a -0.01 ms/step scrap of bookkeeping is no part of the story.
OFFSETTING_MIN_SHARE = 0.02
_MiB = 1024 * 1024


@dataclass(frozen=True)
class ProfiledSide:
    """One side of one profiled round: each rank's trace, and the timer's step times (seconds)."""

    ranks: Sequence[TraceSteps]
    step_time_s: Sequence[float]


@dataclass(frozen=True)
class ProfiledRound:
    base: ProfiledSide
    candidate: ProfiledSide


def _per_step(side: ProfiledSide, steps: int, figure: str) -> list[dict[Any, float]]:
    """Each step's `figure` (TraceSteps' ms, allocated or ranges) per key, averaged over the side's ranks."""
    ranks = len(side.ranks)
    out: list[dict[Any, float]] = [{} for _ in range(steps)]
    for trace in side.ranks:
        rows = getattr(trace, figure)
        for i in range(steps):
            row = out[i]
            for key, value in rows[i].items():
                row[key] = row.get(key, 0.0) + value / ranks
    return out


def _steps(profiled: ProfiledRound) -> int:
    sides = (profiled.base, profiled.candidate)
    return min(min(t.steps for t in s.ranks) for s in sides) if all(s.ranks for s in sides) else 0


def _interval(diffs: list[float], confidence: float) -> tuple[float, float]:
    if len(diffs) < 3 or max(diffs) == min(diffs):
        mean = sum(diffs) / len(diffs) if diffs else 0.0
        return mean, mean
    return stats.block_bootstrap_ci(diffs, np.mean, confidence, resamples=1000, seed=0)


def _change(base: list[float], candidate: list[float], confidence: float) -> dict[str, Any]:
    diffs = [c - b for b, c in zip(base, candidate, strict=True)]
    low, high = _interval(diffs, confidence)
    return {
        "base_ms_per_step": sum(base) / len(base),
        "candidate_ms_per_step": sum(candidate) / len(candidate),
        "change_ms_per_step": sum(diffs) / len(diffs),
        "ci": [low, high],
    }


def attribute(
    rounds: Sequence[ProfiledRound], confidence: float = 0.95, decided_change_ms: float | None = None
) -> dict[str, Any]:
    """compare.json's attribution block for one world size (see the module docstring).

    `decided_change_ms`: the change per step the A/B's deciding rounds measured, which the shares divide
    (many rounds measure it better than a profiled round or two); None: the profiled rounds' own."""
    base: list[dict[Entry, float]] = []
    candidate: list[dict[Entry, float]] = []
    base_steps: list[float] = []
    candidate_steps: list[float] = []
    figures: dict[str, tuple[list[dict[Any, float]], list[dict[Any, float]]]] = {
        "allocated": ([], []),
        "ranges": ([], []),
        "calls": ([], []),
    }
    for profiled in rounds:
        n = min(_steps(profiled), len(profiled.base.step_time_s), len(profiled.candidate.step_time_s))
        base += _per_step(profiled.base, n, "ms")
        candidate += _per_step(profiled.candidate, n, "ms")
        base_steps += [1e3 * s for s in profiled.base.step_time_s[:n]]
        candidate_steps += [1e3 * s for s in profiled.candidate.step_time_s[:n]]
        for figure, (b, c) in figures.items():
            b += _per_step(profiled.base, n, figure)
            c += _per_step(profiled.candidate, n, figure)
    if not base_steps:
        return {"schema_version": SCHEMA_VERSION, "steps": 0, "entries": [], "why": "no profiled steps"}
    measured = _change(base_steps, candidate_steps, confidence)
    total = float(measured["change_ms_per_step"] if decided_change_ms is None else decided_change_ms)
    direction = 1.0 if total >= 0 else -1.0
    base_calls, candidate_calls = figures["calls"]
    entries = [
        {
            **_shared(entry.label, base, candidate, entry, total, confidence),
            "kind": entry.kind,
            "communication": entry.communication,
            **_calls(entry, base_calls, candidate_calls),
        }
        for entry in sorted({e for row in base + candidate for e in row}, key=lambda e: (e.kind, e.name))
    ]
    entries.sort(key=lambda e: -_surely_carried(e, direction))
    # Entries that surely moved against the change (an operator gone from a slower candidate: the
    # attention kernel it no longer runs), the largest first: they rank last above, and they are half
    # of what changed.
    offsetting = sorted(
        (
            e
            for e in entries
            if _surely_carried(e, -direction) > 0
            and abs(float(e["change_ms_per_step"])) >= OFFSETTING_MIN_SHARE * abs(total)
        ),
        key=lambda e: -_surely_carried(e, -direction),
    )[:OFFSETTING_KEPT]
    kept = entries[:KEPT] + [e for e in offsetting if e not in entries[:KEPT]]
    base_ranges, candidate_ranges = figures["ranges"]
    ranges = [
        _shared(name, base_ranges, candidate_ranges, name, total, confidence)
        for name in sorted({name for row in base_ranges + candidate_ranges for name in row})
    ]
    # By the estimate: a range whole holds its large, noisy operators (a matmul), so its interval is
    # wide even where its change is plain; ranked by sure change, a tiny quiet range would come first.
    ranges.sort(key=lambda e: -direction * float(e["change_ms_per_step"]))
    top = entries[:TOP]
    explained = sum(float(e["share_pct"]) for e in top) if total else None
    return {
        "schema_version": SCHEMA_VERSION,
        "steps": len(base_steps),
        "rounds": len(rounds),
        "confidence": confidence,
        "measured": measured,
        "shared_change_ms_per_step": total,  # what share_pct divides
        "explained_by_top_pct": explained,
        "communication": _summed(entries, base, candidate, confidence),
        "calls_per_step": {  # host operators run per step (all ranks' mean), each side
            "base": _total_calls(base_calls),
            "candidate": _total_calls(candidate_calls),
        },
        "entries": [_finite(e) for e in kept],
        "offsetting": [_finite(e) for e in offsetting],
        # Each range whole, its operators included (they overlap: shares do not add up across ranges).
        "ranges": [_finite(r) for r in ranges[:RANGES_KEPT]],
        "allocations": _allocations(*figures["allocated"]),  # empty unless allocations were recorded
    }


def _shared(
    op: str,
    base: list[dict[Any, float]],
    candidate: list[dict[Any, float]],
    key: Any,
    total: float,
    confidence: float,
) -> dict[str, Any]:
    """`key`'s change per step with its interval, its share of `total`, and the side it runs on alone."""
    b = [row.get(key, 0.0) for row in base]
    c = [row.get(key, 0.0) for row in candidate]
    figures = _change(b, c, confidence)
    only_in = "candidate" if not any(b) else "base" if not any(c) else None
    change = float(figures["change_ms_per_step"])
    return {
        "op": op,
        **figures,
        "share_pct": 100.0 * change / total if total else math.nan,
        "only_in": only_in,
    }


def _calls(entry: Entry, base: list[dict[Any, float]], candidate: list[dict[Any, float]]) -> dict[str, float]:
    """An operator's or kernel's calls per step on each side (a range's Python has none)."""
    if entry.kind not in ("cpu", "cuda") or not base:
        return {}
    return {
        "base_calls_per_step": sum(row.get(entry, 0.0) for row in base) / len(base),
        "candidate_calls_per_step": sum(row.get(entry, 0.0) for row in candidate) / len(candidate),
    }


def _total_calls(rows: list[dict[Any, float]]) -> float:
    return sum(n for row in rows for e, n in row.items() if e.kind == "cpu") / len(rows) if rows else 0.0


def _surely_carried(entry: dict[str, Any], direction: float) -> float:
    """The part of the change an entry carries for sure: its interval's end nearer zero, in the change's
    direction. A noisy operator whose mean moved by chance (a matmul of a busy host) has an interval
    reaching across zero and ranks below a small change measured every step (a planted LayerNorm)."""
    low, high = entry["ci"]
    return float(low) if direction > 0 else -float(high)


def _summed(
    entries: list[dict[str, Any]],
    base: list[dict[Entry, float]],
    candidate: list[dict[Entry, float]],
    confidence: float,
) -> dict[str, Any] | None:
    """The collectives' time per step on each side and its change; None where the trace has none."""
    if not any(e["communication"] for e in entries):
        return None
    b = [sum(ms for e, ms in row.items() if e.communication) for row in base]
    c = [sum(ms for e, ms in row.items() if e.communication) for row in candidate]
    return _change(b, c, confidence)


def _allocations(base: list[dict[Any, float]], candidate: list[dict[Any, float]]) -> list[dict[str, Any]]:
    """Operators that allocate more per step (MiB), the largest growth first."""
    names = {name for row in base + candidate for name in row}
    rows: list[dict[str, Any]] = []
    for name in names:
        b = sum(row.get(name, 0.0) for row in base) / len(base)
        c = sum(row.get(name, 0.0) for row in candidate) / len(candidate)
        if c > b:
            rows.append({"op": name, "base_mib_per_step": b / _MiB, "candidate_mib_per_step": c / _MiB})
    rows.sort(key=lambda r: -(float(r["candidate_mib_per_step"]) - float(r["base_mib_per_step"])))
    return rows[:TOP]


def _finite(entry: dict[str, Any]) -> dict[str, Any]:
    """compare.json holds no NaN: a share with no measured change to share is null."""
    share = entry["share_pct"]
    return {**entry, "share_pct": None if isinstance(share, float) and math.isnan(share) else share}
