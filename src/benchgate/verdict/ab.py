"""The paired, sequential A/B decision: is the candidate (B) slower than the base (A) beyond tolerance?

Data. A round launches fresh worker groups for A and B that take turns step by step (benchgate.turns).
Within a round the host's drift hits neighbouring steps alike, so the round's figure is the median over
pairs of log(A step time / B step time): the log of B's throughput relative to A's. Rounds differ
by more than their steps suggest (each launch draws its own memory layout and core placement), so the
round, not the step, is the unit of replication: the estimate is the mean over rounds, and its
uncertainty comes from the spread between rounds (Student's t with rounds - 1 degrees of freedom).

Decision, at the looks: rounds `min_rounds`, then about 1.5 times as many each time (4, 6, 9, 12 by
default), and `max_rounds`:
    FAIL     the one-sided upper bound of the throughput change is below -tolerance: slower beyond
             tolerance, with confidence
    PASS     the one-sided lower bound is above -tolerance: within tolerance (or faster), with confidence
    (else)   more rounds, until `max_rounds` or the time budget: then UNKNOWN
Each bound is at level 1 - alpha / looks (Bonferroni over the looks the budget allows), so looking
repeatedly never raises the chance of a wrong FAIL, or of a wrong PASS, above alpha. Sparse looks spend
alpha where a decision is likely; measured on this host, looks after every round left more A/A runs
undecided and found fewer real slowdowns within the same budget (docs/benchmarks.md). When the time
budget ends between looks, the last round is looked at too (one look more than planned). In the spirit of
Chromium Pinpoint, which adds attempts while its comparison says "unknown".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from benchgate import stats

ABStatus = Literal["PASS", "FAIL", "UNKNOWN", "CONTINUE"]
# Power at which the minimum detectable effect is reported (the usual 80%).
MDE_POWER = 0.8


def round_change(base_step_s: Sequence[float], candidate_step_s: Sequence[float]) -> float:
    """One round's figure: median over step pairs of log(base step time / candidate step time).

    Negative when the candidate is slower. Pairs are neighbouring steps, one of each side.
    """
    if len(base_step_s) != len(candidate_step_s) or not base_step_s:
        raise ValueError(
            f"a round needs as many base as candidate steps, got {len(base_step_s)} and "
            f"{len(candidate_step_s)}"
        )
    return statistics.median(math.log(a / b) for a, b in zip(base_step_s, candidate_step_s, strict=True))


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


def look_level(confidence: float, min_rounds: int, max_rounds: int) -> float:
    """The one-sided confidence of each look's bounds."""
    return 1.0 - (1.0 - confidence) / len(look_rounds(min_rounds, max_rounds))


def rule_text(tolerance_pct: float, confidence: float, min_rounds: int, max_rounds: int) -> str:
    level = look_level(confidence, min_rounds, max_rounds)
    looks = look_rounds(min_rounds, max_rounds)
    return (
        f"A/B, rounds of alternating steps: FAIL if the one-sided {level:.2%} upper bound of the tokens/s "
        f"change is below -{tolerance_pct:g}%, PASS if the {level:.2%} lower bound is above it; decided "
        f"after rounds {', '.join(map(str, looks))} ({1 - confidence:.0%} split over {len(looks)} looks), "
        "UNKNOWN after the last or when the time budget ends"
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
    last = n >= max_rounds or (out_of_time and n >= 2)
    if n < min_rounds or (n not in look_rounds(min_rounds, max_rounds) and not last):
        status: ABStatus = "UNKNOWN" if out_of_time or n >= max_rounds else "CONTINUE"
        why = "the time budget ran out" if status == "UNKNOWN" else "no look at this round"
        return ABDecision(status, n, estimate, None, None, None, None, None, f"{n} rounds, {why}")
    level = look_level(confidence, min_rounds, max_rounds)
    mean = statistics.fmean(changes)
    sd = statistics.stdev(changes)
    se = sd / math.sqrt(n)
    t = stats.t_quantile(level, n - 1)
    low, high = mean - t * se, mean + t * se
    # The smallest true slowdown whose upper bound would fall below -tolerance with MDE_POWER probability.
    mde = -_pct(limit - (t + stats.t_quantile(MDE_POWER, n - 1)) * se)
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
