"""The stored-baseline screen: this run's throughput against the baseline run's, judged by measured noise.

Two launches of identical code on one host differ by several percent, well beyond what the steps
within one launch suggest (docs/benchmarks.md), so per-step tests (Mann-Whitney over steps) call
that difference significant. The screen therefore judges run-level figures by run-level noise:

    figure   x = -log(mean step time): tokens/s, which a slowdown of a minority of steps moves in full
             (each step capped at results.figures.STALL_CAP times the run's median step, as in A/B), and
             -log(mean step time / mean drift reference) when both runs timed the reference kernel
             (bench.drift_reference) and the history has that figure too
    change   d = x(current) - x(baseline): the log of the throughput ratio
    noise    s = the standard deviation of x over the profile's earlier baseline runs (history.json)
    bounds   d +- t(confidence, n - 1) * s * sqrt(2): one-sided bounds at the configured confidence (the
             current and the baseline run each carry one run's noise)

    FAIL     the upper bound is below -tolerance: slower beyond tolerance, with confidence
    PASS     the lower bound is above -tolerance: within tolerance, with confidence
    UNKNOWN  otherwise, or fewer than MIN_HISTORY earlier runs (the noise is not known)

Where both figures can be judged, the drift-corrected one decides, and a PASS stands only where the
raw figure PASSes too: a host that sped up during the candidate's run must not excuse its code.

Nothing here can excuse a change that the measured noise does not explain: a change is never called
"within noise" while the interval lies beyond the tolerance. Where the screen is UNKNOWN (or FAILs)
and the base code can be checked out, the gate decides by interleaved A/B instead (ab/decision.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from benchgate.kit import stats
from benchgate.results.figures import corrected_mean, mean_step_time

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
    figure: str  # which run-level figure decided: "drift-corrected mean" or "mean"
    host_change_pct: float | None  # the drift reference's change: how much the host itself slowed
    reason: str


def _p50(values: Sequence[float]) -> float:
    return stats.percentile(values, 50)


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
        f"run-level tokens/s change (mean step time; t over the noise of >= {MIN_HISTORY} earlier baseline "
        f"runs) is below -{tolerance_pct:g}%, PASS if the {confidence:.0%} lower bound is above it (raw and "
        "drift-corrected alike); else UNKNOWN"
    )


def _judge(
    d: float, past: Sequence[float], tolerance_pct: float, confidence: float
) -> tuple[ScreenStatus, float, float, float]:
    """(status, low, high, noise) of a log change `d` judged by the spread of `past` run-level figures."""
    noise = statistics.stdev(math.log(x) for x in past)
    half = stats.t_quantile(confidence, len(past) - 1) * noise * math.sqrt(2.0)
    low, high = d - half, d + half
    limit = math.log1p(-tolerance_pct / 100.0)
    status: ScreenStatus = "FAIL" if high < limit else "PASS" if low > limit else "UNKNOWN"
    return status, low, high, noise


def screen(
    base: dict[str, Any],
    current: dict[str, Any],
    history: Sequence[dict[str, float]],
    tolerance_pct: float,
    confidence: float,
) -> ScreenResult:
    """Screen one world size. `base`/`current` are the samples of metrics-ws<N>.json; `history` holds the
    earlier baseline runs' run-level figures at this world size (mean_step_time_s, and
    mean_step_time_per_reference where the run timed the drift reference)."""
    raw_past = [h["mean_step_time_s"] for h in history if h.get("mean_step_time_s")]
    raw_d = _log_ratio(mean_step_time(base["step_time_s"]), mean_step_time(current["step_time_s"]))
    base_corr, cur_corr = corrected_mean(base), corrected_mean(current)
    corrected_past = [
        h["mean_step_time_per_reference"] for h in history if h.get("mean_step_time_per_reference")
    ]
    use_corrected = base_corr is not None and cur_corr is not None and len(corrected_past) >= MIN_HISTORY
    host = None
    if base.get("reference_s") and current.get("reference_s"):
        host = stats.relative_change_pct(_p50(base["reference_s"]), _p50(current["reference_s"]))
    if use_corrected:
        assert base_corr is not None and cur_corr is not None
        figure, d, past = "drift-corrected mean", _log_ratio(base_corr, cur_corr), corrected_past
    else:
        figure, d, past = "mean", raw_d, raw_past
    change = _percent(d)
    if len(past) < MIN_HISTORY:
        reason = f"run-to-run noise unknown ({len(past)} of {MIN_HISTORY} earlier baseline runs)"
        return ScreenResult("UNKNOWN", change, None, None, None, len(past), figure, host, reason)
    status, low, high, noise = _judge(d, past, tolerance_pct, confidence)
    if status == "FAIL":
        reason = f"slower beyond -{tolerance_pct:g}% with confidence"
    elif status == "PASS":
        reason = f"within -{tolerance_pct:g}% with confidence"
    else:
        reason = (
            f"the interval straddles -{tolerance_pct:g}%: run-to-run noise {100 * noise:.1f}% is too large"
        )
    if status == "PASS" and use_corrected:
        raw_status = (
            _judge(raw_d, raw_past, tolerance_pct, confidence)[0] if len(raw_past) >= MIN_HISTORY else None
        )
        if raw_status != "PASS":
            status = "UNKNOWN"
            reason = (
                f"the drift-corrected figure PASSes but the raw one does not ({raw_status or 'no history'}, "
                f"{_percent(raw_d):+.1f}%): a PASS needs both"
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
