"""The looks of the A/B rule and the bound at each: one error budget spent over the rounds, calibrated on
real rounds rather than on Gaussians.

Looks. After rounds `min_rounds`, then about 1.5 times as many each time (4, 6, 9, 14, 21, 32, 48, ...)
and at `max_rounds` (4, 6, 9, 14, 21, 27 by default).

Spending. A look at round n may have spent, in all, `spent(n) = alpha * n / (n + SPEND_SHAPE * min_rounds)`
of the error budget alpha = 1 - confidence on each side (FAIL and PASS apart): 40% of it by the first look
and 82% by round 27 with the defaults, the rest never, whatever max_rounds says. So the bounds of the
first looks do not depend on max_rounds, and a resume with a larger max_rounds keeps spending the same
budget where the earlier run stopped: its looks after round M0 spend only spent(M1) - spent(M0) more.
The one look the earlier run took at its own max_rounds M0, or where its time budget ended it (off the
1.5x schedule: final_bound), is the only extra spend, at most spent(M0) - spent(the look before it);
the total stays under alpha for any resume up to (SPEND_SHAPE * min_rounds / that extra) rounds
(about 4 times the default max_rounds, measured in tests/unit/ab/test_ab_error_control.py).

Calibration. Each look's bound is a threshold on the t statistic (mean - limit) / (sd / sqrt(n)), set
so that sequences of rounds drawn from ROUND_SHAPES, whose true change is exactly the limit, first cross
it at that look with probability spent(n_k) - spent(n_k-1). ROUND_SHAPES are real rounds: the pinned
A/A round figures of the recorded pools (benchmarks/results/pool-*.json), each pool centred and divided
by its own spread, so the bounds carry the tails and skew of real rounds, not of a Gaussian. The
thresholds are scale-free, so one simulation (fixed seed: the same on every machine) serves every
workload.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from benchgate.kit import stats

# spent(n) = alpha * n / (n + SPEND_SHAPE * min_rounds): a larger shape spends less at the first looks.
SPEND_SHAPE = 1.5
# The indifference zone at the last look, as a share of the tolerance (log units): there the rule
# decides by the estimate, and its errors are controlled only outside limit +- INDIFFERENCE * limit.
INDIFFERENCE = 0.4
_SEQUENCES = 40_000
_SEED = 20261128

# Studentised pinned A/A round figures: pool-stack70.json (25 rounds, 14 ms steps), pool-stack350.json
# (25, 74 ms), pool-quiet-2026-11-28.json (its first 29, 30 ms); each pool's figures minus their mean,
# over their sd. Skewness -0.09, kurtosis 3.04 (a Gaussian: 0 and 3).
ROUND_SHAPES = (
    -0.8913, 0.4773, 0.389, 0.1565, -2.1847, 0.0377, -0.3757, 0.4413, 0.6339, 0.528, 1.4865, -0.8845,
    0.4132, 0.9509, 1.3588, -3.038, 0.0445, 0.2762, 0.8625, -0.1924, 0.0689, 0.009, -0.3499, 0.5462,
    -0.7638, -0.3281, 1.6994, 1.3404, 0.5733, -0.331, -0.7065, 1.5488, -0.1508, -0.7516, 0.9526, -0.3263,
    0.2964, -1.0914, -1.8882, -0.8174, -0.8436, 0.3655, -0.8577, 0.6912, -1.1909, 1.3367, 1.3777, 0.4038,
    -1.1921, -0.1102, 2.5528, 1.13, 0.9754, 0.1791, -0.5352, -1.1767, 0.194, -0.808, -0.8089, -1.0062,
    1.9463, -0.6232, -0.1869, -0.448, -1.0771, 0.1139, 1.2637, 0.0378, 1.0598, 0.7812, 1.1011, 0.4042,
    -1.1319, 0.1627, -0.7161, -1.0878, -0.4598, -0.9068, -0.9293,
)  # fmt: skip


@dataclass(frozen=True)
class LookBound:
    rounds: int
    fail_t: float  # FAIL when (mean - limit) / se < -fail_t
    pass_t: float  # PASS when (mean - limit) / se > pass_t
    spent: float  # the error spent on each side by this look and those before it

    def level(self) -> float:
        """The two-sided level of the interval whose ends are this look's two bounds (Student's t)."""
        df = self.rounds - 1
        return stats.t_cdf(self.fail_t, df) + stats.t_cdf(self.pass_t, df) - 1.0


def look_rounds(min_rounds: int, max_rounds: int) -> list[int]:
    """The rounds after which the rule decides: min_rounds, ~1.5x more each time, and max_rounds."""
    looks, n = [], min_rounds
    while n < max_rounds:
        looks.append(n)
        n = max(n + 1, math.ceil(1.5 * n))
    return [*looks, max_rounds]


def spent(rounds: int, alpha: float, min_rounds: int) -> float:
    """The error the looks up to `rounds` may have spent on each side, of the budget `alpha`."""
    return alpha * rounds / (rounds + SPEND_SHAPE * min_rounds)


def look_bounds(confidence: float, min_rounds: int, max_rounds: int) -> tuple[LookBound, ...]:
    """The bound of every look of the schedule (min_rounds, max_rounds)."""
    return bounds_at(confidence, min_rounds, tuple(look_rounds(min_rounds, max_rounds)))


def bound_at(confidence: float, min_rounds: int, max_rounds: int, rounds: int) -> LookBound | None:
    """The bound of the look at `rounds`, or None when no look falls there."""
    return _by_rounds(confidence, min_rounds, max_rounds).get(rounds)


def final_bound(confidence: float, min_rounds: int, max_rounds: int, rounds: int) -> LookBound:
    """The bound of a last look taken at `rounds` because the time budget ends there: the planned looks
    before it, then this one, which spends spent(rounds) less what those spent. At a planned look it is
    that look's bound (the first draws and the spending do not depend on the schedule's end)."""
    earlier = tuple(n for n in look_rounds(min_rounds, max_rounds) if n < rounds)
    return bounds_at(confidence, min_rounds, (*earlier, rounds))[-1]


@functools.lru_cache(maxsize=64)
def _by_rounds(confidence: float, min_rounds: int, max_rounds: int) -> dict[int, LookBound]:
    return {b.rounds: b for b in look_bounds(confidence, min_rounds, max_rounds)}


@functools.lru_cache(maxsize=64)
def bounds_at(confidence: float, min_rounds: int, looks: tuple[int, ...]) -> tuple[LookBound, ...]:
    """The bounds of looks at `looks` rounds (increasing), each spending its share on each side."""
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence: got {confidence!r}, expected a probability between 0.5 and 1")
    if not looks or looks[0] < 2 or any(b <= a for a, b in itertools.pairwise(looks)):
        raise ValueError(f"looks: got {looks!r}, expected increasing round counts from 2")
    alpha = 1.0 - confidence
    rng = np.random.default_rng(_SEED)
    # Drawn round by round (then transposed), so the first k rounds are the same draws for any schedule:
    # the looks a resume shares with the run it continues keep their bounds exactly.
    draws = rng.choice(np.asarray(ROUND_SHAPES), size=(looks[-1], _SEQUENCES)).T
    sums, squares = np.cumsum(draws, axis=1), np.cumsum(draws * draws, axis=1)
    crossed = {"fail": np.zeros(_SEQUENCES, dtype=bool), "pass": np.zeros(_SEQUENCES, dtype=bool)}
    result, before = [], 0.0
    for n in looks:
        mean = sums[:, n - 1] / n
        var = np.maximum((squares[:, n - 1] - n * mean * mean) / (n - 1), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(var > 0, mean / np.sqrt(var / n), 0.0)  # equal draws tell nothing: no crossing
        now = spent(n, alpha, min_rounds)
        target = round((now - before) * _SEQUENCES)
        thresholds = {}
        for side, values in (("fail", t), ("pass", -t)):
            thresholds[side] = _threshold(values[~crossed[side]], target)
            crossed[side] |= values < -thresholds[side]
        result.append(LookBound(n, thresholds["fail"], thresholds["pass"], now))
        before = now
    return tuple(result)


def _threshold(values: np.ndarray, crossings: int) -> float:
    """The t above which, negated, `crossings` of `values` lie below: midway between neighbours."""
    if crossings <= 0 or values.size == 0:
        return math.inf
    ordered = np.sort(values)
    k = min(crossings, ordered.size - 1)
    return float(-0.5 * (ordered[k - 1] + ordered[k]))
