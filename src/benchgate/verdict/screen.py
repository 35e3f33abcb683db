"""The stored-baseline screen: this run's throughput against the baseline run's, judged by measured noise.

Two launches of identical code on one host differ by several percent, well beyond what the steps
within one launch suggest (docs/benchmarks.md), so per-step tests (Mann-Whitney over steps) call
that difference significant. The screen therefore judges run-level figures by run-level noise:

    figure   x = -log(p50 step time), or -log(p50 of step time / drift reference) when both runs timed
             the reference kernel (bench.drift_reference) and the history has that figure too
    change   d = x(current) - x(baseline): the log of the throughput ratio
    noise    s = the standard deviation of x over the profile's earlier baseline runs (history.json)
    bounds   d +- t(confidence, n - 1) * s * sqrt(2): one-sided bounds at the configured confidence (the
             current and the baseline run each carry one run's noise)

    FAIL     the upper bound is below -tolerance: slower beyond tolerance, with confidence
    PASS     the lower bound is above -tolerance: within tolerance, with confidence
    UNKNOWN  otherwise, or fewer than MIN_HISTORY earlier runs (the noise is not known)

Nothing here can excuse a change that the measured noise does not explain: a change is never called
"within noise" while the interval lies beyond the tolerance. Where the screen is UNKNOWN (or FAILs)
and the base code can be checked out, the gate decides by interleaved A/B instead (verdict.ab).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from benchgate import stats

MIN_HISTORY = 3
ScreenStatus = Literal["PASS", "FAIL", "UNKNOWN"]


@dataclass(frozen=True)
class ScreenResult:
    status: ScreenStatus
    change_pct: float  # throughput change, percent (negative: this run is slower)
    ci_low_pct: float | None
    ci_high_pct: float | None
    noise_pct: float | None  # run-to-run standard deviation measured over the history
    history_runs: int
    figure: str  # which run-level figure decided: "drift-corrected p50" or "p50"
    host_change_pct: float | None  # the drift reference's change: how much the host itself slowed
    reason: str


def _p50(values: Sequence[float]) -> float:
    return stats.percentile(values, 50)


def _corrected_p50(samples: dict[str, Any]) -> float | None:
    ref = samples.get("reference_s")
    steps = samples["step_time_s"]
    if not ref or len(ref) != len(steps):
        return None
    return _p50([t / r for t, r in zip(steps, ref, strict=True)])


def _log_ratio(a: float, b: float) -> float:
    """log(a / b), also where the quotient itself leaves float range (1e-300 s against 1e300 s)."""
    ratio = a / b
    if 0.0 < ratio < math.inf:
        return math.log(ratio)
    return math.log(a) - math.log(b)


def _percent(log_ratio: float) -> float:
    """100 * (e^x - 1): the change in percent of a log ratio, +inf where e^x leaves float range.

    Only what is shown goes through here: the rule compares the finite log bounds, so an interval this
    wide (very noisy history at a high confidence) straddles the tolerance and reads UNKNOWN instead of
    raising. Below, e^x only reaches 0: a bound is never under -100%."""
    try:
        return 100.0 * math.expm1(log_ratio)
    except OverflowError:
        return math.inf


def rule_text(tolerance_pct: float, confidence: float) -> str:
    return (
        f"screen vs the stored baseline: FAIL if the one-sided {confidence:.0%} upper bound of the "
        f"run-level tokens/s change (t over the noise of >= {MIN_HISTORY} earlier baseline runs) is below "
        f"-{tolerance_pct:g}%, PASS if the {confidence:.0%} lower bound is above it; else UNKNOWN"
    )


def screen(
    base: dict[str, Any],
    current: dict[str, Any],
    history: Sequence[dict[str, float]],
    tolerance_pct: float,
    confidence: float,
) -> ScreenResult:
    """Screen one world size. `base`/`current` are the samples of metrics-ws<N>.json; `history` holds the
    earlier baseline runs' run-level figures at this world size (step_time_s, step_time_per_reference)."""
    base_corr, cur_corr = _corrected_p50(base), _corrected_p50(current)
    corrected_history = [h["step_time_per_reference"] for h in history if h.get("step_time_per_reference")]
    use_corrected = base_corr is not None and cur_corr is not None and len(corrected_history) >= MIN_HISTORY
    if use_corrected:
        assert base_corr is not None and cur_corr is not None
        figure, base_x, cur_x, past = "drift-corrected p50", base_corr, cur_corr, corrected_history
    else:
        past = [h["step_time_s"] for h in history if h.get("step_time_s")]
        figure, base_x, cur_x = "p50", _p50(base["step_time_s"]), _p50(current["step_time_s"])
    d = _log_ratio(base_x, cur_x)
    change = _percent(d)
    host = None
    if base.get("reference_s") and current.get("reference_s"):
        host = stats.relative_change_pct(_p50(base["reference_s"]), _p50(current["reference_s"]))
    if len(past) < MIN_HISTORY:
        reason = f"run-to-run noise unknown ({len(past)} of {MIN_HISTORY} earlier baseline runs)"
        return ScreenResult("UNKNOWN", change, None, None, None, len(past), figure, host, reason)
    noise = statistics.stdev(math.log(x) for x in past)
    half = stats.t_quantile(confidence, len(past) - 1) * noise * math.sqrt(2.0)
    low, high = d - half, d + half
    limit = math.log1p(-tolerance_pct / 100.0)
    if high < limit:
        status: ScreenStatus = "FAIL"
        reason = f"slower beyond -{tolerance_pct:g}% with confidence"
    elif low > limit:
        status, reason = "PASS", f"within -{tolerance_pct:g}% with confidence"
    else:
        status = "UNKNOWN"
        reason = (
            f"the interval straddles -{tolerance_pct:g}%: run-to-run noise {100 * noise:.1f}% is too large"
        )
    return ScreenResult(
        status,
        change,
        _percent(low),
        _percent(high),
        100.0 * noise,
        len(past),
        figure,
        host,
        reason,
    )
