"""Each A/B verdict's own error rates: what the rule does at the round sd that verdict measured.

A verdict is only worth its error rates, and they depend on the noise it met: the same rule that never
FAILs unchanged code on a quiet host is a coin toss at the tolerance on a loaded one. So with every A/B
verdict the row states, for its own measured round sd and round budget,

    false FAIL   P(FAIL) when the true change is 0
    FAIL at -T   P(FAIL) when the true change is -tolerance (about half: the tolerance is the boundary)
    FAIL at -2T  P(FAIL) when the true change is twice the tolerance (the power that matters)

by simulating `decide()` itself (so the figures follow the rule as it is) over sequences of rounds drawn
from the studentised real rounds (ab/levels.ROUND_SHAPES) scaled to that sd, up to the rounds the A/B
could have taken: max_rounds, or the rounds it had where its time budget ended it. Seeded and cached
(the sd rounded to 0.1 points), so a report computes each figure once and the same on every machine.
Pure: no files; benchmarks/rates.py checks these figures against resampled real pools.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from benchgate.ab.decision import decide
from benchgate.ab.levels import ROUND_SHAPES

RATE_TRIALS = 1000
_SEED = 20261128


@dataclass(frozen=True)
class VerdictRates:
    round_sd_pct: float  # the round sd simulated (the verdict's, rounded to 0.1 points)
    rounds: int  # the most rounds a simulated A/B could take
    trials: int  # simulated A/Bs per true change
    false_fail: float
    fail_at_tolerance: float
    fail_at_twice: float
    tolerance_pct: float

    def clause(self) -> str:
        """The note's short clause: "at this round sd: false FAIL 0.4%, FAIL at -5% 50%, at -10% 99%"."""
        tol = self.tolerance_pct
        return (
            f"at this round sd: false FAIL {_share(self.false_fail)}, FAIL at -{tol:g}% "
            f"{_share(self.fail_at_tolerance)}, at -{2 * tol:g}% {_share(self.fail_at_twice)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _share(rate: float) -> str:
    return f"{100 * rate:.1f}%" if rate < 0.1 else f"{100 * rate:.0f}%"


def verdict_rates(
    round_sd_pct: float,
    tolerance_pct: float,
    confidence: float,
    min_rounds: int,
    max_rounds: int,
    rounds: int | None = None,
    trials: int = RATE_TRIALS,
) -> VerdictRates:
    """The rule's FAIL rates at true changes 0, -T and -2T for rounds of `round_sd_pct` (percent, as
    ABDecision.round_sd_pct), with at most `rounds` rounds (default max_rounds)."""
    if not (math.isfinite(round_sd_pct) and round_sd_pct >= 0):
        raise ValueError(f"round_sd_pct: got {round_sd_pct!r}, expected a finite spread >= 0 (percent)")
    horizon = max_rounds if rounds is None else min(max(rounds, 1), max_rounds)
    return _rates(round(round_sd_pct, 1), tolerance_pct, confidence, min_rounds, max_rounds, horizon, trials)


@functools.lru_cache(maxsize=256)
def _rates(
    sd_pct: float,
    tolerance_pct: float,
    confidence: float,
    min_rounds: int,
    max_rounds: int,
    horizon: int,
    trials: int,
) -> VerdictRates:
    fails = [
        _fail_rate(math.log1p(-k * tolerance_pct / 100), sd_pct / 100, tolerance_pct, confidence, min_rounds,
                   max_rounds, horizon, trials, seed=_SEED + k)
        for k in (0, 1, 2)
    ]  # fmt: skip
    return VerdictRates(sd_pct, horizon, trials, fails[0], fails[1], fails[2], tolerance_pct)


def _fail_rate(
    change_log: float,
    sd_log: float,
    tolerance_pct: float,
    confidence: float,
    min_rounds: int,
    max_rounds: int,
    horizon: int,
    trials: int,
    seed: int,
) -> float:
    """The share of simulated A/Bs that FAIL: decide() after every round, as the runner calls it."""
    rng = random.Random(seed)
    fails = 0
    for _ in range(trials):
        changes: list[float] = []
        while True:
            changes.append(change_log + sd_log * rng.choice(ROUND_SHAPES))
            n = len(changes)
            status = decide(changes, tolerance_pct, confidence, min_rounds, max_rounds, n >= horizon).status
            if status != "CONTINUE":
                break
        fails += status == "FAIL"
    return fails / trials
