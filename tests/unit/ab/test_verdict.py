"""The timing decisions: the paired sequential A/B rule and the stored-baseline screen, as tables."""

from __future__ import annotations

import math
import random

import pytest

from benchgate.ab.decision import decide, look_rounds, round_change
from benchgate.ab.levels import bound_at, look_bounds, spent
from benchgate.checks.screen import MIN_HISTORY, screen
from benchgate.results.figures import STALL_CAP

TOL, CONF, MIN_ROUNDS, MAX_ROUNDS = 5.0, 0.95, 4, 12


def rounds(change_pct: float, sd_pct: float, n: int, seed: int = 0) -> list[float]:
    """n round figures (log throughput ratios) around a true change, with a given round-to-round sd."""
    rng = random.Random(seed)
    return [math.log1p(change_pct / 100) + rng.gauss(0, sd_pct / 100) for _ in range(n)]


@pytest.mark.parametrize(
    ("changes", "status"),
    [
        pytest.param(rounds(-20, 1, 4), "FAIL", id="20pct-slower-decided-at-the-first-look"),
        pytest.param(rounds(0, 0.5, 4), "PASS", id="same-code-quiet-passes"),
        pytest.param(rounds(-2, 0.5, 4), "PASS", id="2pct-within-tolerance"),
        pytest.param(rounds(+8, 1, 4), "PASS", id="faster-passes"),
        pytest.param(rounds(-5, 1, 4), "CONTINUE", id="at-the-tolerance-needs-more-rounds"),
        pytest.param(rounds(-20, 1, 5), "CONTINUE", id="no-look-at-round-5"),
        # At the last look, inside the indifference zone around the tolerance: decided by the estimate
        # (these rounds' mean is -5.26%), never left UNKNOWN.
        pytest.param(
            rounds(-5, 1, MAX_ROUNDS), "FAIL", id="at-the-tolerance-by-the-estimate-at-the-last-look"
        ),
        pytest.param(rounds(0, 5, 3), "CONTINUE", id="too-few-rounds-to-look"),
    ],
)
def test_ab_decision_table(changes: list[float], status: str) -> None:
    assert decide(changes, TOL, CONF, MIN_ROUNDS, MAX_ROUNDS).status == status


def test_ab_recorded_rounds_of_a_real_slowdown_fail() -> None:
    # Round figures of a real A/B run on this project's CI-class host: 10 of 100 layers added.
    recorded = [-0.12708, -0.11339, -0.10512, -0.12054]
    decision = decide(recorded, TOL, CONF, MIN_ROUNDS, MAX_ROUNDS)
    assert decision.status == "FAIL"
    assert decision.change_pct == pytest.approx(100 * math.expm1(sum(recorded) / 4))
    assert decision.ci_high_pct is not None and decision.ci_high_pct < -TOL


def test_the_end_of_the_time_budget_is_a_last_look_and_unknown_only_where_it_cannot_decide() -> None:
    # Out of time between planned looks (round 5), the rounds take a last look spending what looks 4 left:
    # a clear slowdown FAILs instead of waiting for a resume.
    between = decide(rounds(-20, 1, 5), TOL, CONF, MIN_ROUNDS, MAX_ROUNDS, out_of_time=True)
    assert between.status == "FAIL" and "time budget's last look" in between.reason
    # Near the tolerance, the interval within the indifference zone: decided by the estimate, as at the
    # last planned look.
    near = decide(rounds(-4, 0.5, 7, seed=2), TOL, CONF, MIN_ROUNDS, MAX_ROUNDS, out_of_time=True)
    assert near.status == "PASS" and "last look" in near.reason and "gate.ab.max_seconds" in near.reason
    # Too noisy for the zone: UNKNOWN, naming the time budget (resumable).
    noisy = decide(rounds(-5, 6, 6), TOL, CONF, MIN_ROUNDS, MAX_ROUNDS, out_of_time=True)
    assert noisy.status == "UNKNOWN" and "time budget" in noisy.reason
    # Fewer rounds than the first look needs: UNKNOWN, naming gate.ab.min_rounds.
    short = decide(rounds(-20, 1, 3), TOL, CONF, MIN_ROUNDS, MAX_ROUNDS, out_of_time=True)
    assert short.status == "UNKNOWN" and "gate.ab.min_rounds" in short.reason


def test_ab_reports_the_interval_and_minimum_detectable_effect() -> None:
    decision = decide(rounds(0, 1, 6), TOL, CONF, MIN_ROUNDS, MAX_ROUNDS)
    look = bound_at(CONF, MIN_ROUNDS, MAX_ROUNDS, 6)
    assert look is not None and decision.ci_level == pytest.approx(look.level())
    assert decision.ci_low_pct is not None and decision.ci_high_pct is not None
    assert decision.ci_low_pct < decision.change_pct < decision.ci_high_pct  # type: ignore[operator]
    # Beyond the tolerance by the interval's half-width and the 80%-power margin.
    assert decision.mde_pct is not None and decision.mde_pct > TOL
    assert decision.round_sd_pct == pytest.approx(1.0, abs=0.6)
    noisier = decide(rounds(0, 3, 6, seed=1), TOL, CONF, MIN_ROUNDS, MAX_ROUNDS)
    assert noisier.mde_pct is not None and noisier.mde_pct > decision.mde_pct


def test_ab_looks_are_sparse_and_alpha_is_spent_over_them() -> None:
    assert look_rounds(4, 12) == [4, 6, 9, 12]
    assert look_rounds(4, 27) == [4, 6, 9, 14, 21, 27]
    assert look_rounds(3, 5) == [3, 5]
    assert look_rounds(4, 4) == [4]
    # One error budget spent over the rounds: each look spends more, never all of it, and a look's bound
    # does not depend on max_rounds (a resume with more rounds keeps the earlier looks' bounds).
    bounds = look_bounds(0.95, 4, 27)
    assert [b.spent for b in bounds] == sorted(b.spent for b in bounds)
    assert bounds[-1].spent < 0.05 and bounds[-1].spent == pytest.approx(spent(27, 0.05, 4))
    first_of_12, first_of_27 = bound_at(0.95, 4, 12, 4), bound_at(0.95, 4, 27, 4)
    assert first_of_12 is not None and first_of_27 is not None
    assert first_of_12.fail_t == pytest.approx(first_of_27.fail_t)
    # Each look is stricter than a single 95% look would be: the budget is shared.
    assert all(b.level() > 0.90 for b in bounds)


def test_round_change_is_the_log_ratio_of_total_times() -> None:
    base = [0.100, 0.101, 0.300, 0.100]  # a slow base step counts in full (below the stall cap)
    cand = [0.110, 0.111, 0.110, 0.110]
    assert round_change(base, cand) == pytest.approx(math.log(sum(base) / sum(cand)), rel=1e-12)
    assert round_change(base, cand) > 0  # the candidate's total time is shorter: it is faster
    # A stall beyond STALL_CAP x the pooled median counts as that cap, no more.
    stalled = [0.1, 0.1, 0.1, 0.1 * 50]
    capped = [0.1, 0.1, 0.1, 0.1 * STALL_CAP]
    assert round_change([0.1] * 4, stalled) == pytest.approx(math.log(0.4 / sum(capped)))
    with pytest.raises(ValueError, match="as many base as candidate steps"):
        round_change([0.1], [0.1, 0.2])
    with pytest.raises(ValueError, match="as many base as candidate steps"):
        round_change([], [])


def samples(step_s: float, n: int = 40, reference_s: float | None = None) -> dict[str, list[float]]:
    steps = [step_s * (1 + 0.001 * ((i * 7) % 5 - 2)) for i in range(n)]
    out = {"step_time_s": steps}
    if reference_s is not None:
        out["reference_s"] = [reference_s] * n
    return out


def history(*step_s: float) -> list[dict[str, float]]:
    """Earlier runs' figures as baseline._run_p50s records them (the screen reads the mean)."""
    return [{"step_time_s": s, "mean_step_time_s": s} for s in step_s]


@pytest.mark.parametrize(
    ("current_s", "past", "status"),
    [
        pytest.param(0.10, history(0.099, 0.1, 0.101), "PASS", id="same-quiet-history"),
        pytest.param(0.125, history(0.099, 0.1, 0.101), "FAIL", id="20pct-slower-quiet-history"),
        pytest.param(0.105, history(0.099, 0.1, 0.101), "UNKNOWN", id="5pct-at-the-edge"),
        pytest.param(0.14, history(0.096, 0.1, 0.104), "FAIL", id="40pct-not-excused-by-4pct-noise"),
        pytest.param(0.14, history(0.08, 0.1, 0.12), "UNKNOWN", id="40pct-20pct-noise-unknown-never-pass"),
        pytest.param(0.11, history(0.08, 0.1, 0.12), "UNKNOWN", id="10pct-noisy-history-unknown-not-pass"),
        pytest.param(0.10, history(0.1, 0.1)[: MIN_HISTORY - 1], "UNKNOWN", id="noise-unknown"),
    ],
)
def test_screen_decision_table(current_s: float, past: list[dict[str, float]], status: str) -> None:
    assert screen(samples(0.1), samples(current_s), past, TOL, CONF).status == status


def test_screen_uses_drift_corrected_figures_when_both_runs_timed_the_reference() -> None:
    past = [
        {"mean_step_time_s": s, "mean_step_time_per_reference": 10.0 + d}
        for s, d in ((0.08, 0.1), (0.1, 0), (0.12, -0.1))
    ]
    # The host slowed by 20% and the steps with it: the code did not change. The drift-corrected
    # figure decides and PASSes, but the raw one (20% noise) cannot: a PASS needs both.
    result = screen(samples(0.1, reference_s=0.01), samples(0.12, reference_s=0.012), past, TOL, CONF)
    assert result.figure == "drift-corrected mean"
    assert result.status == "UNKNOWN"
    assert "a PASS needs both" in result.reason and "UNKNOWN" in result.reason
    assert result.change_pct == pytest.approx(0.0, abs=0.01)
    assert result.host_change_pct == pytest.approx(20.0)
    assert result.noise_pct == pytest.approx(100 * 0.01, rel=0.05)
    # With a quiet raw history, the same host at the same speed PASSes on both figures.
    quiet = [{"mean_step_time_s": 0.1 * f, "mean_step_time_per_reference": 10 * f} for f in (0.99, 1, 1.01)]
    same = screen(samples(0.1, reference_s=0.01), samples(0.1, reference_s=0.01), quiet, TOL, CONF)
    assert (same.figure, same.status) == ("drift-corrected mean", "PASS")


def test_screen_reads_the_mean_figures_not_the_p50s_of_older_history() -> None:
    # History recorded before the mean figures existed gives no noise for the mean: UNKNOWN.
    past = [{"step_time_s": s, "step_time_per_reference": 10 * s} for s in (0.099, 0.1, 0.101)]
    result = screen(samples(0.1, reference_s=0.01), samples(0.1, reference_s=0.01), past, TOL, CONF)
    assert (result.status, result.figure, result.history_runs) == ("UNKNOWN", "mean", 0)


def test_screen_interval_too_wide_for_floats_is_unknown_not_an_overflow() -> None:
    # Very noisy history (six orders of magnitude) at a high confidence: the bound e^(d + half) leaves
    # float range. The interval is then infinitely wide, which the rule reads as UNKNOWN.
    steady = {"step_time_s": [1.0, 1.0]}
    result = screen(steady, steady, history(1e-6, 1.0, 1e6), 5.0, 0.9999)
    assert result.status == "UNKNOWN"
    assert result.change_pct == 0.0
    assert result.ci_low_pct == pytest.approx(-100.0)
    assert result.ci_high_pct == math.inf


def test_screen_ratio_beyond_float_range_is_still_judged() -> None:
    # 1e-300 s against 1e300 s: the quotient underflows to 0, its log would be a math domain error.
    tiny, huge = {"step_time_s": [1e-300] * 2}, {"step_time_s": [1e300] * 2}
    unknown = screen(tiny, huge, [], 5.0, 0.95)
    assert (unknown.status, unknown.change_pct) == ("UNKNOWN", pytest.approx(-100.0))
    # With quiet history the same huge slowdown is a FAIL, and the huge speedup a PASS (+inf %).
    slower = screen(tiny, huge, history(0.099, 0.1, 0.101), 5.0, 0.95)
    assert (slower.status, slower.ci_high_pct) == ("FAIL", pytest.approx(-100.0))
    faster = screen(huge, tiny, history(0.099, 0.1, 0.101), 5.0, 0.95)
    assert (faster.status, faster.change_pct, faster.ci_low_pct) == ("PASS", math.inf, math.inf)
