"""Scaling efficiency, judged with a noise model instead of a threshold on two launches.

Efficiency = tokens/s(N) / (N x tokens/s(1)). Its relative change between base and candidate is

    e = exp(delta_N - delta_1) - 1      delta_w = log(tokens/s of the candidate / of the base) at ws=w

Two ways to know the noise of e:
  A/B at both world sizes   delta_1 and delta_N are the A/B estimates (means over rounds), each with its
                            spread between rounds; their difference has a Welch t interval.
  the profile's history     efficiency of each earlier baseline run (mean step time at 1 over that at N);
                            its spread is the run-to-run noise, and the current and the baseline run each
                            carry one run's worth of it, as in the screen.
The row WARNs when the one-sided upper bound of the change, in points of efficiency, is below
-tolerance: less efficient beyond tolerance, with confidence. It PASSes only when the lower bound is
above -tolerance (within it, with confidence); an interval that straddles -tolerance is INFO: the
noise cannot tell (an interval of [-25, +15] points says nothing either way). With fewer than
MIN_HISTORY earlier runs and no A/B at both sizes, the noise is unknown and the row is INFO. The
timing rows of the two world sizes are separate tests at 1 - confidence each, so at most twice that
family-wise: stated in the rule.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from benchgate.kit import stats

MIN_HISTORY = 3
ScalingStatus = Literal["PASS", "WARN", "INFO"]


@dataclass(frozen=True)
class ScalingResult:
    status: ScalingStatus
    change_pts: float  # current efficiency - baseline efficiency, in percentage points
    ci_low_pts: float | None
    ci_high_pts: float | None
    how: str  # what the noise came from


def rule_text(tolerance_pts: float, confidence: float) -> str:
    return (
        f"WARN if the one-sided {confidence:.0%} upper bound of the efficiency change is below "
        f"-{tolerance_pts:g} pts, PASS if the lower bound is above it, else INFO (noise from A/B rounds at "
        f"both world sizes, else from >= {MIN_HISTORY} "
        f"earlier baseline runs; else INFO); timing rows at two world sizes: at most "
        f"{2 * (1 - confidence):.0%} family-wise"
    )


def _status(low: float, high: float, tolerance_pts: float) -> ScalingStatus:
    if high < -tolerance_pts:
        return "WARN"
    return "PASS" if low > -tolerance_pts else "INFO"


def from_ab(
    base_efficiency: float,
    rounds_1: Sequence[float],
    rounds_n: Sequence[float],
    tolerance_pts: float,
    confidence: float,
) -> ScalingResult | None:
    """From the A/B round figures (log changes of tokens/s) at ws=1 and ws=N; None with < 2 rounds each."""
    if len(rounds_1) < 2 or len(rounds_n) < 2:
        return None
    d, se, df = stats.welch_difference(rounds_1, rounds_n)
    t = stats.t_quantile(confidence, max(df, 1.0))

    def pts(log_change: float) -> float:
        return 100.0 * base_efficiency * math.expm1(log_change)

    low, high = pts(d - t * se), pts(d + t * se)
    how = f"A/B at both world sizes ({len(rounds_1)} and {len(rounds_n)} rounds)"
    return ScalingResult(_status(low, high, tolerance_pts), pts(d), low, high, how)


def from_history(
    base_efficiency: float,
    current_efficiency: float,
    past_efficiencies: Sequence[float],
    tolerance_pts: float,
    confidence: float,
) -> ScalingResult:
    """From the spread of efficiency over the profile's earlier baseline runs."""
    change = 100.0 * (current_efficiency - base_efficiency)
    if len(past_efficiencies) < MIN_HISTORY:
        how = f"noise unknown ({len(past_efficiencies)} of {MIN_HISTORY} earlier baseline runs)"
        return ScalingResult("INFO", change, None, None, how)
    noise = 100.0 * statistics.stdev(past_efficiencies)
    half = stats.t_quantile(confidence, len(past_efficiencies) - 1) * noise * math.sqrt(2.0)
    low, high = change - half, change + half
    how = f"run-to-run noise {noise:.1f} pts over {len(past_efficiencies)} earlier baseline runs"
    return ScalingResult(_status(low, high, tolerance_pts), change, low, high, how)
