"""The paired, sequential A/B decision: is the candidate (B) slower than the base (A) beyond tolerance?

Data. A round launches fresh worker groups for A and B that take turns step by step (benchgate.measure.turns),
rank r of both sides on the same cores. The round's figure is the change of tokens/s over its steps:

    x = log(sum of A's step times / sum of B's step times)        (negative: B is slower)

Total time, not the median step: tokens/s is tokens over total time, and a slowdown of a minority of
steps (a sync every k steps, a periodic eval, a recompile, a stall) moves it in full while leaving the
median where it was. Host spikes land on single steps of either side at random, so they add noise but
no bias; rounds of a minimum measured duration (gate.ab.min_measured_s) bound what one spike can do.
Only a step beyond STALL_CAP times the round's median step counts as that cap: one stall of seconds
cannot decide a round, while every slowdown up to 10x per step counts in full. The median of the
pair log ratios and the share of the change carried by the slowest steps are kept as diagnostics
(`round_diagnostics`): they say whether a slowdown is uniform or concentrated in some steps.

Rounds differ by more than their steps suggest (each launch draws its own memory layout), so the round,
not the step, is the unit of replication: the estimate is the mean over rounds, and its uncertainty
comes from the spread between rounds (Student's t with rounds - 1 degrees of freedom).

Decision, at the looks: rounds `min_rounds`, then about 1.5 times as many each time, and `max_rounds`
(4, 6, 9, 14, 21, 27 by default):
    FAIL     the one-sided upper bound of the throughput change is below -tolerance: slower beyond
             tolerance, with confidence
    PASS     the one-sided lower bound is above -tolerance: within tolerance (or faster), with confidence
    (else)   more rounds, until `max_rounds`; UNKNOWN then, or when the time budget ends (resumable)
Every look uses the same one-sided level, calibrated for the whole schedule (`look_level`): under
Gaussian round figures whose true change is exactly -tolerance, the chance that any look says FAIL is
1 - confidence (and likewise PASS). Bonferroni (1 - confidence split over the looks) would also hold
it, but the looks share most of their rounds, so it wastes much of the error budget: measured on the
recorded rounds, it left far more unchanged code undecided (docs/benchmarks.md). Looks are only taken
at planned rounds, so a run cut short by its time budget and resumed later (`benchgate run --resume`)
keeps the error control of one sequence; a resume with a larger `max_rounds` does too, because its
looks are stricter and the same earlier looks would have been undecided under them as well.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from benchgate.kit import stats
from benchgate.results.figures import STALL_CAP

ABStatus = Literal["PASS", "FAIL", "UNKNOWN", "CONTINUE"]
# Power at which the minimum detectable effect is reported (the usual 80%).
MDE_POWER = 0.8
# The slowest share of steps whose part of the change tells a concentrated slowdown from a uniform one.
TAIL_SHARE = 0.1
# A round whose idle side used more CPU than this share of the other side's measured time is flagged:
# it competed with the steps being timed (a background thread), which can bias that round.
IDLE_CPU_FLAG = 0.05
# Monte Carlo size and seed of the look-level calibration: its error on the 5% rate is about 0.07 points.
_CALIBRATION_SEQUENCES = 100_000
_CALIBRATION_SEED = 20261124


def _checked_pair(base_step_s: Sequence[float], candidate_step_s: Sequence[float]) -> None:
    if len(base_step_s) != len(candidate_step_s) or not base_step_s:
        raise ValueError(
            f"a round needs as many base as candidate steps, got {len(base_step_s)} and "
            f"{len(candidate_step_s)}"
        )


def round_change(base_step_s: Sequence[float], candidate_step_s: Sequence[float]) -> float:
    """One round's figure: log(total base time / total candidate time), each step capped at STALL_CAP
    times the round's median step. Negative when the candidate is slower."""
    _checked_pair(base_step_s, candidate_step_s)
    cap = STALL_CAP * statistics.median([*base_step_s, *candidate_step_s])
    base = sum(min(t, cap) for t in base_step_s)
    candidate = sum(min(t, cap) for t in candidate_step_s)
    return math.log(base / candidate)


def round_diagnostics(base_step_s: Sequence[float], candidate_step_s: Sequence[float]) -> dict[str, float]:
    """What the round figure does not say: the median pair's change, and how the change is spread.

    median_change_log   median over pairs of log(A step / B step): the typical step's change
    tail_excess_s       (B's slowest TAIL_SHARE of steps) - (A's slowest TAIL_SHARE): their part of the
                        change of total time, in seconds
    total_excess_s      sum(B) - sum(A): the change of total time, in seconds
    tail_time_share     the slowest TAIL_SHARE of A's steps as a share of A's time: what tail_excess_s /
                        total_excess_s is when every step slows alike
    """
    _checked_pair(base_step_s, candidate_step_s)
    k = max(1, round(TAIL_SHARE * len(base_step_s)))
    slowest_a = sorted(base_step_s)[-k:]
    slowest_b = sorted(candidate_step_s)[-k:]
    return {
        "median_change_log": statistics.median(
            math.log(a / b) for a, b in zip(base_step_s, candidate_step_s, strict=True)
        ),
        "tail_excess_s": sum(slowest_b) - sum(slowest_a),
        "total_excess_s": sum(candidate_step_s) - sum(base_step_s),
        "tail_time_share": sum(slowest_a) / sum(base_step_s),
    }


def concentration(rounds: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """(share of the slowdown carried by the slowest steps, that share if it were uniform) over all
    rounds, or None when the candidate is not slower in total (nothing to attribute)."""
    total = sum(r.get("total_excess_s", 0.0) for r in rounds)
    if not rounds or total <= 0:
        return None
    tail = sum(r.get("tail_excess_s", 0.0) for r in rounds)
    uniform = statistics.fmean(r.get("tail_time_share", TAIL_SHARE) for r in rounds)
    return tail / total, uniform


def idle_cpu_rounds(rounds: Sequence[dict[str, Any]]) -> tuple[int, float]:
    """(rounds in which an idle side used more than IDLE_CPU_FLAG of the other's measured time, the
    largest such share)."""
    shares = [max(r.get("base_idle_cpu_share", 0.0), r.get("candidate_idle_cpu_share", 0.0)) for r in rounds]
    flagged = [share for share in shares if share > IDLE_CPU_FLAG]
    return len(flagged), max(flagged, default=0.0)


@dataclass(frozen=True)
class ABDecision:
    status: ABStatus
    rounds: int
    change_pct: float | None  # estimated change of throughput, percent (negative: the candidate is slower)
    ci_low_pct: float | None
    ci_high_pct: float | None
    ci_level: float | None  # the two-sided level of this look's interval
    mde_pct: float | None  # smallest slowdown this look would FAIL with MDE_POWER probability
    round_sd_pct: float | None  # spread of the round figures: the noise that decided the rounds needed
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def look_rounds(min_rounds: int, max_rounds: int) -> list[int]:
    """The rounds after which the rule decides: min_rounds, ~1.5x more each time, and max_rounds."""
    looks, n = [], min_rounds
    while n < max_rounds:
        looks.append(n)
        n = max(n + 1, math.ceil(1.5 * n))
    return [*looks, max_rounds]


@functools.lru_cache(maxsize=64)
def look_level(confidence: float, min_rounds: int, max_rounds: int) -> float:
    """The one-sided confidence of every look's bounds: the level at which a Gaussian sequence whose true
    change is exactly -tolerance says FAIL at some look with probability 1 - confidence.

    The t statistics do not depend on the noise's scale, so one simulation of standard normal rounds
    (fixed seed: the level is the same on every machine) calibrates every workload."""
    looks = look_rounds(min_rounds, max_rounds)
    alpha = 1.0 - confidence
    if len(looks) == 1:
        return confidence
    rng = np.random.default_rng(_CALIBRATION_SEED)
    draws = rng.standard_normal((_CALIBRATION_SEQUENCES, looks[-1]))
    sums, squares = np.cumsum(draws, axis=1), np.cumsum(draws * draws, axis=1)
    t_stats = []
    for n in looks:
        mean = sums[:, n - 1] / n
        var = (squares[:, n - 1] - n * mean * mean) / (n - 1)
        t_stats.append(mean / np.sqrt(var / n))
    stacked = np.stack(t_stats, axis=1)

    def error(level: float) -> float:
        bounds = np.array([stats.t_quantile(level, n - 1) for n in looks])
        return float(np.mean(np.any(stacked < -bounds, axis=1)))

    low, high = confidence, 1.0 - alpha / len(looks)  # the single-look level errs high, Bonferroni low
    for _ in range(30):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if error(middle) > alpha else (low, middle)
    return high


def rule_text(tolerance_pct: float, confidence: float, min_rounds: int, max_rounds: int) -> str:
    level = look_level(confidence, min_rounds, max_rounds)
    looks = look_rounds(min_rounds, max_rounds)
    return (
        f"A/B, rounds of alternating steps, tokens/s over each round's total time: FAIL if the one-sided "
        f"{level:.2%} upper bound of the change is below -{tolerance_pct:g}%, PASS if the {level:.2%} lower "
        f"bound is above it; looks after rounds {', '.join(map(str, looks))} (the level holds "
        f"{1 - confidence:.0%} over all looks); UNKNOWN after the last or when the time budget ends"
    )


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


def decide(
    changes: Sequence[float],
    tolerance_pct: float,
    confidence: float,
    min_rounds: int,
    max_rounds: int,
    out_of_time: bool = False,
) -> ABDecision:
    """The decision after the rounds so far (`changes` from round_change, in order)."""
    n = len(changes)
    limit = math.log1p(-tolerance_pct / 100.0)
    estimate = _pct(statistics.fmean(changes)) if changes else None
    if n < min_rounds or n not in look_rounds(min_rounds, max_rounds):
        if n >= max_rounds or out_of_time:
            why = (
                "the time budget ran out between looks (gate.ab.max_seconds)"
                if out_of_time
                else f"past gate.ab.max_rounds ({max_rounds}) between looks"
            )
            return ABDecision("UNKNOWN", n, estimate, None, None, None, None, None, f"{n} rounds, {why}")
        return ABDecision("CONTINUE", n, estimate, None, None, None, None, None, f"{n} rounds, no look yet")
    level = look_level(confidence, min_rounds, max_rounds)
    mean = statistics.fmean(changes)
    sd = statistics.stdev(changes)
    se = sd / math.sqrt(n)
    t = stats.t_quantile(level, n - 1)
    low, high = mean - t * se, mean + t * se
    # The smallest true slowdown whose upper bound would fall below -tolerance with MDE_POWER probability.
    mde = -_pct(limit - (t + stats.t_quantile(MDE_POWER, n - 1)) * se)
    status: ABStatus
    if high < limit:
        status, reason = "FAIL", f"slower beyond -{tolerance_pct:g}% with confidence"
    elif low > limit:
        status, reason = "PASS", f"within -{tolerance_pct:g}% with confidence"
    elif n >= max_rounds:
        status, reason = "UNKNOWN", f"undecided after {n} rounds (gate.ab.max_rounds)"
    elif out_of_time:
        status, reason = (
            "UNKNOWN",
            f"undecided after {n} rounds when the time budget ran out (gate.ab.max_seconds)",
        )
    else:
        status, reason = "CONTINUE", f"undecided after {n} rounds"
    # Reported as the two-sided interval whose ends are the two one-sided bounds.
    return ABDecision(status, n, _pct(mean), _pct(low), _pct(high), 2 * level - 1, mde, 100.0 * sd, reason)
