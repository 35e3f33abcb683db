"""The loss rows (checks/loss.py), the HAC intervals under them (kit/stats.py) and the bench's record of a
diverged run (measure/divergence.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchgate.checks.loss import (
    ab_loss_row,
    apply_ab_loss,
    diverged,
    loss_checks,
    loss_slope_check,
    round_losses,
)
from benchgate.config import Tolerances
from benchgate.errors import BaselineError
from benchgate.kit import hac, stats
from benchgate.measure.divergence import finite_measured_steps, first_non_finite
from benchgate.results.comparison import TIMING, Check, Comparison
from benchgate.workloads.parallel import process_group
from benchgate.workloads.training import build_trainer

TOL = Tolerances()


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    out = np.empty(n)
    out[0] = rng.standard_normal() / math.sqrt(1 - phi * phi)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + rng.standard_normal()
    return out


# --- the HAC intervals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("phi", [0.5, 0.8])
def test_hac_slope_keeps_its_level_on_flat_ar1_losses_where_the_iid_interval_does_not(phi: float) -> None:
    rng = np.random.default_rng(7)
    series = [ar1(rng, 60, phi) for _ in range(400)]
    iid = np.mean([stats.linear_slope(y).ci_low > 0 for y in series])
    rising = np.mean([hac.hac_slope(y).ci_low > 0 for y in series])
    # One-sided, nominally 2.5%: the i.i.d. interval calls a flat loss rising in 13% (0.5) to 26% (0.8).
    assert iid > 0.09, iid
    assert rising < 0.06, rising


def test_hac_slope_estimates_the_autocorrelation_and_widens_by_it() -> None:
    rng = np.random.default_rng(3)
    y = 0.02 * np.arange(200) + ar1(rng, 200, 0.8)
    fit, iid = hac.hac_slope(y), stats.linear_slope(y)
    assert fit.slope == pytest.approx(iid.slope)
    assert 0.6 < fit.rho < 0.95
    assert fit.stderr == pytest.approx(iid.stderr * math.sqrt((1 + fit.rho) / (1 - fit.rho)))
    assert fit.df < 200 / 4  # effective degrees of freedom: far fewer than 198
    assert fit.ci_low < 0.02 < fit.ci_high


def test_hac_slope_of_an_exact_line_has_no_error() -> None:
    fit = hac.hac_slope([0.5 * i + 1.0 for i in range(10)])
    assert (fit.slope, fit.stderr, fit.rho, fit.ci_low, fit.ci_high) == (0.5, 0.0, 0.0, 0.5, 0.5)


def test_hac_mean_of_white_noise_is_the_iid_interval_and_refuses_two_points() -> None:
    values = [1.0, 2.0, 1.0, 2.0, 1.0, 2.0]  # anti-correlated: rho clipped to 0, never narrower
    paired = hac.hac_mean(values)
    assert paired.mean == 1.5 and paired.rho == 0.0
    assert paired.stderr == pytest.approx(np.std(values, ddof=1) / math.sqrt(6))
    with pytest.raises(ValueError, match="at least 3 points, got 2"):
        hac.hac_mean([1.0, 2.0])


# --- a run that diverged -----------------------------------------------------------------------------------


def test_the_first_non_finite_loss_is_recorded_with_its_step_rank_and_value() -> None:
    inf, nan = float("inf"), float("nan")
    # warmup 2: steps 1-2 warmup, 3.. measured; rank 1 goes to inf at step 4, every rank nan after.
    per_rank = [[3.0, 2.9, 2.8, 2.7, nan, nan], [3.1, 3.0, 2.9, inf, nan, nan]]
    record = first_non_finite(per_rank, warmup=2)
    assert record == {"step": 4, "phase": "measured", "rank": 1, "value": "inf"}
    assert finite_measured_steps(record, warmup=2, measured=4) == 1
    assert first_non_finite([[nan, 1.0]], warmup=1) == {
        "step": 1,
        "phase": "warmup",
        "rank": 0,
        "value": "nan",
    }
    assert finite_measured_steps({"step": 1}, warmup=1, measured=1) == 0
    assert first_non_finite([[1.0, 2.0]], warmup=0) is None
    assert finite_measured_steps(None, warmup=0, measured=2) == 2


def metrics(losses: list[float], diverged_at: dict[str, object] | None = None, warmup: int = 10) -> dict:
    """The parts of a metrics-ws<N>.json the loss rows read, as the bench writes them."""
    return {"warmup": warmup, "samples": {"loss": losses}, "diverged": diverged_at}


FALLING = [3.0 - 0.01 * i + 0.02 * math.sin(i) for i in range(60)]
AT_13 = {"step": 13, "phase": "measured", "rank": 1, "value": "inf"}


def test_a_run_that_diverged_where_the_baseline_trains_fails_naming_the_step() -> None:
    [row] = loss_checks(1, metrics(FALLING[:2], AT_13), metrics(FALLING), TOL)
    assert (row.name, row.status, row.current) == ("loss (ws=1)", "FAIL", 13.0)
    assert row.note.startswith("loss diverged at step 13 (inf) (rank 1, measured steps)")
    assert row.note.endswith("the baseline trains")
    [alone] = loss_checks(1, metrics([], AT_13), None, TOL)
    assert alone.status == "FAIL" and alone.note.endswith("no baseline at ws=1")


def test_a_run_that_diverged_as_its_baseline_did_is_no_regression_of_this_commit() -> None:
    base = metrics(FALLING[:1], {"step": 12, "phase": "measured", "rank": 0, "value": "nan"})
    [row] = loss_checks(2, metrics(FALLING[:2], AT_13), base, TOL)
    assert row.status == "WARN"
    assert "the baseline diverged as well (at step 12 (nan)): not a regression of this commit" in row.note


def test_a_run_that_trains_where_the_baseline_diverged_is_judged_by_its_own_slope() -> None:
    base = metrics(FALLING[:1], AT_13)
    [row] = loss_checks(1, metrics(FALLING), base, TOL)
    assert row.name == "loss slope (ws=1)" and row.status == "PASS" and row.baseline is None
    assert "the baseline diverged at step 13 (inf); this run trains" in row.note


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"step": 0, "phase": "measured", "rank": 0, "value": "inf"}, "diverged.step: got 0"),
        ({"step": 3, "phase": "measured", "rank": True, "value": "inf"}, "diverged.rank: got True"),
        ({"step": 3, "phase": "later", "rank": 0, "value": "inf"}, "diverged.phase: got 'later'"),
        ({"step": 3, "phase": "measured", "rank": 0, "value": 1e9}, "diverged.value: got 1000000000.0"),
        ("step 3", "diverged: got 'step 3'"),
    ],
)
def test_a_hand_edited_divergence_record_is_refused_naming_the_field(record: object, message: str) -> None:
    with pytest.raises(BaselineError, match="^metrics-ws1.json: " + message.replace("(", r"\(")):
        loss_checks(1, {"samples": {"loss": []}, "diverged": record}, None, TOL)
    assert diverged({"samples": {}}) is None  # files written before the record: the run trained


# --- the slope against the baseline's ---------------------------------------------------------------------


def train(workload_name: str, steps: int = 60, warmup: int = 10, **args: float) -> list[float]:
    """The losses of `steps` real training steps of a test workload after `warmup`, in this process."""
    import bg_test_workloads

    workload = getattr(bg_test_workloads, workload_name)(**args)
    device = torch.device("cpu")
    with process_group(device):
        trainer = build_trainer(workload, device, "fp32", seed=0)
        losses = [float(trainer.step()) for _ in range(warmup + steps)]
    return losses[warmup:]


def test_a_commit_whose_gradient_is_scaled_by_0_3_fails_against_the_baselines_slope() -> None:
    base = train("sleepy", step_ms=0.0)
    slow = train("slow_learner", scale=0.3, step_ms=0.0)
    row = loss_slope_check(1, metrics(slow), metrics(base), TOL)
    # Its loss still falls, so the no-baseline rule (a rising loss) passes it: only the comparison catches it.
    assert loss_slope_check(1, metrics(slow), None, TOL).status == "PASS"
    assert row.status == "FAIL", row.note
    assert "more slowly than the baseline's" in row.note and "paired step by step" in row.note
    assert row.note.split("; ")[0].endswith("learns more slowly")
    # The same code again (the same seed and batches): the same losses, no difference.
    again = loss_slope_check(1, metrics(train("sleepy", step_ms=0.0)), metrics(base), TOL)
    assert again.status == "PASS" and "falls +0% [+0, +0]% more slowly" in again.note


def test_a_model_further_along_is_not_a_slower_learner() -> None:
    # Gradients x12: it has converged before the window, so its slope is flatter than the baseline's by
    # far more than the tolerance, from a much lower loss (a better model, as a wider head is).
    base = train("sleepy", step_ms=0.0)
    fast = train("slow_learner", scale=12.0, step_ms=0.0)
    row = loss_slope_check(1, metrics(fast), metrics(base), TOL)
    assert row.status == "PASS", row.note
    assert "more slowly than the baseline's" in row.note and "further along, not slower" in row.note


def test_a_flat_baseline_compares_no_speeds() -> None:
    flat = [1.0 + 0.1 * math.sin(i) for i in range(60)]
    row = loss_slope_check(1, metrics(FALLING), metrics(flat), TOL)
    assert row.status == "PASS" and "its speed is not compared" in row.note


# --- the A/B's two sides ------------------------------------------------------------------------------------


def round_of(base: list[float], candidate: list[float], cand_diverged: dict | None = None) -> dict:
    """An A/B round's loss fields, as runner.run_round records them from the sides' metrics files."""
    return round_losses(metrics(base), metrics(candidate, cand_diverged))


def outcome(rounds: list[dict]) -> dict:
    return {"world_size": 1, "rounds": rounds}


def test_the_same_losses_on_both_sides_are_numerics_unchanged() -> None:
    nudged = [v * (1 + 3e-7) for v in FALLING]  # float32 rounding of a reordered sum
    row, words = ab_loss_row(outcome([round_of(FALLING, FALLING), round_of(FALLING, nudged)]), TOL)
    assert (row.name, row.status, words) == ("loss A/B (ws=1)", "PASS", "numerics unchanged")
    assert row.note.startswith("numerics unchanged: the candidate's loss equals the base's at every step")


def test_a_candidate_whose_loss_is_higher_beyond_tolerance_fails_by_the_paired_test() -> None:
    rng = np.random.default_rng(0)
    worse = [v * 1.03 + 0.003 * e for v, e in zip(FALLING, ar1(rng, 60, 0.8), strict=True)]
    row, words = ab_loss_row(outcome([round_of(FALLING, worse)] * 3), TOL)
    assert row.status == "FAIL" and row.change == pytest.approx(3.0, abs=0.3)
    assert row.ci_low is not None and row.ci_low > TOL.loss_increase_pct
    assert words.startswith("numerics changed (loss +3.")
    slightly = [v * 1.002 for v in FALLING]  # within loss_increase_pct: changed numerics, not worse
    row, _ = ab_loss_row(outcome([round_of(FALLING, slightly)]), TOL)
    assert row.status == "PASS" and row.note.startswith("numerics changed: the candidate's loss +0.20%")


def test_a_candidate_that_diverges_in_the_ab_fails_and_its_timing_row_says_so() -> None:
    rounds = [round_of(FALLING, FALLING[:2], AT_13), round_of(FALLING, FALLING[:2], AT_13)]
    timing = Check("tokens/s (ws=1)", "tok/s", 100.0, note="A/B vs base abc", metric=TIMING, world_size=1)
    timing = Check(**{**timing.__dict__, "decided_by": "ab"})
    comparison = apply_ab_loss(Comparison("p", "w", None, checks=[timing]), outcome(rounds), TOL)
    row = comparison.checks[-1]
    assert (row.name, row.status) == ("loss A/B (ws=1)", "FAIL")
    assert row.note.startswith("loss diverged at step 13 (inf) in 2 of 2 A/B rounds (rank 1")
    assert row.note.endswith("the base trains")
    assert comparison.checks[0].note == "A/B vs base abc; loss diverged at step 13 (inf)"
    # A resumed A/B applies it again: one row, the timing note rebuilt by apply_ab before it.
    again = apply_ab_loss(Comparison("p", "w", None, checks=[timing, row]), outcome(rounds), TOL)
    assert [c.name for c in again.checks] == ["tokens/s (ws=1)", "loss A/B (ws=1)"]


def test_rounds_saved_before_losses_were_recorded_add_no_row() -> None:
    comparison = Comparison("p", "w", None)
    assert apply_ab_loss(comparison, outcome([{"change_log": 0.0}]), TOL) is comparison
