"""The search of `benchgate bisect`: the first commit of good..bad whose tokens/s is slower than good's
beyond tolerance, found by A/B decisions between commits (as Chromium's Pinpoint bisects). Pure: it
asks a `Decide` callable for each A/B (ranges/bisect_run.py runs them), so the logic is tested on
synthetic decisions.

The commits are good..bad along first parents, oldest first; bad is the last. Each decision is
A/B(base, candidate): FAIL when the candidate is slower than the base beyond tolerance with confidence,
PASS when it is within tolerance (or faster), UNKNOWN when the rounds could not tell (ab/decision.py).

1. A/B(good, bad). PASS: no regression beyond tolerance in the range (exit 0). UNKNOWN: exit 4.
2. FAIL: binary search over the commits. A/B(good, mid), judged against half the change step 1 measured
   (good->bad), not against the tolerance: FAIL (slower than good by more than half of it) puts the
   culprit at or before mid, PASS after it. A midpoint is either good-like or bad-like, and the middle
   of the two is where an A/B tells them apart fastest and most surely: against the tolerance, a
   good->bad change just past it would leave every bad-like midpoint at the boundary, UNKNOWN. Always
   against good, never between neighbours: a slowdown built up by several commits, each small, is still
   found, at the commit where the total first goes past half of it.
3. One commit left, the culprit: A/B(its first parent, culprit) measures the change it introduced
   itself. Within tolerance while its change vs good is not: the slowdown built up over several commits.
   Where its first parent is good, step 1 or 2 measured exactly that already and is not repeated.

Decisions: 1 + ceil(log2 n) + 1 at most for n commits (`max_decisions`). A step that ends UNKNOWN is
given more rounds once (the same A/B resumed with a larger budget: `more_rounds=True`); still UNKNOWN,
the search stops with the range it narrowed the culprit down to (exit 4). The culprit's own change
may stay UNKNOWN without stopping anything: the culprit is already found.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from benchgate.ab.decision import ABDecision
from benchgate.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_UNKNOWN

Role = Literal["range", "search", "culprit"]
BisectStatus = Literal["CULPRIT", "NO_REGRESSION", "UNKNOWN"]
EXIT_CODES: dict[BisectStatus, int] = {
    "CULPRIT": EXIT_REGRESSION,
    "NO_REGRESSION": EXIT_PASS,
    "UNKNOWN": EXIT_UNKNOWN,
}


class Decide(Protocol):
    """The A/B decision of `candidate` against `base` (full SHAs). `more_rounds`: resume the A/B of the
    same pair that ended UNKNOWN, with a larger round budget. `tolerance_pct`: judge against this
    slowdown instead of the gate's tolerance (None: the gate's)."""

    def __call__(
        self, base: str, candidate: str, more_rounds: bool = False, tolerance_pct: float | None = None
    ) -> ABDecision: ...


@dataclass(frozen=True)
class Step:
    """One A/B decision of the search, and where the culprit may be after it: commits[first..last]
    (empty when first > last: no culprit)."""

    number: int
    role: Role
    base: str
    candidate: str
    decision: ABDecision
    more_rounds: bool  # ended UNKNOWN once, and was resumed with a larger budget
    first: int
    last: int
    tolerance_pct: float | None = None  # what the step was judged against, where not the gate's tolerance

    @property
    def commits_left(self) -> int:
        return max(0, self.last - self.first + 1)


@dataclass(frozen=True)
class Bisection:
    """What the search found: a culprit, no regression, or an UNKNOWN step and the range left."""

    good: str
    commits: tuple[str, ...]
    steps: tuple[Step, ...]
    status: BisectStatus
    first: int  # the culprit, if any, is one of commits[first..last]
    last: int
    vs_good: ABDecision | None = None  # CULPRIT: the culprit against good
    own: ABDecision | None = None  # CULPRIT: the culprit against its first parent
    parent: str | None = None  # CULPRIT: its first parent

    @property
    def culprit(self) -> str | None:
        return self.commits[self.last] if self.status == "CULPRIT" else None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]


def max_decisions(commits: int) -> int:
    """ceil(log2 commits) + 2: the range, the binary search, the culprit's own change."""
    return (commits - 1).bit_length() + 2


def midpoint_tolerance(change_pct: float | None) -> float | None:
    """The slowdown each midpoint is judged against: half of the measured good->bad change, halved in
    log units (a -20% change gives 10.6%: the geometric middle of the two speeds). None without one."""
    if change_pct is None or not -100.0 < change_pct < 0.0:
        return None
    return -100.0 * math.expm1(0.5 * math.log1p(change_pct / 100.0))


def bisect(
    good: str,
    commits: Sequence[str],
    decide: Decide,
    first_parent: Callable[[str], str],
    on_step: Callable[[Step], None] | None = None,
) -> Bisection:
    """Search `commits` (good..bad along first parents, oldest first) for the first one slower than
    `good` beyond tolerance; `on_step` hears of each step as soon as it is decided."""
    if not commits:
        raise ValueError("a bisect needs at least one commit after good")
    search = _Search(good, tuple(commits), decide, on_step)
    low, high = 0, len(commits) - 1
    decision = search.decide_step("range", good, high)
    if decision.status == "PASS":
        search.record(low, -1)
        return search.ended("NO_REGRESSION", low, -1)
    search.record(low, high)
    if decision.status != "FAIL":
        return search.ended("UNKNOWN", low, high)
    vs_good = decision
    halfway = midpoint_tolerance(decision.change_pct)
    while low < high:
        middle = (low + high) // 2
        decision = search.decide_step("search", good, middle, halfway)
        if decision.status == "FAIL":
            vs_good, high = decision, middle
        elif decision.status == "PASS":
            low = middle + 1
        search.record(low, high)
        if decision.status not in ("PASS", "FAIL"):
            return search.ended("UNKNOWN", low, high)
    culprit = search.commits[high]
    parent = first_parent(culprit)
    own = vs_good  # where the culprit was made on good, its A/B against good is its own change
    if parent != good:
        own = search.decide_step("culprit", parent, high)
        search.record(high, high)
    return search.ended("CULPRIT", high, high, vs_good, own, parent)


class _Search:
    """The steps decided so far; each A/B is given more rounds once where it ended UNKNOWN."""

    def __init__(
        self, good: str, commits: tuple[str, ...], decide: Decide, on_step: Callable[[Step], None] | None
    ) -> None:
        self.good, self.commits, self.decide, self.on_step = good, commits, decide, on_step
        self.steps: list[Step] = []
        self.pending: tuple[Role, str, str, ABDecision, bool] | None = None
        self.tolerance_pct: float | None = None

    def decide_step(
        self, role: Role, base: str, index: int, tolerance_pct: float | None = None
    ) -> ABDecision:
        """A/B(base, commits[index]), with more rounds once after an UNKNOWN; `record` files it."""
        candidate = self.commits[index]
        decision, more_rounds = self.decide(base, candidate, tolerance_pct=tolerance_pct), False
        if decision.status not in ("PASS", "FAIL"):
            decision = self.decide(base, candidate, more_rounds=True, tolerance_pct=tolerance_pct)
            more_rounds = True
        self.pending = (role, base, candidate, decision, more_rounds)
        self.tolerance_pct = tolerance_pct
        return decision

    def record(self, first: int, last: int) -> None:
        """File the step just decided, with where the culprit may be after it."""
        assert self.pending is not None
        step = Step(len(self.steps) + 1, *self.pending, first, last, self.tolerance_pct)
        self.pending = None
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)

    def ended(
        self,
        status: BisectStatus,
        first: int,
        last: int,
        vs_good: ABDecision | None = None,
        own: ABDecision | None = None,
        parent: str | None = None,
    ) -> Bisection:
        steps = tuple(self.steps)
        return Bisection(self.good, self.commits, steps, status, first, last, vs_good, own, parent)
