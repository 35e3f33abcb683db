"""Real torchrun, 2 CPU ranks over gloo: the metrics it writes and the ways a run fails."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchgate.errors import BadInputError, ConfigError, RunFailedError
from benchgate.kit.files import read_json
from benchgate.measure.launch import stage_bench

pytestmark = pytest.mark.slow


def test_bench_ws2_writes_per_step_samples_from_both_ranks(config_factory, tmp_path: Path) -> None:
    config = config_factory(bench={"steps": 10, "warmup": 2})
    progress: list[tuple[int, int]] = []
    path = stage_bench(config, 2, tmp_path / "out", lambda done, total: progress.append((done, total)))
    metrics = read_json(path)
    assert metrics["world_size"] == 2
    assert metrics["backend"] == "gloo"
    assert metrics["threads_per_rank"] == 1
    assert len(metrics["samples"]["step_time_s"]) == 10
    assert [len(r) for r in metrics["samples"]["step_time_s_per_rank"]] == [10, 10]
    # The global step time is the slower rank's, step by step.
    per_rank = metrics["samples"]["step_time_s_per_rank"]
    assert metrics["samples"]["step_time_s"] == [max(a, b) for a, b in zip(*per_rank, strict=True)]
    # sleepy sleeps 20 ms per step: the timing must see it, and not much more.
    assert 0.020 <= metrics["step_time_s"]["p50"] < 0.5
    assert metrics["tokens_per_step_global"] == 2 * 64
    assert metrics["tokens_per_s"]["p50"] == pytest.approx(128 / metrics["step_time_s"]["p50"], rel=0.05)
    assert len(metrics["memory"]["max_rss_bytes_per_rank"]) == 2
    # No MFU on CPU (fp32: the table holds bf16 peaks), and the note says why.
    assert metrics["mfu"]["dense_6n"] is None and "no peak for dtype 'fp32'" in metrics["mfu"]["note"]
    assert metrics["loss_slope"]["slope"] < 0
    # The drift reference is timed after every measured CPU step, outside the timed region.
    assert len(metrics["samples"]["reference_s"]) == 10
    assert all(r > 0 for r in metrics["samples"]["reference_s"])
    assert progress[-1] == (10, 10)


def test_bench_rank_that_raises_fails_with_exit_3_naming_the_rank(config_factory, tmp_path: Path) -> None:
    config = config_factory(bench={"workload": "bg_test_workloads:failing", "workload_args": {"rank": 1}})
    with pytest.raises(RunFailedError) as info:
        stage_bench(config, 2, tmp_path / "out")
    assert info.value.exit_code == 3
    assert "rank 1 failed: RuntimeError: injected failure at step 3" in str(info.value)
    assert not (tmp_path / "out" / "metrics-ws2.json").exists()


@pytest.mark.serial
def test_bench_rank_that_hangs_fails_within_the_collective_timeout(config_factory, tmp_path: Path) -> None:
    config = config_factory(
        bench={"workload": "bg_test_workloads:hanging", "workload_args": {"rank": 1}, "timeout_s": 5}
    )
    started = time.monotonic()
    with pytest.raises(RunFailedError) as info:
        stage_bench(config, 2, tmp_path / "out")
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert "rank 0 failed" in message
    assert "rank(s) 1 reported no error: probably hung" in message
    # 5 s timeout + torchrun start and teardown; far below the 30 min default that would otherwise apply.
    assert elapsed < 60, elapsed


def test_bench_loss_that_diverges_is_recorded_and_compare_fails_naming_the_step(
    config_factory, tmp_path: Path
) -> None:
    # Rank 1's loss goes to inf at step 13 (warmup 2: the 11th measured step), where the baseline trains.
    bench = {"steps": 20, "warmup": 2, "world_sizes": [1, 2]}
    runs = {}
    for name, workload, args in (
        ("base", "sleepy", {"step_ms": 1.0}),
        ("cur", "diverging", {"at_step": 13, "rank": 1}),
    ):
        config = config_factory(
            bench={**bench, "workload": f"bg_test_workloads:{workload}", "workload_args": args}
        )
        runs[name] = read_json(stage_bench(config, 2, tmp_path / name))  # exit 0: a diverged run is measured
        (tmp_path / name / "env.json").write_text(
            json.dumps({"machine_profile": runs[name]["machine_profile"]})
        )
    metrics = runs["cur"]
    assert metrics["diverged"] == {"step": 13, "phase": "measured", "rank": 1, "value": "inf"}
    assert runs["base"]["diverged"] is None
    # Every step is still timed; only the losses before the divergence are kept.
    assert len(metrics["samples"]["step_time_s"]) == 20 and len(metrics["samples"]["loss"]) == 10
    assert metrics["loss_slope"]["slope"] < 0
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchgate",
            "compare",
            str(tmp_path / "cur"),
            "--baseline",
            str(tmp_path / "base"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "loss diverged at step 13 (inf)" in result.stdout and "the baseline trains" in result.stdout


def test_bench_workload_error_in_a_rank_is_bad_input(config_factory, tmp_path: Path) -> None:
    config = config_factory(bench={"workload": "bg_test_workloads:raising_factory"})
    with pytest.raises(BadInputError, match="the factory is broken") as info:
        stage_bench(config, 1, tmp_path / "out")
    assert info.value.exit_code == 2


@pytest.mark.serial
def test_bench_world_size_beyond_the_cores_is_refused_before_launch(config_factory, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"bench.world_sizes: got 64, but this machine has only \d+"):
        stage_bench(config_factory(), 64, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bench_wall_clock_limit_kills_the_whole_job(config_factory, tmp_path: Path) -> None:
    config = config_factory(
        bench={"workload": "bg_test_workloads:hanging", "workload_args": {"rank": 0}, "run_timeout_s": 8}
    )
    started = time.monotonic()
    with pytest.raises(RunFailedError, match=r"killed after bench\.run_timeout_s=8 s"):
        stage_bench(config, 1, tmp_path / "out")
    assert time.monotonic() - started < 30
