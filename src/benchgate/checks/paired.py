"""One figure per run: a row an A/B decided keeps the run's own figures, and the A/B's pair goes beside
them.

The A/B stage (ab/rows.py) writes its decision as a row whose `baseline` and `current` are the A/B's
base and candidate: rates of another, paired measurement (both sides in turns, in rounds, each round's
tokens over its total time), not the stored baseline's figure or this run's bench figure. Shown in those
columns, a run had two tokens/s (the A/B candidate in the verdict table, the bench's in `benchgate
history`, MLflow and the report) and "baseline" two meanings (the stored baseline, or the A/B base:
68,932 and 21,452 tok/s for identical code on a busy host). `with_run_figures` moves the pair into
`ab_base` and `ab_candidate` and puts back the figures the compare stage wrote for that row, so those
two columns mean one thing in every row. The change and its interval stay the A/B's: they decided.

`shown_figures` is how a table reads any row, rows written before this split included.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchgate.results.comparison import SCALING, TIMING, Check, Comparison

# The rows an A/B can decide: the timing row of a world size, and the scaling-efficiency row.
PAIRED_METRICS = (TIMING, SCALING)


def _unsplit(check: Check) -> bool:
    """An A/B-decided row that still holds the A/B's pair where the run's figures belong."""
    return check.decided_by == "ab" and check.metric in PAIRED_METRICS and check.ab_base is None


def with_run_figures(comparison: Comparison, compared: Comparison | None) -> Comparison:
    """`comparison` with each A/B-decided row's pair moved to `ab_base`/`ab_candidate`, and its baseline
    and current taken from the same row of `compared` (the comparison before the A/B rewrote it: the
    stored baseline's figure and this run's); None where `compared` has no such figures."""
    before = {(c.metric, c.world_size): c for c in compared.checks} if compared is not None else {}
    checks = []
    for check in comparison.checks:
        if _unsplit(check):
            earlier = before.get((check.metric, check.world_size))
            run = earlier if earlier is not None and not _unsplit(earlier) else None
            check = replace(
                check,
                ab_base=check.baseline,
                ab_candidate=check.current,
                baseline=run.baseline if run else None,
                current=run.current if run else None,
            )
        checks.append(check)
    return replace(comparison, checks=checks)


@dataclass(frozen=True)
class ShownFigures:
    """A row's figures as the tables show them: the stored baseline's and this run's, and the A/B's
    pair where an A/B decided the row (None otherwise)."""

    baseline: float | None
    current: float | None
    ab_base: float | None
    ab_candidate: float | None

    @property
    def paired(self) -> bool:
        return self.ab_base is not None or self.ab_candidate is not None


def shown_figures(check: Check) -> ShownFigures:
    """`check`'s figures by what they are. A row written before the split (its A/B pair still in
    baseline and current) shows the pair as the A/B's and no run figures, never under the wrong label."""
    if _unsplit(check):
        return ShownFigures(None, None, check.baseline, check.current)
    return ShownFigures(check.baseline, check.current, check.ab_base, check.ab_candidate)
