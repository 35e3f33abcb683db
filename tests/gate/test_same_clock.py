"""The bench and the A/B time steps the same way (measure/steps.py): windows of bench.sync_every steps
(a device synchronise at each window's end on CUDA), a window being one turn of an A/B. A change that
only adds host-side work, here a slower batch, must move the bench's tokens/s and the A/B's estimate
alike. Real torchrun launches on CPU with windows of 3 steps; on CUDA the same code adds the sync."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from harness import make_config

from benchgate.ab.runner import Side, run_ab
from benchgate.kit.files import read_json
from benchgate.measure.launch import stage_bench

pytestmark = [pytest.mark.slow, pytest.mark.serial]

HOST_WORK = """
import time

from bg_test_workloads import Sleepy


class HostSide(Sleepy):
    name = "host-side"

    def make_batch(self, generator, device):
        time.sleep({host_ms} / 1000)  # host-side work only: a slower batch, nothing on the device
        return super().make_batch(generator, device)


def make_workload():
    return HostSide(step_ms=20.0)
"""


def side(tmp_path: Path, name: str, host_ms: float) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "hostwork.py").write_text(HOST_WORK.format(host_ms=host_ms), encoding="utf-8")
    return directory


def test_a_host_side_slowdown_moves_bench_and_ab_alike(tmp_path: Path) -> None:
    base, candidate = side(tmp_path, "base", 0.0), side(tmp_path, "candidate", 6.0)
    config = make_config(
        tmp_path,
        bench={"workload": "hostwork:make_workload", "steps": 12, "warmup": 2, "sync_every": 3},
        gate={"ab": {"steps": 12, "warmup": 3, "min_measured_s": 0.0, "min_rounds": 3, "max_rounds": 3}},
    )
    rates = {}
    for name, code in (("base", base), ("candidate", candidate)):
        metrics = read_json(stage_bench(config, 1, tmp_path / f"bench-{name}", source_paths=(code,)))
        assert metrics["sync_every"] == 3
        rates[name] = metrics["tokens_per_s"]["p50"]
    bench_change = 100 * (rates["candidate"] / rates["base"] - 1)
    outcome = run_ab(
        config, 1, tmp_path / "ab", Side("base", None, (base,)), Side("candidate", None, (candidate,))
    )
    ab_change = 100 * math.expm1(statistics.fmean(r["change_log"] for r in outcome.rounds))
    # 6 ms more per ~20 ms step: about -23% by either clock.
    assert -32 < bench_change < -14 and -32 < ab_change < -14, (bench_change, ab_change)
    assert abs(ab_change - bench_change) < 5, (bench_change, ab_change)
    assert all(r["pairs"] == 12 for r in outcome.rounds)
