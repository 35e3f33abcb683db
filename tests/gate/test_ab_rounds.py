"""An A/B's rounds with real torchrun launches on this CPU: the side launched first is drawn per round and
recorded, every round covers the workload's periodic event in whole periods, and the steps beyond the
stall cap are counted per side.

The workload stalls every PERIOD-th step (a planted stall, 40x a step: a checkpoint's or an eval's
cost) and declares it as `period_steps`. Its bench states the period in metrics-ws1.json, from which
`run_ab` reads it; gate.ab.steps = 12 would hold one stall in some rounds and two in others, so each
round measures 16 steps, two whole periods, and each side's two stalls are its capped steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import make_config

from benchgate.ab.round_plan import launch_order
from benchgate.ab.runner import AB_FILE, Side, run_ab
from benchgate.kit.files import read_json
from benchgate.measure.launch import stage_bench

pytestmark = [pytest.mark.slow, pytest.mark.serial]

PERIOD = 8
PERIODIC = """
import time

from bg_test_workloads import Sleepy


class Periodic(Sleepy):
    name = "periodic"
    period_steps = {period}

    def forward(self, model, batch):
        if self.steps % {period} == {period} - 1:  # the workload's own count, warmup included
            time.sleep(0.2)  # the periodic event: 40x a step, beyond the stall cap
        return super().forward(model, batch)


def make_workload():
    return Periodic(step_ms=5.0)
"""


def test_rounds_draw_the_first_launch_cover_the_period_and_count_stalls(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "periodic.py").write_text(PERIODIC.format(period=PERIOD), encoding="utf-8")
    config = make_config(
        tmp_path,
        bench={"workload": "periodic:make_workload", "steps": 8, "warmup": 1, "seed": 0},
        gate={"ab": {"steps": 12, "warmup": 3, "min_measured_s": 0.0, "min_rounds": 3, "max_rounds": 3}},
    )
    # Rounds 1-3 draw their first launch from seeds 1-3: the candidate first, then the base.
    assert [launch_order(config.bench.seed + i) for i in (1, 2, 3)] == ["BA", "BA", "AB"]
    out = tmp_path / "run"
    bench = read_json(stage_bench(config, 1, out, source_paths=(code,)))
    assert bench["period_steps"] == PERIOD  # the bench states the workload's period for the A/B

    side = Side("same code", None, (code,))
    outcome = run_ab(config, 1, out, side, side)
    ab = read_json(out / "ab" / "ws1" / AB_FILE)
    assert ab["round_length"]["steps"] == 2 * PERIOD and ab["round_length"]["period_steps"] == PERIOD
    assert "2 periods of the workload's period_steps = 8 (for gate.ab.steps: 12)" in ab["round_length"]["why"]
    assert ab["round_length"]["warning"] is None  # 16 steps for 12: not long
    rounds = ab["rounds"]
    assert len(rounds) == len(outcome.rounds) == 3
    assert [r["base_launched_first"] for r in rounds] == [False, False, True]
    for r in rounds:
        assert r["pairs"] == 2 * PERIOD
        # Pairs of turns still draw their own order; an interleaved round records how many the base led.
        assert isinstance(r["base_first"], int) and 0 <= r["base_first"] <= r["pairs"]
        # Whole periods: exactly two stalls per side, each far beyond 10x the median step.
        assert r["base_capped_steps"] == r["candidate_capped_steps"] == 2, r
        base_steps = sorted(r["base_step_s"])
        assert base_steps[-2] > 0.15 and base_steps[-3] < 0.05
