"""Rare events: steps beyond the stall cap, counted per side over all rounds and tested as rates.

A round's figure caps each step at STALL_CAP times the round's median step, so that one stall of seconds
cannot decide a round. A cost that comes less than once a round (a 60x step every 400 steps: -12.9%
tokens/s) is then mostly capped away, and the round figures pass it. The capped steps themselves are the
evidence: under no change, a capped step (a host stall) lands on either side with probability 1/2, so the
candidate's share of all capped steps is binomial(total, 1/2). Pure: counts in, a verdict on them out.

    significant  P(candidate's count or more | binomial(total, 1/2)) < RARE_ALPHA: the candidate stalls
                 more than the base. The decision cannot PASS; ab/decision.py judges the uncapped change
                 instead (FAIL when its bound is beyond tolerance), and otherwise takes more rounds or
                 ends UNKNOWN.
    lopsided     the candidate has more than twice the base's capped steps (1-0, 3-1), not yet
                 significant: no PASS at that look (more rounds), except at the last look, where more
                 rounds cannot be had and unchanged code with stalls on both sides must still PASS.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchgate.results.figures import STALL_CAP

# The one-sided level of the capped-step test: strict, because it is taken at every look and a false
# alarm costs unchanged code its PASS.
RARE_ALPHA = 0.05


@dataclass(frozen=True)
class CappedSteps:
    base: int
    candidate: int

    @property
    def p_value(self) -> float:
        """P(X >= candidate) for X ~ binomial(base + candidate, 1/2): 1 with no capped step."""
        return binomial_upper_tail(self.candidate, self.base + self.candidate)

    @property
    def significant(self) -> bool:
        return self.candidate > self.base and self.p_value < RARE_ALPHA

    @property
    def lopsided(self) -> bool:
        return self.candidate > 2 * self.base

    def text(self) -> str:
        return f"capped steps {self.candidate} candidate vs {self.base} base (p={self.p_value:.3g})"


def binomial_upper_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ binomial(n, 1/2), exactly."""
    if n < 0 or k < 0 or k > n + 1:
        raise ValueError(f"a binomial tail needs 0 <= k <= n + 1, got k={k!r}, n={n!r}")
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2.0**n


def count_capped(base_step_s: Sequence[float], candidate_step_s: Sequence[float]) -> tuple[int, int]:
    """(base's, candidate's) steps beyond STALL_CAP times the round's median step (both sides' steps)."""
    cap = STALL_CAP * statistics.median([*base_step_s, *candidate_step_s])
    return sum(t > cap for t in base_step_s), sum(t > cap for t in candidate_step_s)


def uncapped_change(base_step_s: Sequence[float], candidate_step_s: Sequence[float]) -> float:
    """log(total base time / total candidate time) with no cap: what the stalls cost, counted in full."""
    return math.log(sum(base_step_s) / sum(candidate_step_s))


def capped_over(rounds: Sequence[Mapping[str, Any]]) -> CappedSteps:
    """The capped steps of all rounds: the runner's counts where a round has them, else counted from the
    round's steps, else none (ab.json files written before either)."""
    base = candidate = 0
    for r in rounds:
        if "base_capped_steps" in r:
            base += int(r["base_capped_steps"] or 0)
            candidate += int(r.get("candidate_capped_steps") or 0)
        elif r.get("base_step_s") and r.get("candidate_step_s"):
            b, c = count_capped(r["base_step_s"], r["candidate_step_s"])
            base, candidate = base + b, candidate + c
    return CappedSteps(base, candidate)


def uncapped_changes(rounds: Sequence[Mapping[str, Any]]) -> list[float]:
    """Each round's uncapped figure: saved, else from its steps, else its capped figure (older files)."""
    changes = []
    for r in rounds:
        if "uncapped_change_log" in r:
            changes.append(float(r["uncapped_change_log"]))
        elif r.get("base_step_s") and r.get("candidate_step_s"):
            changes.append(uncapped_change(r["base_step_s"], r["candidate_step_s"]))
        else:
            changes.append(float(r["change_log"]))
    return changes
