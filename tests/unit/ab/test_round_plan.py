"""A round before it runs (ab/round_plan.py) and the capped steps it records (ab/round_figures.capped_steps):
steps per side that cover the workload's periodic event, and slots that belong to neither side."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from bg_test_workloads import sleepy
from harness import make_config

from benchgate.ab.decision import round_change
from benchgate.ab.round_figures import capped_steps
from benchgate.ab.round_plan import (
    MAX_ROUND_STEPS,
    checked_period,
    first_sequential_order,
    launch_order,
    round_length,
    sequential_order,
)
from benchgate.errors import BadInputError, WorkloadError
from benchgate.results.figures import STALL_CAP
from benchgate.workloads.contract import check_members


def config(tmp_path: Path, steps: int = 30, min_measured_s: float = 2.0) -> Any:
    return make_config(tmp_path, gate={"ab": {"steps": steps, "min_measured_s": min_measured_s}})


def test_without_a_period_the_steps_are_as_before(tmp_path: Path) -> None:
    assert round_length(config(tmp_path), None).steps == 30
    length = round_length(config(tmp_path), 0.02)
    assert (length.steps, length.period_steps, length.warning) == (100, None, None)
    assert "gate.ab.min_measured_s = 2 s" in length.why
    assert round_length(config(tmp_path), 1e-6).steps == MAX_ROUND_STEPS


@pytest.mark.parametrize(
    ("period", "step_s", "steps"),
    [
        (7, None, 35),  # 30 steps -> 5 whole periods of 7
        (30, None, 30),  # exactly one period
        (45, None, 45),  # longer than the round: one period, 1.5x, no warning
        (40, 0.02, 120),  # 100 steps for min_measured_s -> 3 periods
        (1500, 1e-6, 1500),  # 2000 steps (the cap) hold one whole period of 1500 only
        (2500, 1e-6, 2500),  # a period past the cap is covered once all the same
    ],
)
def test_a_round_covers_whole_periods(tmp_path: Path, period: int, step_s: float | None, steps: int) -> None:
    length = round_length(config(tmp_path), step_s, period)
    assert length.steps == steps and length.steps >= period and length.steps % period == 0
    assert length.period_steps == period
    assert f"period_steps = {period}" in length.why


def test_a_period_that_makes_rounds_long_is_warned_of(tmp_path: Path) -> None:
    assert round_length(config(tmp_path), None, 45).warning is None  # 1.5x
    length = round_length(config(tmp_path), 0.02, 500)  # 100 steps otherwise
    assert length.steps == 500 and length.warning is not None
    assert "period_steps = 500 makes each A/B round 500 steps per side, 5.0x the 100 steps" in length.warning
    assert "about 10 s measured per side" in length.warning
    assert length.to_dict() == {
        "steps": 500,
        "why": length.why,
        "period_steps": 500,
        "warning": length.warning,
    }


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "40"])
def test_a_bad_period_names_the_field_and_value(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(
        BadInputError, match=rf"metrics-ws1.json period_steps: got {bad!r}; expected an int > 0"
    ):
        checked_period(bad, "metrics-ws1.json period_steps")
    with pytest.raises(BadInputError, match=r"^period_steps: got"):
        round_length(config(tmp_path), None, bad)
    workload = sleepy()
    workload.period_steps = bad  # type: ignore[attr-defined]
    with pytest.raises(WorkloadError, match=r"workload member `period_steps` is .*expected an int > 0"):
        check_members(workload, "bench.workload: w")


def test_a_declared_period_passes_the_contract_check() -> None:
    workload = sleepy()
    workload.period_steps = 40  # type: ignore[attr-defined]
    check_members(workload, "bench.workload: w")


def test_the_launch_order_is_seeded_and_balanced() -> None:
    seeds = range(1, 2001)
    orders = [launch_order(seed) for seed in seeds]
    assert orders == [launch_order(seed) for seed in seeds]  # a seed gives its order again
    assert set(orders) == {"AB", "BA"}
    share = orders.count("AB") / len(orders)
    assert 0.46 < share < 0.54, share  # 4.5 standard errors of a fair coin over 2000 rounds
    # Not the turn coordinator's first pair: that is drawn from random.Random(seed) (measure/turns.py).
    first_pairs = ["AB" if random.Random(seed).random() < 0.5 else "BA" for seed in seeds]
    agree = sum(o == p for o, p in zip(orders, first_pairs, strict=True)) / len(orders)
    assert 0.46 < agree < 0.54, agree


def test_sequential_rounds_alternate_from_a_seeded_first() -> None:
    assert "".join(sequential_order(i) for i in range(1, 5)) == "ABBAABBA"
    assert "".join(sequential_order(i, "BA") for i in range(1, 5)) == "BAABBAAB"
    firsts = {first_sequential_order(seed) for seed in range(40)}
    assert firsts == {"AB", "BA"}  # neither side always first
    # A resume goes on from its first round's order, whatever the seed.
    assert first_sequential_order(7, [{"first_side": "B"}]) == "BA"
    assert first_sequential_order(7, [{"first_side": "A"}]) == "AB"
    with pytest.raises(BadInputError, match="sequential order: got 'AA'"):
        sequential_order(1, "AA")


def test_capped_steps_count_what_round_change_caps() -> None:
    base = [0.010] * 20
    candidate = [0.010] * 20
    candidate[5] = 0.5  # a planted stall, 50x the median
    candidate[9] = 0.099  # under the cap (10x the median step): not counted
    base[3] = 0.2
    assert capped_steps(base, candidate) == {"base_capped_steps": 1, "candidate_capped_steps": 1}
    assert STALL_CAP * 0.010 < 0.2
    # round_change caps exactly these: the stalls count as the cap, nothing more.
    cap = STALL_CAP * 0.010
    uncapped = [min(t, cap) for t in candidate]
    assert round_change(base, candidate) == pytest.approx(round_change([min(t, cap) for t in base], uncapped))
    assert capped_steps([0.01] * 5, [0.01] * 5) == {"base_capped_steps": 0, "candidate_capped_steps": 0}
