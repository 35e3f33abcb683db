"""The bisect search (ranges/bisect.py) on synthetic commits: each commit has a speed, and an A/B
between two of them is decided by the real sequential rule (ab/decision.decide) on round figures that
are the true change plus alternating noise, as `run_ab` feeds it rounds until it decides."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from benchgate.ab.decision import ABDecision, decide
from benchgate.ranges.bisect import Bisection, Step, bisect, max_decisions

TOLERANCE_PCT = 10.0
CONFIDENCE = 0.95
MIN_ROUNDS, MAX_ROUNDS = 2, 6
NOISE = 0.01  # each round's figure is the true log change +- 1%
GOOD = "good"
AT_LIMIT = 1 - TOLERANCE_PCT / 100  # a change of exactly -tolerance
HALFWAY = 0.5**0.5  # half of a -50% good->bad change, in log units: where midpoints are judged
# Rounds this noisy leave an A/B at the tolerance undecided even at its last look: wider than the zone.
UNDECIDABLE_NOISE = 0.3


class SyntheticAB:
    """A `Decide` over commits of known speed (tokens/s relative to good), recording its calls."""

    def __init__(self, speeds: dict[str, float]) -> None:
        self.speeds = speeds
        self.calls: list[tuple[str, str, bool]] = []
        self.tolerances: list[float | None] = []
        self.noisy: set[tuple[str, str]] = set()  # pairs whose rounds are UNDECIDABLE_NOISE apart

    def __call__(
        self, base: str, candidate: str, more_rounds: bool = False, tolerance_pct: float | None = None
    ) -> ABDecision:
        self.calls.append((base, candidate, more_rounds))
        self.tolerances.append(tolerance_pct)
        change = math.log(self.speeds[candidate] / self.speeds[base])
        max_rounds = MAX_ROUNDS * (2 if more_rounds else 1)
        rounds: list[float] = []
        while True:
            noise = UNDECIDABLE_NOISE if (base, candidate) in self.noisy else NOISE
            rounds.append(change + noise * (-1) ** len(rounds))
            decision = decide(rounds, tolerance_pct or TOLERANCE_PCT, CONFIDENCE, MIN_ROUNDS, max_rounds)
            if decision.status != "CONTINUE":
                return decision


def history(speeds: Sequence[float]) -> tuple[list[str], SyntheticAB]:
    """Commits c1..cN after good (speed 1.0), each on the one before it."""
    commits = [f"c{i}" for i in range(1, len(speeds) + 1)]
    return commits, SyntheticAB({GOOD: 1.0, **dict(zip(commits, speeds, strict=True))})


def run(commits: list[str], ab: SyntheticAB, parents: dict[str, str] | None = None) -> Bisection:
    on_line = dict(zip(commits, [GOOD, *commits[:-1]], strict=True))
    steps: list[Step] = []
    found = bisect(GOOD, commits, ab, lambda sha: (parents or on_line)[sha], steps.append)
    assert list(found.steps) == steps  # every step was reported as it was decided, in order
    assert len(found.steps) <= max_decisions(len(commits))
    return found


@pytest.mark.parametrize(
    ("commits", "bound"), [(1, 2), (2, 3), (3, 4), (4, 4), (11, 6), (16, 6), (17, 7), (1000, 12)]
)
def test_max_decisions_is_ceil_log2_plus_two(commits: int, bound: int) -> None:
    assert max_decisions(commits) == bound == math.ceil(math.log2(commits)) + 2


def test_culprit_in_the_middle_is_found_by_halving_then_its_own_change_is_measured() -> None:
    # The tests/ranges history: commit 7 (c7) doubles the work, the later ones keep it.
    commits, ab = history([1.0] * 6 + [0.5] * 5)
    found = run(commits, ab)
    assert found.status == "CULPRIT" and found.culprit == "c7" and found.exit_code == 1
    assert [(s.role, s.base, s.candidate, s.decision.status) for s in found.steps] == [
        ("range", GOOD, "c11", "FAIL"),
        ("search", GOOD, "c6", "PASS"),
        ("search", GOOD, "c9", "FAIL"),
        ("search", GOOD, "c8", "FAIL"),
        ("search", GOOD, "c7", "FAIL"),
        ("culprit", "c6", "c7", "FAIL"),
    ]
    assert [s.commits_left for s in found.steps] == [11, 5, 3, 2, 1, 1]
    assert found.parent == "c6" and found.vs_good is found.steps[4].decision
    assert found.own is found.steps[5].decision
    assert found.own.change_pct == pytest.approx(-50, abs=1)
    assert not any(more for _, _, more in ab.calls)


def test_culprit_first_commit_reuses_its_decision_against_good_as_its_own_change() -> None:
    commits, ab = history([0.5] * 8)
    found = run(commits, ab)
    assert found.culprit == "c1" and found.parent == GOOD
    # Its parent is good: A/B(good, c1) is its own change, not measured a second time.
    assert [s.role for s in found.steps] == ["range", "search", "search", "search"]
    assert found.own is found.vs_good is found.steps[-1].decision
    assert len(ab.calls) == len(set(ab.calls)) == 4


def test_culprit_last_commit() -> None:
    commits, ab = history([1.0] * 9 + [0.6])
    found = run(commits, ab)
    assert found.culprit == "c10" and (found.first, found.last) == (9, 9)
    assert found.steps[-1].role == "culprit" and found.steps[-1].base == "c9"


def test_no_regression_is_one_decision() -> None:
    commits, ab = history([1.0, 0.97, 1.02, 0.98])
    found = run(commits, ab)
    assert found.status == "NO_REGRESSION" and found.exit_code == 0 and found.culprit is None
    assert len(found.steps) == 1 and found.steps[0].commits_left == 0
    assert ab.calls == [(GOOD, "c4", False)]


def test_a_faster_bad_commit_is_no_regression() -> None:
    commits, ab = history([0.5, 1.5])
    assert run(commits, ab).status == "NO_REGRESSION"


def test_creep_finds_where_the_total_first_passes_half_the_change_and_says_its_own_change_is_within() -> None:
    # Each commit 4% slower than the one before: no single one beyond 10%, the range's total -30.7%.
    commits, ab = history([0.96**i for i in range(1, 10)])
    found = run(commits, ab)
    # Midpoints are judged against half the range's change (0.96**4.5: -16.8%), not the tolerance.
    search = [t for t, (_, c, _) in zip(ab.tolerances, ab.calls, strict=True) if c not in ("c9",)]
    assert search[0] == pytest.approx(-100 * math.expm1(4.5 * math.log(0.96)), rel=1e-3)
    assert all(step.tolerance_pct == search[0] for step in found.steps if step.role == "search")
    assert found.culprit == "c5"  # 0.96**4 = -15.1% is within half of it, 0.96**5 = -18.5% is not
    assert found.vs_good is not None and found.vs_good.status == "FAIL"
    assert found.own is not None and found.own.status == "PASS"
    assert found.own.change_pct == pytest.approx(-4, abs=1)


def test_unknown_range_decision_gets_more_rounds_once_then_stops() -> None:
    commits, ab = history([1.0] * 5 + [AT_LIMIT])
    ab.noisy = {(GOOD, "c6")}
    found = run(commits, ab)
    assert found.status == "UNKNOWN" and found.exit_code == 4
    assert ab.calls == [(GOOD, "c6", False), (GOOD, "c6", True)]
    (step,) = found.steps
    assert step.more_rounds and step.decision.status == "UNKNOWN"
    assert step.decision.rounds == 2 * MAX_ROUNDS
    assert (found.first, found.last) == (0, 5)  # nothing narrowed


def test_unknown_search_step_stops_with_the_narrowed_range() -> None:
    # c1..c3 unchanged, c4 exactly at half the range's change (undecidable), c5..c8 clearly slower.
    commits, ab = history([1.0, 1.0, 1.0, HALFWAY, 0.5, 0.5, 0.5, 0.5])
    ab.noisy = {(GOOD, "c4")}
    found = run(commits, ab)
    assert found.status == "UNKNOWN" and found.culprit is None
    # range FAIL; c4 (middle of 1..8) UNKNOWN twice: stop, the culprit is one of c1..c8 still.
    assert [(c, more) for _, c, more in ab.calls] == [("c8", False), ("c4", False), ("c4", True)]
    assert found.steps[-1].candidate == "c4" and found.steps[-1].more_rounds
    assert (found.first, found.last) == (0, 7)


def test_unknown_after_narrowing_keeps_what_was_narrowed() -> None:
    commits, ab = history([1.0, 1.0, 1.0, 1.0, 1.0, HALFWAY, 0.5, 0.5])
    ab.noisy = {(GOOD, "c6")}
    found = run(commits, ab)
    assert found.status == "UNKNOWN"
    assert [c for _, c, more in ab.calls if not more] == ["c8", "c4", "c6"]
    assert (found.first, found.last) == (4, 7)  # c5..c8: c4 passed, c8 failed
    assert found.steps[-1].commits_left == 4


def test_a_decided_culprit_whose_own_change_stays_unknown_is_still_the_culprit() -> None:
    # c2's own change is exactly -10% (undecidable), its change vs good -14.5% is beyond half the range's
    # (-15.3%: midpoints against -8.0%), c1's -5% is not.
    commits, ab = history([0.95, 0.95 * AT_LIMIT, 0.95 * AT_LIMIT * 0.99])
    ab.noisy = {("c1", "c2")}
    found = run(commits, ab)
    assert found.status == "CULPRIT" and found.culprit == "c2" and found.exit_code == 1
    assert found.own is not None and found.own.status == "UNKNOWN"
    assert found.steps[-1].role == "culprit" and found.steps[-1].more_rounds


def test_culprit_made_off_the_line_is_measured_against_its_own_parent() -> None:
    # good sits on a merged branch: c1's first parent is the fork point, not good.
    commits, ab = history([0.5, 0.5, 0.5])
    ab.speeds["fork"] = 0.52
    found = run(commits, ab, parents={"c1": "fork", "c2": "c1", "c3": "c2"})
    assert found.culprit == "c1" and found.parent == "fork"
    assert found.steps[-1].role == "culprit" and found.steps[-1].base == "fork"
    assert found.own is not None and found.own.status == "PASS"


def test_every_culprit_position_within_the_bound() -> None:
    for n in range(1, 34):
        for culprit in range(n):
            commits, ab = history([1.0] * culprit + [0.5] * (n - culprit))
            found = run(commits, ab)
            assert found.culprit == commits[culprit], (n, culprit)
            assert len(ab.calls) == len(found.steps) <= max_decisions(n)


def test_an_empty_range_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one commit"):
        bisect(GOOD, [], SyntheticAB({}), lambda sha: GOOD)
