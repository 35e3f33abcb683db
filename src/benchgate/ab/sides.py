"""What else an A/B's two sides measured: their peak memory and their loss, as the baseline of a run that
has no stored one.

Every round launches the base and the candidate as bench runs of the same configuration, seed and
batches (ab/runner.py), and each side writes a whole metrics file: memory by phase (measure/steps.py
memory_block) and every step's loss. Where the run has no stored baseline at a world size (a pull
request on a fresh CI runner with `--base`), the compare stage's memory row reads NEW and its loss slope
has nothing beside it; the A/B's base side is then that baseline, as it is the timing's:

    peak memory (ws=N)           the sides' peaks (CPU: max RSS; CUDA: allocated), each the median over
                                 the rounds; WARN beyond gate.tolerances.memory_increase_pct, the rule
                                 of a stored baseline's memory row
    peak reserved memory (ws=N)  on CUDA only, the sides' peak reserved bytes: what the caching
                                 allocator holds, which another job on the GPU cannot have; same rule
    loss slope (ws=N)            both sides' slopes over the same steps of the rounds (each step's loss
                                 the mean over rounds); the rule stays the candidate's own slope, FAIL
                                 where it rises with confidence, now in its bench or its A/B rounds
                                 (the bench's figure and interval stay in the note)
    final loss (ws=N)            the last step's loss of each side, the mean over rounds: the same batches
                                 from the same weights, so a change that trains worse shows here. INFO:
                                 gate.tolerances has no tolerance for it, and a loss's scale is the
                                 workload's

The rows keep the figure columns' meaning (checks/paired.py): `baseline` the stored baseline's (none
here), `current` this run's bench figure, and the A/B's pair in `ab_base` and `ab_candidate`, whose
change is `change`. Where a stored baseline exists the compare stage's rows stand as they are: the A/B
decides timing only. The compare stage's note that there is "nothing to compare against" is rewritten
to say what the A/B's base stood in for, and what still has no baseline (the eval: the A/B runs none).

Pure: metrics dicts in, rows out; ab/stage.py reads the rounds' files.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchgate.config import Tolerances
from benchgate.kit import hac, stats
from benchgate.results.comparison import Check, Comparison

MIB = 2**20
# The compare stage's note for a run without a stored baseline (checks/compare.py), and this module's
# rewrite of it: both start so, and a rewrite replaces either (a resumed A/B rewrites it again).
NO_BASELINE = "no baseline for machine profile "
STOOD_IN = "no stored baseline for machine profile "


@dataclass(frozen=True)
class Sides:
    """The metrics files (metrics-ws<N>.json) of one world size's rounds: the base's and the candidate's,
    one pair per round, in round order."""

    base: list[dict[str, Any]]
    candidate: list[dict[str, Any]]

    def __post_init__(self) -> None:
        if len(self.base) != len(self.candidate):
            raise ValueError(
                f"A/B sides: got {len(self.base)} base and {len(self.candidate)} candidate metrics files "
                "(expected one of each per round)"
            )


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _range(values: Sequence[float], scale: float, unit: str) -> str:
    low, high = min(values) / scale, max(values) / scale
    return f"{low:,.1f} {unit}" if low == high else f"{low:,.1f} to {high:,.1f} {unit}"


def _memory_row(
    name: str, key: str, ws: int, sides: Sides, current: float | None, tol: Tolerances, against: str
) -> Check | None:
    """One memory figure of both sides (`key` of the metrics' memory block), as a row; None where a side
    lacks it (reserved memory on CPU)."""
    base = [m["memory"].get(key) for m in sides.base]
    candidate = [m["memory"].get(key) for m in sides.candidate]
    if not base or any(v is None for v in [*base, *candidate]):
        return None
    ab_base, ab_candidate = _median(base), _median(candidate)
    change = stats.relative_change_pct(ab_base, ab_candidate)
    limit = tol.memory_increase_pct
    kind = sides.candidate[0]["memory"].get("peak_kind", key) if key == "peak_bytes" else key
    note = (
        f"{against}: each side's {kind}, the median over {len(base)} rounds (base "
        f"{_range(base, MIB, 'MiB')}, candidate {_range(candidate, MIB, 'MiB')}); no stored baseline "
        f"at ws={ws}"
    )
    return Check(
        name=name,
        unit="MiB",
        current=None if current is None else current / MIB,
        baseline=None,
        change=change,
        rule=f"WARN if increase > {limit:g}%",
        status="WARN" if change > limit else "PASS",
        note=note,
        world_size=ws,
        decided_by="ab",
        ab_base=ab_base / MIB,
        ab_candidate=ab_candidate / MIB,
    )


def _mean_curve(metrics: list[dict[str, Any]]) -> list[float]:
    """Each step's loss, the mean over the rounds (every round trains afresh from the same seed)."""
    curves = [m["samples"]["loss"] for m in metrics]
    steps = min(len(c) for c in curves)
    return [statistics.fmean(c[i] for c in curves) for i in range(steps)]


def _loss_rows(
    ws: int, sides: Sides, checks: list[Check], bench: dict[str, Any] | None, tol: Tolerances, against: str
) -> list[Check]:
    """The loss slope row decided with the A/B's sides beside it, and the final loss row."""
    base, candidate = _mean_curve(sides.base), _mean_curve(sides.candidate)
    losses = bench["samples"]["loss"] if bench else []
    if min(len(base), len(candidate), len(losses)) < 3:  # a slope needs three points (config.MIN_STEPS)
        return checks
    # Autocorrelation-aware intervals, as the compare stage's slope row (checks/loss.py).
    fits = [hac.hac_slope(curve, confidence=tol.confidence) for curve in (base, candidate, losses)]
    rising = [fit.ci_low > tol.loss_slope_max for fit in fits]
    said = (
        f"{against}: base slope {fits[0].slope:.3g}, candidate {fits[1].slope:.3g} nats/step over the same "
        f"{len(base)} steps of {len(sides.base)} rounds (the interval is the candidate's there); this run's "
        f"bench {fits[2].slope:.3g} [{fits[2].ci_low:.3g}, {fits[2].ci_high:.3g}] over {len(losses)} steps"
    )
    out = []
    for check in checks:
        if check.name == f"loss slope (ws={ws})" and check.baseline is None:
            where = [w for w, r in (("its bench", rising[2]), ("its A/B rounds", rising[1])) if r]
            note = f"loss rises over the measured window ({' and '.join(where)})" if where else ""
            check = replace(
                check,
                ci_low=fits[1].ci_low,
                ci_high=fits[1].ci_high,
                rule=f"FAIL if slope > {tol.loss_slope_max:g} with {tol.confidence:.0%} confidence, in this "
                "run's bench or in the candidate's A/B rounds",
                status="FAIL" if where else "PASS",
                note="; ".join(filter(None, [note, said])),
                world_size=ws,
                decided_by="ab",
                ab_base=fits[0].slope,
                ab_candidate=fits[1].slope,
            )
        out.append(check)
    out.append(
        Check(
            name=f"final loss (ws={ws})",
            unit="",
            current=float(losses[-1]),
            change=stats.relative_change_pct(base[-1], candidate[-1]) if base[-1] else None,
            status="INFO",
            note=(
                f"{against}: each side's loss at its last step ({len(base)}), the mean over "
                f"{len(sides.base)} rounds of the same batches from the same weights; shown, not gated "
                "(gate.tolerances has no tolerance for a loss, whose scale is the workload's)"
            ),
            world_size=ws,
            decided_by="ab",
            ab_base=base[-1],
            ab_candidate=candidate[-1],
        )
    )
    return out


def apply_sides(
    comparison: Comparison,
    ws: int,
    sides: Sides,
    base_description: str,
    tol: Tolerances,
    bench: dict[str, Any] | None = None,
) -> Comparison:
    """The A/B's sides as the baseline of world size `ws`'s memory and loss rows, where the run has no
    stored baseline there (its memory row has no baseline figure: NEW, or UNKNOWN for an unreachable
    MLflow); `comparison` unchanged otherwise. `bench`: this run's metrics at `ws` (its figures stay the
    rows' `current`). A resumed A/B applies its sides again, over all its rounds: the rows of the rounds
    before are replaced."""
    names = [f"peak memory (ws={ws})", f"peak reserved memory (ws={ws})", f"final loss (ws={ws})"]
    stored = next((c for c in comparison.checks if c.name == names[0]), None)
    if not sides.base or stored is None or stored.baseline is not None:
        return comparison
    against = f"A/B vs {base_description}"
    memory = bench["memory"] if bench else {}
    rows = [
        _memory_row(name, key, ws, sides, memory.get(key), tol, against)
        for name, key in ((names[0], "peak_bytes"), (names[1], "cuda_max_reserved_bytes"))
    ]
    checks: list[Check] = []
    for check in comparison.checks:
        if check is stored:
            checks += [row for row in rows if row is not None] or [check]
        elif not (check.decided_by == "ab" and check.name in names[1:]):  # an earlier application's
            checks.append(check)
    return replace(comparison, checks=_loss_rows(ws, sides, checks, bench, tol, against))


def rewrite_baseline_note(comparison: Comparison, base_description: str) -> Comparison:
    """The compare stage's "nothing to compare against" note, once an A/B's base stands in for the
    missing baseline: which world sizes and rows it is the baseline of, and which rows still have none.
    Unchanged where no row was decided by an A/B, or the note is not there."""
    found = [n for n in comparison.notes if n.startswith((NO_BASELINE, STOOD_IN))]
    decided = sorted({c.world_size for c in comparison.checks if c.decided_by == "ab" and c.world_size})
    if not found or not decided:
        return comparison
    memory = {c.world_size for c in comparison.checks if c.decided_by == "ab" and c.name.startswith("peak")}
    what = "tokens/s, peak memory and the loss slope" if set(decided) <= memory else "tokens/s"
    text = (
        f"{STOOD_IN}{comparison.machine_profile!r} and workload {comparison.workload!r}: the A/B's base "
        f"({base_description}) is the baseline of {what} at ws={','.join(map(str, decided))}"
    )
    new = [c.name for c in comparison.checks if c.status == "NEW"]
    if new:
        text += f"; nothing to compare {', '.join(new)} with"
        if any(name.startswith(("perplexity", "probe")) for name in new):
            text += " (the A/B runs no eval)"
    notes = []
    for note in comparison.notes:
        if note is found[0]:
            notes.append(text)
        elif note not in found:
            notes.append(note)
    return replace(comparison, notes=notes)
