"""The A/B rule on arrays, for benchmarks/rates.py: decide() look by look over many sequences at once,
and decide() itself where the arrays do not reach (rare events) and on a sample, to check them.

decide() is pure, and its pieces are imported from where it takes them (ab/levels.py: the looks, their
t bounds, the indifference zone), so the arrays follow the rule; what they cannot import (the order of
its tests, the zone's use at the last look) is checked by `verify` on every row of every run.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from benchgate.ab.decision import decide
from benchgate.ab.levels import INDIFFERENCE, LookBound, look_bounds, look_rounds
from benchgate.ab.rare import CappedSteps

STATUSES = ("PASS", "FAIL", "UNKNOWN")


@dataclass
class Rule:
    tolerance_pct: float
    confidence: float
    min_rounds: int
    max_rounds: int
    steps: int  # gate.ab.steps
    min_measured_s: float

    @property
    def looks(self) -> list[int]:
        return look_rounds(self.min_rounds, self.max_rounds)

    @functools.cached_property
    def bounds(self) -> tuple[LookBound, ...]:
        """decide()'s bound at every look (ab/levels.py)."""
        return look_bounds(self.confidence, self.min_rounds, self.max_rounds)


@dataclass
class Drawn:
    """Sequences of rounds, max_rounds long: capped figures, uncapped figures, capped steps per side."""

    x: np.ndarray
    u: np.ndarray
    capped: np.ndarray  # (sequences, rounds, 2)

    def rows(self, keep: np.ndarray) -> Drawn:
        return Drawn(self.x[keep], self.u[keep], self.capped[keep])


def replica(x: np.ndarray, rule: Rule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """decide() on arrays, for sequences without a capped step (ab/rare.py says nothing then): each row
    of `x` (round figures) decided look by look. Returns (status index into STATUSES, rounds, ci_low_pct,
    ci_high_pct) at the look that ended each row."""
    n_seq = x.shape[0]
    status = np.full(n_seq, 2)
    rounds = np.full(n_seq, rule.max_rounds)
    low_pct, high_pct = np.full(n_seq, np.nan), np.full(n_seq, np.nan)
    alive = np.arange(n_seq)  # the sequences still undecided: only they are looked at again
    limit = math.log1p(-rule.tolerance_pct / 100.0)
    zone = -INDIFFERENCE * limit
    for bound in rule.bounds:
        n, last = bound.rounds, bound.rounds >= rule.max_rounds
        prefix = x[alive, :n]
        mean = prefix.mean(axis=1)
        se = prefix.std(axis=1, ddof=1) / math.sqrt(n)
        low, high = mean - bound.pass_t * se, mean + bound.fail_t * se
        fail, passed = high < limit, ~(high < limit) & (low > limit)
        if last:  # the indifference zone: by the estimate where the interval lies within it
            open_ = ~fail & ~passed
            fail = fail | (open_ & (mean < limit) & (high < limit + zone))
            passed = passed | (open_ & (mean >= limit) & (low > limit - zone))
        ends = np.ones(len(alive), dtype=bool) if last else fail | passed
        status[alive[fail]], status[alive[passed]] = 1, 0
        done = alive[ends]
        rounds[done] = n
        low_pct[done], high_pct[done] = 100 * np.expm1(low[ends]), 100 * np.expm1(high[ends])
        alive = alive[~ends]
    return status, rounds, low_pct, high_pct


def exact(drawn: Drawn, rule: Rule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """decide() itself on each sequence, round by round as the runner calls it (its capped steps and
    uncapped figures included, as decide_rounds passes them)."""
    out = np.zeros((len(drawn.x), 4))
    for i in range(len(drawn.x)):
        for n in range(1, rule.max_rounds + 1):
            counts = drawn.capped[i, :n].sum(axis=0)
            d = decide(
                [float(v) for v in drawn.x[i, :n]],
                rule.tolerance_pct,
                rule.confidence,
                rule.min_rounds,
                rule.max_rounds,
                capped=CappedSteps(int(counts[0]), int(counts[1])),
                uncapped=[float(v) for v in drawn.u[i, :n]],
            )
            if d.status != "CONTINUE":
                break
        low = math.nan if d.ci_low_pct is None else d.ci_low_pct
        high = math.nan if d.ci_high_pct is None else d.ci_high_pct
        out[i] = (STATUSES.index(d.status), d.rounds, low, high)
    return out[:, 0].astype(int), out[:, 1].astype(int), out[:, 2], out[:, 3]


def decisions(drawn: Drawn, rule: Rule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every sequence decided: on arrays, or by decide() itself where a round has a capped step."""
    stalls = drawn.capped.sum(axis=(1, 2)) > 0
    got = replica(drawn.x, rule)
    if stalls.any():
        for mine, theirs in zip(got, exact(drawn.rows(stalls), rule), strict=True):
            mine[stalls] = theirs
    return got


def verify(drawn: Drawn, got: tuple[np.ndarray, ...], rule: Rule, where: str) -> int:
    """decide() itself on the sequences of `drawn`; stops the run at the first difference from `got`
    (status, rounds or interval). Returns the sequences checked."""
    theirs = exact(drawn, rule)
    for i in range(len(drawn.x)):
        a = tuple(float(g[i]) for g in got)
        b = tuple(float(g[i]) for g in theirs)
        if a[:2] != b[:2] or not all(
            math.isclose(p, q, rel_tol=1e-9, abs_tol=1e-9) for p, q in zip(a[2:], b[2:], strict=True)
        ):
            raise SystemExit(
                f"{where}: decide() gave {b} where the arrays gave {a} (status index, rounds, interval; "
                f"sequence {i}): the rule has changed: update replica() in benchmarks/rates_rule.py to it"
            )
    return len(drawn.x)
