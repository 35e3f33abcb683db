"""benchmarks/rates.py's error rates rest on two things checked here: its decisions on arrays are
decide()'s (benchmarks/rates_rule.py), and its injected slowdowns are exactly their labels."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from benchgate.ab.decision import round_change

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import rates
from rates_rule import STATUSES, Drawn, Rule, decisions, exact, replica

RULE = Rule(5.0, 0.95, 4, 27, 30, 2.0)


def test_the_arrays_decide_as_decide_does_across_the_tolerance() -> None:
    rng = np.random.default_rng(7)
    # Sequences around the tolerance, where every look and the last look's zone come into play.
    centres = np.repeat(np.log1p(np.array([0.0, -0.03, -0.045, -0.05, -0.055, -0.07])), 40)
    x = centres[:, None] + rng.normal(0, 0.04, size=(len(centres), RULE.max_rounds))
    drawn = Drawn(x, x, np.zeros((*x.shape, 2), dtype=int))
    mine, theirs = replica(x, RULE), exact(drawn, RULE)
    np.testing.assert_array_equal(mine[0], theirs[0])
    np.testing.assert_array_equal(mine[1], theirs[1])
    np.testing.assert_allclose(mine[2], theirs[2], rtol=1e-9)
    np.testing.assert_allclose(mine[3], theirs[3], rtol=1e-9)
    # Every outcome was exercised, at early looks and at the last.
    assert set(STATUSES[s] for s in mine[0]) == {"PASS", "FAIL", "UNKNOWN"}
    assert {4, 27} <= set(mine[1].tolist())


def test_a_sequence_with_capped_steps_goes_to_decide_itself() -> None:
    x = np.full((1, RULE.max_rounds), 0.0) + np.linspace(-0.01, 0.01, RULE.max_rounds)
    capped = np.zeros((1, RULE.max_rounds, 2), dtype=int)
    capped[0, :, 1] = 1  # a capped candidate step every round: significant, no PASS
    status = decisions(Drawn(x, x, capped), RULE)[0]
    assert STATUSES[int(status[0])] != "PASS"
    assert STATUSES[int(replica(x, RULE)[0][0])] == "PASS"  # what the arrays alone would have said


@pytest.mark.parametrize(("change", "every"), [(-0.05, 1), (-0.10, 1), (-0.10, 5)])
def test_the_injected_change_is_the_label(change: float, every: int) -> None:
    rng = np.random.default_rng(3)
    base = list(0.02 + rng.normal(0, 0.001, 90))
    cand = list(0.02 + rng.normal(0, 0.001, 90))
    for phase in range(every):
        slowed = rates._inject(cand, change, every, phase)
        # tokens/s over the round's total time changes by exactly the label
        assert sum(cand) / sum(slowed) == pytest.approx(1 + change, rel=1e-12)
        moved = round_change(base, slowed) - round_change(base, cand)
        assert moved == pytest.approx(math.log1p(change), rel=1e-9)
