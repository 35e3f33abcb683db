"""The A/B rule v3 (ab/levels.py, ab/rare.py, ab/decision.py, ab/error_rates.py): error spending over
looks calibrated on real rounds, an indifference zone at the last look, honest resumes, rare stalls
tested as rates, and each verdict's own error rates. Seeded simulations, fast."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from benchgate.ab.decision import decide, decide_rounds, round_diagnostics
from benchgate.ab.error_rates import verdict_rates
from benchgate.ab.levels import INDIFFERENCE, ROUND_SHAPES, final_bound, look_bounds, spent
from benchgate.ab.rare import CappedSteps, binomial_upper_tail, capped_over, uncapped_changes
from benchgate.checks import scaling

TOL, CONF = 5.0, 0.95
LIMIT = math.log1p(-TOL / 100)
ZONE = INDIFFERENCE * -LIMIT


def _run(change: float, sd: float, trials: int, seed: int, max_rounds: int = 27) -> list[str]:
    """Whole simulated A/Bs: rounds drawn from the real round shapes, decide() after every round."""
    rng = random.Random(seed)
    out = []
    for _ in range(trials):
        changes: list[float] = []
        while True:
            changes.append(change + sd * rng.choice(ROUND_SHAPES))
            status = decide(changes, TOL, CONF, 4, max_rounds).status
            if status != "CONTINUE":
                break
        out.append(status)
    return out


# ---------------------------------------------------------------- looks, spending, resumes


def test_a_resume_keeps_the_bounds_of_the_looks_it_shares_and_spends_only_the_rest() -> None:
    first, resumed = look_bounds(CONF, 4, 27), look_bounds(CONF, 4, 54)
    assert [b.rounds for b in first] == [4, 6, 9, 14, 21, 27]
    assert [b.rounds for b in resumed] == [4, 6, 9, 14, 21, 32, 48, 54]
    assert first[:5] == resumed[:5]  # the same draws, the same thresholds: max_rounds moves nothing before it
    assert [b.spent for b in resumed] == sorted(b.spent for b in resumed)
    assert resumed[-1].spent < 1 - CONF and spent(10**9, 1 - CONF, 4) == pytest.approx(1 - CONF)


def test_a_resume_with_twice_the_rounds_stays_within_one_error_budget() -> None:
    """Gaussian rounds at exactly the limit: FAIL at any look of a run to 27 rounds resumed to 54 (the
    looks it took, 4..27, then 32, 48, 54), with each look's own bound. The old rule (one level for
    max_rounds' looks, recalibrated on resume) measured 6% here."""
    taken = [*look_bounds(CONF, 4, 27), *look_bounds(CONF, 4, 54)[5:]]
    rng = np.random.default_rng(11)
    draws = rng.standard_normal((40_000, 54))
    sums, squares = np.cumsum(draws, axis=1), np.cumsum(draws * draws, axis=1)
    fail = np.zeros(len(draws), dtype=bool)
    for b in taken:
        n = b.rounds
        mean = sums[:, n - 1] / n
        se = np.sqrt((squares[:, n - 1] - n * mean * mean) / (n - 1) / n)
        fail |= mean / se < -b.fail_t
    assert fail.mean() <= 1 - CONF


def test_the_last_look_decides_by_the_estimate_inside_the_zone_and_holds_errors_outside_it() -> None:
    # At the last look, just inside the tolerance with an interval within the zone: PASS, not UNKNOWN.
    near = [LIMIT + 0.004 + 0.01 * (-1) ** i for i in range(27)]
    assert decide(near[:21], TOL, CONF, 4, 27).status == "CONTINUE"
    d = decide(near, TOL, CONF, 4, 27)
    assert d.status == "PASS" and "last look" in d.reason
    below = [LIMIT - 0.004 + 0.01 * (-1) ** i for i in range(27)]
    assert decide(below, TOL, CONF, 4, 27).status == "FAIL"
    # Too noisy for the zone: UNKNOWN still; the time budget ending first makes its own last look.
    noisy = [LIMIT + 0.004 + 0.2 * (-1) ** i for i in range(27)]
    assert decide(noisy, TOL, CONF, 4, 27).status == "UNKNOWN"
    assert decide(near[:14], TOL, CONF, 4, 27, out_of_time=True).status == "PASS"
    assert decide(noisy[:14], TOL, CONF, 4, 27, out_of_time=True).status == "UNKNOWN"
    # Outside the zone the error is held whatever the noise: noise 4x the tolerance, true change at
    # the zone's edges.
    fails = _run(LIMIT + ZONE, 0.2, 1500, seed=1).count("FAIL") / 1500
    passes = _run(LIMIT - ZONE, 0.2, 1500, seed=2).count("PASS") / 1500
    assert fails <= 1 - CONF + 0.015 and passes <= 1 - CONF + 0.015


def test_a_last_look_where_the_time_budget_ends_spends_only_what_the_planned_looks_left() -> None:
    planned = look_bounds(CONF, 4, 27)
    # At a planned look the time budget's last look has that look's bound.
    assert final_bound(CONF, 4, 27, 9) == planned[2]
    # Between looks 6 and 9: all of spent(7), so at most spent(7) - spent(6) more than the looks before.
    at_7 = final_bound(CONF, 4, 27, 7)
    assert at_7.spent == pytest.approx(spent(7, 1 - CONF, 4))
    assert planned[1].spent < at_7.spent < planned[2].spent


@pytest.mark.parametrize("horizon", [5, 7, 11, 17])
def test_errors_outside_the_zone_hold_whatever_round_the_time_budget_ends_at(horizon: int) -> None:
    """decide() after every round as the runner calls it, the budget ending after `horizon` rounds: a
    true change at the zone's edges FAILs (or PASSes) at most 1 - confidence of the time."""

    def run(change: float, seed: int) -> list[str]:
        rng, out = random.Random(seed), []
        for _ in range(1500):
            changes: list[float] = []
            while True:
                changes.append(change + 0.05 * rng.choice(ROUND_SHAPES))
                status = decide(changes, TOL, CONF, 4, 27, len(changes) >= horizon).status
                if status != "CONTINUE":
                    break
            out.append(status)
        return out

    assert run(LIMIT + ZONE, seed=horizon).count("FAIL") / 1500 <= 1 - CONF + 0.015
    assert run(LIMIT - ZONE, seed=horizon + 1).count("PASS") / 1500 <= 1 - CONF + 0.015


def test_at_this_hosts_loaded_round_sd_a_three_percent_change_is_rarely_unknown() -> None:
    sd = 0.046  # the loaded round sd that left 41% of -3% changes FAIL or UNKNOWN under the v2 rule
    at_3 = _run(math.log1p(-0.03), sd, 400, seed=3)
    assert at_3.count("UNKNOWN") / 400 <= 0.05 and at_3.count("FAIL") / 400 <= 0.05
    same = _run(0.0, sd, 400, seed=4)
    assert same.count("FAIL") == 0 and same.count("UNKNOWN") / 400 <= 0.02
    assert _run(math.log1p(-0.10), sd, 200, seed=5).count("FAIL") / 200 >= 0.97


# ---------------------------------------------------------------- rare events


def test_binomial_tail_is_exact() -> None:
    assert binomial_upper_tail(0, 0) == 1.0
    assert binomial_upper_tail(3, 3) == 1 / 8
    assert binomial_upper_tail(5, 6) == pytest.approx(7 / 64)
    with pytest.raises(ValueError, match="k=-1"):
        binomial_upper_tail(-1, 3)
    assert CappedSteps(0, 5).significant and not CappedSteps(0, 4).significant  # 1/32 < 5% < 1/16
    assert CappedSteps(0, 1).lopsided and CappedSteps(1, 3).lopsided and not CappedSteps(1, 2).lopsided


def test_capped_steps_come_from_the_runners_keys_else_from_the_steps_else_none() -> None:
    steps = [0.1] * 20
    stalled = [*steps[:-1], 5.0]  # one step 50x the median: capped
    rounds = [
        {"change_log": 0.0, "base_capped_steps": 1, "candidate_capped_steps": 2},
        {"change_log": -0.1, "base_step_s": steps, "candidate_step_s": stalled},
        {"change_log": 0.0},  # an ab.json written before either
    ]
    assert capped_over(rounds) == CappedSteps(1, 3)
    uncapped = uncapped_changes(rounds)
    assert uncapped[0] == 0.0 and uncapped[2] == 0.0
    assert (
        uncapped[1]
        == pytest.approx(math.log(2.0 / 6.9))
        == round_diagnostics(steps, stalled)["uncapped_change_log"]
    )


def test_significant_stalls_on_the_candidate_forbid_a_pass_and_the_uncapped_change_can_fail() -> None:
    quiet = [0.001 * (-1) ** i for i in range(4)]
    assert decide(quiet, TOL, CONF, 4, 27).status == "PASS"
    blocked = decide(quiet, TOL, CONF, 4, 27, capped=CappedSteps(0, 6), uncapped=[-0.02, -0.4, 0.0, -0.3])
    assert blocked.status == "CONTINUE" and "stalls more" in blocked.reason
    assert (blocked.base_capped_steps, blocked.candidate_capped_steps) == (0, 6)
    assert blocked.capped_p == pytest.approx(1 / 64)
    failed = decide(quiet, TOL, CONF, 4, 27, capped=CappedSteps(0, 6), uncapped=[-0.30, -0.31, -0.29, -0.30])
    assert failed.status == "FAIL" and "stalls in full" in failed.reason
    # Lopsided, not significant: no PASS before the last look; at the last look it stands.
    assert decide(quiet, TOL, CONF, 4, 27, capped=CappedSteps(0, 1)).status == "CONTINUE"
    last = [0.001 * (-1) ** i for i in range(27)]
    assert decide(last, TOL, CONF, 4, 27, capped=CappedSteps(0, 1)).status == "PASS"
    # decide_rounds reads the same from an ab.json's rounds
    rounds = [{"change_log": c, "base_capped_steps": 0, "candidate_capped_steps": 2} for c in quiet]
    assert decide_rounds(rounds, TOL, CONF, 4, 27).status == "CONTINUE"


# ---------------------------------------------------------------- each verdict's rates; scaling


def test_verdict_rates_follow_the_rule_and_the_noise() -> None:
    quiet, loud = (
        verdict_rates(1.5, TOL, CONF, 4, 27, trials=300),
        verdict_rates(8.0, TOL, CONF, 4, 27, trials=300),
    )
    assert quiet.false_fail == 0.0 and quiet.fail_at_twice == 1.0
    assert 0.3 <= quiet.fail_at_tolerance <= 0.7  # the boundary: about a coin toss
    assert loud.fail_at_twice < quiet.fail_at_twice and loud.fail_at_tolerance < quiet.fail_at_tolerance
    assert quiet.clause().startswith("at this round sd: false FAIL 0.0%, FAIL at -5% ")
    assert verdict_rates(1.5, TOL, CONF, 4, 27, trials=300) is quiet  # cached
    with pytest.raises(ValueError, match="round_sd_pct"):
        verdict_rates(float("nan"), TOL, CONF, 4, 27)


def test_scaling_is_info_when_its_interval_straddles_the_limit() -> None:
    wide = scaling._status(-25.0, 15.0, 5.0)
    assert (wide, scaling._status(-4.0, 3.0, 5.0), scaling._status(-12.0, -6.0, 5.0)) == (
        "INFO",
        "PASS",
        "WARN",
    )
