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
(4, 6, 9, 14, 21, 27 by default; ab/levels.py):
    FAIL     the upper bound of the throughput change is below -tolerance: slower beyond tolerance, with
             confidence
    PASS     the lower bound is above -tolerance: within tolerance (or faster), with confidence
    (else)   more rounds
At the last look (`max_rounds`) an indifference zone of INDIFFERENCE x tolerance decides by the
estimate: FAIL when it is below -tolerance and the upper bound below -tolerance + zone, PASS when it
is above and the lower bound above -tolerance - zone; UNKNOWN only when the interval is wider than the
zone. So a change near the tolerance gets an answer rather than UNKNOWN, and its error is controlled
outside the zone: a true change of -(T - zone) FAILs, and one of -(T + zone) PASSes, with probability
at most 1 - confidence over all looks, whatever the noise (each last-look event, shifted by the zone,
lies inside the same look's event at the tolerance). Inside the zone either answer may come. When the
time budget (gate.ab.max_seconds) leaves no room for another round, the rounds so far take that last
look, with the zone, spending what the planned looks before them left (levels.final_bound): a loaded
host that fits fewer rounds gets an answer, not an UNKNOWN, and the same error control outside the
zone. UNKNOWN remains where the interval is wider than the zone, or fewer than min_rounds fit.

The bounds are thresholds on the t statistic, one per look and side, spending one error budget over the
rounds and calibrated on studentised real rounds (ab/levels.py): the bounds of a look do not depend on
max_rounds, so a resume (`benchgate run --resume`, a bisect step given more rounds) with the same or a
larger max_rounds continues the same sequence and spends only the budget the earlier looks left.

Rare events (ab/rare.py): steps beyond the stall cap are counted per side over all rounds. When the
candidate's share of them is significant (exact binomial, 1/2 under no change), the decision cannot
PASS: it judges the uncapped change instead (FAIL when its bound is beyond tolerance), else more rounds
or UNKNOWN. A lopsided share not yet significant (1-0, 3-1) withholds a PASS at looks before the last.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from benchgate.ab.levels import INDIFFERENCE, LookBound, bound_at, final_bound
from benchgate.ab.levels import look_rounds as look_rounds  # the schedule, importable from here as before
from benchgate.ab.rare import CappedSteps, capped_over, uncapped_change, uncapped_changes
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
    uncapped_change_log the round figure with no stall cap: what the decision judges when the candidate's
                        capped steps are significantly more than the base's (ab/rare.py)
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
        "uncapped_change_log": uncapped_change(base_step_s, candidate_step_s),
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
    # Steps beyond the stall cap over all rounds, per side, and the binomial test of the candidate's share.
    base_capped_steps: int = 0
    candidate_capped_steps: int = 0
    capped_p: float | None = None
    uncapped_change_pct: float | None = None  # the change with no stall cap (ab/rare.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rule_text(tolerance_pct: float, confidence: float, min_rounds: int, max_rounds: int) -> str:
    looks = look_rounds(min_rounds, max_rounds)
    zone = INDIFFERENCE * tolerance_pct
    return (
        f"A/B, rounds of alternating steps, tokens/s over each round's total time: FAIL if the upper "
        f"bound of the change is below -{tolerance_pct:g}%, PASS if the lower bound is above it; looks "
        f"after rounds {', '.join(map(str, looks))}, one {1 - confidence:.0%} error budget spent over them "
        f"(calibrated on real rounds); at the last, by the estimate where the interval lies within "
        f"+-{zone:.2g} pts of -{tolerance_pct:g}% (errors held outside that zone), else UNKNOWN; no PASS "
        f"while the candidate has significantly more capped stalls; where the time budget ends first, a last "
        f"look there"
    )


@functools.cache
def _t_power(df: int) -> float:
    return stats.t_quantile(MDE_POWER, df)


@functools.cache
def _level(bound: LookBound) -> float:
    return bound.level()  # a continued fraction per call: once per look is enough


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


@dataclass(frozen=True)
class _Judged:
    mean: float
    sd: float
    se: float
    low: float
    high: float
    verdict: Literal["PASS", "FAIL"] | None
    in_zone: bool  # decided at the last look by the estimate, not beyond the tolerance with confidence


def _judge(changes: Sequence[float], limit: float, bound: LookBound, last: bool) -> _Judged:
    n = len(changes)
    mean = math.fsum(changes) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in changes) / (n - 1))  # floats: simulated by the million
    se = sd / math.sqrt(n)
    low, high = mean - bound.pass_t * se, mean + bound.fail_t * se
    if high < limit:
        return _Judged(mean, sd, se, low, high, "FAIL", False)
    if low > limit:
        return _Judged(mean, sd, se, low, high, "PASS", False)
    zone = -INDIFFERENCE * limit
    if last and mean < limit and high < limit + zone:
        return _Judged(mean, sd, se, low, high, "FAIL", True)
    if last and mean >= limit and low > limit - zone:
        return _Judged(mean, sd, se, low, high, "PASS", True)
    return _Judged(mean, sd, se, low, high, None, False)


def decide(
    changes: Sequence[float],
    tolerance_pct: float,
    confidence: float,
    min_rounds: int,
    max_rounds: int,
    out_of_time: bool = False,
    *,
    capped: CappedSteps | None = None,
    uncapped: Sequence[float] | None = None,
) -> ABDecision:
    """The decision after the rounds so far (`changes` from round_change, in order). `capped`: the capped
    steps per side over these rounds; `uncapped`: each round's figure with no cap (ab/rare.py)."""
    n = len(changes)
    limit = math.log1p(-tolerance_pct / 100.0)
    steps = capped or CappedSteps(0, 0)
    extra = (
        steps.base,
        steps.candidate,
        steps.p_value if steps.base + steps.candidate else None,
        _pct(statistics.fmean(uncapped)) if uncapped else None,
    )
    estimate = _pct(statistics.fmean(changes)) if changes else None
    bound = bound_at(confidence, min_rounds, max_rounds, n) if n >= min_rounds else None
    if out_of_time and min_rounds <= n < max_rounds:  # past max_rounds no look is taken, time or not
        bound = final_bound(confidence, min_rounds, max_rounds, n)
    if bound is None:
        if n >= max_rounds or out_of_time:
            why = (
                f"the time budget ran out before gate.ab.min_rounds ({min_rounds}) (gate.ab.max_seconds)"
                if out_of_time
                else f"past gate.ab.max_rounds ({max_rounds}) between looks"
            )
            return ABDecision(
                "UNKNOWN", n, estimate, None, None, None, None, None, f"{n} rounds, {why}", *extra
            )
        return ABDecision(
            "CONTINUE", n, estimate, None, None, None, None, None, f"{n} rounds, no look yet", *extra
        )
    last = n >= max_rounds or out_of_time
    judged = _judge(changes, limit, bound, last)
    status, reason = _status(judged, tolerance_pct, limit, last)
    if steps.significant and status != "FAIL":
        full = _judge(uncapped or changes, limit, bound, last)
        if full.verdict == "FAIL":
            status, reason = "FAIL", f"slower beyond -{tolerance_pct:g}% counting the stalls in full"
        else:
            status, reason = None, "the candidate stalls more, and its uncapped change is undecided"
        reason += f" ({steps.text()})"
    elif steps.lopsided and status == "PASS" and not last:
        status, reason = None, f"no PASS yet: {steps.text()}, more rounds"
    if out_of_time and n < max_rounds and status is not None:
        reason += f" (the time budget's last look, gate.ab.max_seconds, after {n} rounds)"
    if status is None:
        if out_of_time and n < max_rounds:
            status = "UNKNOWN"
            reason = (
                f"undecided after {n} rounds when the time budget ran out (gate.ab.max_seconds): {reason}"
            )
        elif last:
            status, reason = "UNKNOWN", f"undecided after {n} rounds (gate.ab.max_rounds): {reason}"
        else:
            status, reason = "CONTINUE", f"undecided after {n} rounds: {reason}"
    # The smallest true slowdown whose upper bound would fall below -tolerance with MDE_POWER probability.
    mde = -_pct(limit - (bound.fail_t + _t_power(n - 1)) * judged.se)
    return ABDecision(
        status,
        n,
        _pct(judged.mean),
        _pct(judged.low),
        _pct(judged.high),
        _level(bound),
        mde,
        100.0 * judged.sd,
        reason,
        *extra,
    )


def _status(judged: _Judged, tolerance_pct: float, limit: float, last: bool) -> tuple[ABStatus | None, str]:
    tol = f"-{tolerance_pct:g}%"
    zone = -INDIFFERENCE * limit
    if judged.verdict == "FAIL" and judged.in_zone:
        return (
            "FAIL",
            f"at the last look, slower than {tol} by the estimate, beyond {_pct(limit + zone):+.1f}% "
            "with confidence",
        )
    if judged.verdict == "PASS" and judged.in_zone:
        return (
            "PASS",
            f"at the last look, within {tol} by the estimate, within {_pct(limit - zone):+.1f}% "
            "with confidence",
        )
    if judged.verdict == "FAIL":
        return "FAIL", f"slower beyond {tol} with confidence"
    if judged.verdict == "PASS":
        return "PASS", f"within {tol} with confidence"
    return (
        None,
        "the interval is wider than the indifference zone" if last else "the interval spans the tolerance",
    )


def decide_rounds(
    rounds: Sequence[Mapping[str, Any]],
    tolerance_pct: float,
    confidence: float,
    min_rounds: int,
    max_rounds: int,
    out_of_time: bool = False,
) -> ABDecision:
    """decide() over the rounds of an ab.json: their figures, their capped steps and uncapped figures."""
    return decide(
        [float(r["change_log"]) for r in rounds],
        tolerance_pct,
        confidence,
        min_rounds,
        max_rounds,
        out_of_time,
        capped=capped_over(rounds),
        uncapped=uncapped_changes(rounds),
    )
