"""The loss as a trajectory: a loss that diverges, one that rises or falls more slowly than the baseline's,
and, in an A/B, whether the candidate computes the same losses as the base on the same batches.

Three rows per world size, each from what the bench or the A/B rounds recorded:

    loss (ws=N)          the run diverged (metrics' `diverged`, measure/divergence.py): FAIL naming the
                         step and the value where the baseline trains (or there is none); WARN where the
                         baseline diverged as well, which is no regression of this commit
    loss slope (ws=N)    the OLS slope of the measured losses with an autocorrelation-aware (AR(1)-HAC)
                         interval (kit/hac.hac_slope): FAIL where the loss rises with confidence
                         (gate.tolerances.loss_slope_max), or, against a baseline whose loss falls, where
                         it falls more slowly by more than loss_slope_slower_pct of the baseline's slope
                         with confidence (the difference of the two slopes, each with its HAC error) and
                         its losses are not below the baseline's (a flatter slope from a lower loss is a
                         model further along, not a slower learner)
    loss A/B (ws=N)      both sides of every A/B round train from the same seed on the same batches:
                         "numerics unchanged" where their losses agree step by step (within 1e-6
                         relative), else the paired difference B - A over the steps with its HAC
                         interval, FAIL where the candidate's loss is higher by more than
                         gate.tolerances.loss_increase_pct with confidence; its verdict is repeated in the
                         A/B's timing row's note

Consecutive losses are autocorrelated, so an i.i.d. interval is too narrow: on flat AR(1) losses the
i.i.d. slope interval false-FAILed 13% of runs at phi 0.5 and 26% at phi 0.8 (benchmarks/loss_rates.py,
docs/benchmarks.md "Loss trajectory").

Pure: metrics dicts and ab.json outcomes in, rows out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from benchgate.config import Tolerances
from benchgate.errors import BaselineError
from benchgate.kit import hac
from benchgate.results.comparison import TIMING, Check, Comparison, Status

# Step by step, two losses this close are the same numerics (float32 losses of one computation
# reordered differ by ~1e-7 relative).
SAME_NUMERICS_RTOL = 1e-6
_VALUES = ("inf", "-inf", "nan")
_PHASES = ("warmup", "measured")


@dataclass(frozen=True)
class Diverged:
    """Where a run's loss stopped being a number: the step (from 1, warmup included), its phase, the
    first rank seen with it, and the value as text."""

    step: int
    phase: str
    rank: int
    value: str

    def text(self) -> str:
        return f"step {self.step} ({self.value})"


def diverged(metrics: dict[str, Any] | None, where: str = "metrics") -> Diverged | None:
    """The metrics' `diverged` record, checked; None where the run trained (or the file predates it)."""
    record = (metrics or {}).get("diverged")
    if record is None:
        return None
    if not isinstance(record, dict):
        raise BaselineError(f"{where}: diverged: got {record!r}; expected an object or null")
    for key, low in (("step", 1), ("rank", 0)):
        value = record.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise BaselineError(f"{where}: diverged.{key}: got {value!r}; expected an integer >= {low}")
    for key, allowed in (("phase", _PHASES), ("value", _VALUES)):
        if record.get(key) not in allowed:
            raise BaselineError(
                f"{where}: diverged.{key}: got {record.get(key)!r}; expected one of {allowed}"
            )
    return Diverged(record["step"], record["phase"], record["rank"], record["value"])


def loss_checks(ws: int, cur: dict[str, Any], base: dict[str, Any] | None, tol: Tolerances) -> list[Check]:
    """The compare stage's loss rows of world size `ws`: the divergence row where this run diverged,
    else the slope row (where it measured three losses or more)."""
    cur_diverged = diverged(cur, f"metrics-ws{ws}.json")
    base_diverged = diverged(base, f"the baseline's metrics-ws{ws}.json")
    if cur_diverged is not None:
        return [divergence_row(ws, cur_diverged, base_diverged, base is not None)]
    if len(cur["samples"]["loss"]) < 3:
        return []
    return [loss_slope_check(ws, cur, None if base_diverged else base, tol, base_diverged)]


def divergence_row(ws: int, cur: Diverged, base: Diverged | None, has_baseline: bool, by: str = "") -> Check:
    """FAIL where this run diverged and the baseline trains (or there is none); WARN where both did."""
    said = f"loss diverged at {cur.text()} (rank {cur.rank}, {cur.phase} steps)"
    if base is not None:
        status: Status = "WARN"
        tail = f"the baseline diverged as well (at {base.text()}): not a regression of this commit"
    else:
        status = "FAIL"
        tail = "the baseline trains" if has_baseline else f"no baseline at ws={ws}"
    return Check(
        name=f"loss (ws={ws})",
        unit="step",
        current=float(cur.step),
        baseline=None if base is None else float(base.step),
        change_unit="",
        rule="FAIL if the loss stops being finite where the baseline's does not",
        status=status,
        note=f"{said}; {tail}",
        world_size=ws,
        decided_by=by,
    )


def loss_slope_check(
    ws: int,
    metrics: dict[str, Any],
    baseline: dict[str, Any] | None,
    tol: Tolerances,
    base_diverged: Diverged | None = None,
) -> Check:
    """The slope of the measured losses with its HAC interval; against `baseline` where its loss falls."""
    fit = hac.hac_slope(metrics["samples"]["loss"], confidence=tol.confidence)
    base_losses = baseline["samples"]["loss"] if baseline is not None else []
    base_fit = hac.hac_slope(base_losses, confidence=tol.confidence) if len(base_losses) >= 3 else None
    notes = []
    rising = fit.ci_low > tol.loss_slope_max
    if rising:
        notes.append("loss rises over the measured window")
    slower = False
    if baseline is not None and base_fit is not None and base_fit.ci_high < 0:  # it learns: compare speeds
        diff, low, high, how = _slope_change(base_losses, metrics, baseline, base_fit, fit, tol.confidence)
        descent = -base_fit.slope
        slower = low > tol.loss_slope_slower_pct / 100 * descent
        pct = [100 * v / descent for v in (diff, low, high)]
        # A flatter slope from a lower loss is a model that got further sooner (a better architecture
        # converges during warmup and has less left to fall), not one that learns more slowly: only a
        # flatter slope whose losses are not below the baseline's is a regression.
        mean_loss, base_mean = statistics.fmean(metrics["samples"]["loss"]), statistics.fmean(base_losses)
        ahead = slower and mean_loss < base_mean
        slower = slower and not ahead
        notes.append(
            f"falls {pct[0]:+.0f}% [{pct[1]:+.0f}, {pct[2]:+.0f}]% more slowly than the baseline's "
            f"{base_fit.slope:.3g} nats/step ({how})"
            + (": learns more slowly" if slower else "")
            + (
                f", from a lower loss (mean {mean_loss:.3g} against {base_mean:.3g} nats): further along, "
                "not slower"
                if ahead
                else ""
            )
        )
    elif base_fit is not None:
        notes.append("the baseline's loss does not fall with confidence: its speed is not compared")
    if base_diverged is not None:
        notes.append(f"the baseline diverged at {base_diverged.text()}; this run trains")
    notes.append(f"HAC interval: residual autocorrelation {fit.rho:.2f}, {fit.df:.0f} effective df")
    rule = f"FAIL if slope > {tol.loss_slope_max:g} with {tol.confidence:.0%} confidence"
    if base_fit is not None:
        rule += f", or slower than the baseline's by > {tol.loss_slope_slower_pct:g}% with confidence"
    return Check(
        name=f"loss slope (ws={ws})",
        unit="nats/step",
        current=fit.slope,
        baseline=base_fit.slope if base_fit is not None else None,
        change_unit="",
        ci_low=fit.ci_low,
        ci_high=fit.ci_high,
        rule=rule,
        status="FAIL" if rising or slower else "PASS",
        note="; ".join(notes),
    )


def _slope_change(
    base_losses: list[float],
    metrics: dict[str, Any],
    baseline: dict[str, Any],
    base_fit: hac.HacSlopeFit,
    fit: hac.HacSlopeFit,
    confidence: float,
) -> tuple[float, float, float, str]:
    """This run's slope minus the baseline's, with its interval, and how it was paired.

    Runs of one configuration train from the same seed on the same batches, so their losses share each
    batch's noise: where both measured the same steps after the same warmup, the slope of the step-by-step
    difference (the same difference of slopes, OLS being linear) has that noise cancelled, and its HAC
    error is the pair's. Otherwise the two slopes are independent, each with its own HAC error."""
    losses = metrics["samples"]["loss"]
    if metrics.get("warmup") == baseline.get("warmup") and len(losses) == len(base_losses):
        paired = hac.hac_slope([c - b for b, c in zip(base_losses, losses, strict=True)], confidence)
        return paired.slope, paired.ci_low, paired.ci_high, "paired step by step, the same batches"
    diff, low, high = hac.slope_difference(base_fit, fit, confidence)
    return diff, low, high, "two independent slopes"


def round_losses(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What an A/B round records of its sides' losses (their metrics files): every measured step's loss
    (the mean over ranks, up to a divergence) and each side's divergence record, or None."""
    return {
        "base_loss": list(a["samples"]["loss"]),
        "candidate_loss": list(b["samples"]["loss"]),
        "base_diverged": a.get("diverged"),
        "candidate_diverged": b.get("diverged"),
    }


def _mean_curve(curves: list[list[float]]) -> list[float]:
    steps = min(len(c) for c in curves)
    return [statistics.fmean(c[i] for c in curves) for i in range(steps)]


def same_numerics(base: list[float], candidate: list[float]) -> bool:
    """Step by step, the same losses: bitwise, or within SAME_NUMERICS_RTOL relative."""
    return len(base) == len(candidate) and all(
        a == b or abs(b - a) <= SAME_NUMERICS_RTOL * max(abs(a), abs(b))
        for a, b in zip(base, candidate, strict=True)
    )


def ab_loss_row(outcome: dict[str, Any], tol: Tolerances) -> tuple[Check, str] | None:
    """The A/B's loss row and the few words its timing row's note gets; None where its rounds recorded
    no losses (ab.json files written before they did)."""
    ws, rounds = int(outcome["world_size"]), outcome.get("rounds") or []
    if not rounds or any("base_loss" not in r for r in rounds):
        return None
    where = f"metrics of an A/B round at ws={ws}"
    cand = [d for r in rounds if (d := diverged({"diverged": r.get("candidate_diverged")}, where))]
    base = [d for r in rounds if (d := diverged({"diverged": r.get("base_diverged")}, where))]
    if cand:
        row = divergence_row(ws, cand[0], base[0] if base else None, True, by="ab")
        note = row.note.replace("the baseline", "the base").replace(
            "(rank", f"in {len(cand)} of {len(rounds)} A/B rounds (rank"
        )
        row = replace(row, name=f"loss A/B (ws={ws})", note=note, rule=row.rule.replace("baseline", "base"))
        return row, f"loss diverged at {cand[0].text()}"
    a = _mean_curve([r["base_loss"] for r in rounds])
    b = _mean_curve([r["candidate_loss"] for r in rounds])
    a, b = a[: len(b)], b[: len(a)]  # the steps both sides have
    said = f"over {len(a)} steps of {len(rounds)} rounds, the same batches from the same weights"
    rule = f"FAIL if the loss is higher by > {tol.loss_increase_pct:g}% with {tol.confidence:.0%} confidence"
    row = Check(
        f"loss A/B (ws={ws})", "nats", None, change_unit="%", rule=rule, world_size=ws, decided_by="ab"
    )
    if base:
        note = f"the base diverged at {base[0].text()}; the candidate trains"
        return replace(row, status="PASS", note=note), "the base diverged, the candidate trains"
    if len(a) < 3:
        return replace(row, status="INFO", note=f"too few steps to compare ({said})"), ""
    row = replace(row, ab_base=statistics.fmean(a), ab_candidate=statistics.fmean(b))
    if same_numerics(a, b):
        note = f"numerics unchanged: the candidate's loss equals the base's at every step ({said})"
        return replace(row, change=0.0, status="PASS", note=note), "numerics unchanged"
    scale = abs(statistics.fmean(a))
    if scale == 0:
        return replace(row, status="INFO", note=f"numerics changed; the base's mean loss is 0 ({said})"), ""
    paired = hac.hac_mean([y - x for x, y in zip(a, b, strict=True)], confidence=tol.confidence)
    change, low, high = (100 * v / scale for v in (paired.mean, paired.ci_low, paired.ci_high))
    higher = low > tol.loss_increase_pct
    note = (
        f"numerics changed: the candidate's loss {change:+.2f}% [{low:+.2f}, {high:+.2f}]% of the base's, "
        f"paired step by step {said} (HAC interval, autocorrelation {paired.rho:.2f})"
    )
    status: Status = "FAIL" if higher else "PASS"
    row = replace(row, change=change, ci_low=low, ci_high=high, status=status, note=note)
    return row, f"numerics changed (loss {change:+.2f}%)"


def apply_ab_loss(comparison: Comparison, outcome: dict[str, Any], tol: Tolerances) -> Comparison:
    """The A/B's loss row of `outcome` (an ab.json) in `comparison`, replacing an earlier one (a resumed
    A/B), and its words appended to the A/B's timing row of that world size."""
    made = ab_loss_row(outcome, tol)
    if made is None:
        return comparison
    row, words = made
    checks = []
    for check in comparison.checks:
        if check.name == row.name:
            continue
        timing = check.metric == TIMING and check.decided_by == "ab"
        if words and timing and check.world_size == row.world_size:
            check = replace(check, note="; ".join(filter(None, [check.note, words])))
        checks.append(check)
    return replace(comparison, checks=[*checks, row])
