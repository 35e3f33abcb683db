"""Processes killed for real: a rank by `kill -9`, `benchgate run` itself by `kill -9`, two runs on one --out.

Real torchrun on CPU ranks over gloo and the real CLI in a subprocess; the workload leaves each rank's pid
in a file once the ranks are mid-run, so the test kills a process known to be inside a step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from benchgate.errors import RunFailedError
from benchgate.measure.launch import stage_bench

pytestmark = pytest.mark.slow


def _wait_for(path: Path, timeout_s: float = 120, process: subprocess.Popen[str] | None = None) -> Path:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        if process is not None and process.poll() is not None:
            raise AssertionError(f"exited {process.returncode} first:\n{process.communicate()[0]}")
        time.sleep(0.05)
    time.sleep(0.1)  # the rank is now inside its next step
    return path


@pytest.mark.serial
def test_a_rank_killed_by_sigkill_fails_the_run_with_exit_3_naming_it(config_factory, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    config = config_factory(
        bench={
            "workload": "bg_fault_workloads:announcing",
            "workload_args": {"directory": str(pids), "at_step": 4},
            "steps": 2000,
            "timeout_s": 10,
        }
    )
    killed_at: list[float] = []

    def kill_rank_1() -> None:
        victim = int(_wait_for(pids / "rank1.pid").read_text())
        killed_at.append(time.monotonic())
        os.kill(victim, signal.SIGKILL)

    killer = threading.Thread(target=kill_rank_1, daemon=True)
    killer.start()
    with pytest.raises(RunFailedError) as info:
        stage_bench(config, 2, tmp_path / "out")
    detected_s = time.monotonic() - killed_at[0]
    message = str(info.value)
    assert info.value.exit_code == 3
    assert message.startswith("bench ws=2: rank 1 was killed by SIGKILL (signal 9, pid "), message
    # Rank 0's "connection closed by peer" is a consequence and must not be blamed, nor rank 1 called hung.
    assert "rank 0" not in message and "hung" not in message
    assert detected_s < 10 + 5, detected_s  # bench.timeout_s plus a few seconds
    assert not (tmp_path / "out" / "metrics-ws2.json").exists()


def _run_cli(out: Path, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "benchgate", "run", "--world-sizes", "1,2", "--warmup", "1", "--no-eval",
            "--no-trace", "--no-tracking", "--out", str(out), "--baseline-dir", str(tmp_path / "baselines"),
            "--update-baseline", *extra,
        ],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.serial
def test_killing_benchgate_run_leaves_no_process_behind_and_the_next_run_starts_clean(tmp_path: Path) -> None:
    out, pids = tmp_path / "out", tmp_path / "pids"
    run = _run_cli(
        out, tmp_path, "--workload", "bg_fault_workloads:announcing", "--workload-arg", f"directory={pids}",
        "--workload-arg", "at_step=3", "--steps", "2000",
    )  # fmt: skip
    try:
        _wait_for(pids / "rank0.pid", process=run)  # ws=1 is mid-run: run → task → torchrun → rank
        below = psutil.Process(run.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in below)
        assert "torch.distributed.run" in names and "benchgate.measure.bench" in names, names
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
        killed = time.monotonic()
        _, alive = psutil.wait_procs(below, timeout=20)
        gone_s = time.monotonic() - killed
    finally:
        run.kill()
    assert not alive, [" ".join(p.cmdline()) for p in alive]
    assert gone_s < 20

    # The next run with the same --out and baseline store: no stale lock, nothing of the killed run left.
    again = _run_cli(
        out, tmp_path, "--workload", "bg_test_workloads:sleepy", "--steps", "6", "--world-sizes", "1"
    )
    output, _ = again.communicate(timeout=600)
    assert again.returncode == 0, output
    assert len(list((out / "pipeline").iterdir())) == 1  # only this run's pipeline root
    assert (out / "metrics-ws1.json").exists() and not (out / "metrics-ws2.json").exists()
    stored = [p.relative_to(tmp_path) for p in (tmp_path / "baselines").rglob("*") if ".staging" in p.name]
    assert not stored  # no half-promoted baseline


def test_a_second_run_on_the_same_out_is_refused_and_the_first_finishes_intact(tmp_path: Path) -> None:
    out, pids = tmp_path / "out", tmp_path / "pids"
    first = _run_cli(
        out, tmp_path, "--workload", "bg_fault_workloads:announcing", "--workload-arg", f"directory={pids}",
        "--workload-arg", "at_step=2", "--steps", "60", "--world-sizes", "1",
    )  # fmt: skip
    try:
        _wait_for(pids / "rank0.pid", process=first)
        second = _run_cli(out, tmp_path, "--workload", "bg_test_workloads:sleepy", "--steps", "6")
        output, _ = second.communicate(timeout=120)
        assert second.returncode == 2, output
        assert f"out: {out} is in use by another benchgate run (pid {first.pid}, started " in output
        assert "Traceback" not in output
        first_output, _ = first.communicate(timeout=600)
    finally:
        first.kill()
    assert first.returncode == 0, first_output
    assert (out / "compare.json").exists() and (out / "metrics-ws1.json").exists()


@pytest.mark.serial
def test_run_refuses_an_out_directory_it_did_not_create(tmp_path: Path) -> None:
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "mine.pt.trace.json").write_text("{}")
    started = time.monotonic()
    run = _run_cli(tmp_path, tmp_path, "--workload", "bg_test_workloads:sleepy")
    output, _ = run.communicate(timeout=120)
    assert run.returncode == 2, output
    assert f"out: {tmp_path} is not empty" in output and "was not created by benchgate" in output
    assert (tmp_path / "trace" / "mine.pt.trace.json").exists()
    assert time.monotonic() - started < 30  # refused before any work
