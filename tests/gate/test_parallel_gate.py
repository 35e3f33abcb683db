"""Real training code's parallelism through the whole gate, on 2 CPU ranks over gloo: the reference GPT
sharded by FSDP2 (`parallel=fsdp2`) with its loss all-reduced for logging inside every step, run as a
user runs it (`benchgate run`: env check, bench at ws=1 and ws=2, trace, compare, publish, gate), and
FSDP2 through the A/B's real rounds."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import make_config

from benchgate.ab.runner import Side, run_ab
from benchgate.kit.files import read_json

pytestmark = pytest.mark.slow


def test_fsdp2_with_a_collective_in_its_step_through_a_whole_gate_run(tmp_path: Path) -> None:
    # Before, rank 0 counted FLOPs alone and waited in the loss's all-reduce until gloo's timeout; and the
    # trace, which trains in one process, had no process group for the collective or FSDP2's mesh.
    done = subprocess.run(
        [
            sys.executable, "-m", "benchgate", "run", "--workload", "bg_parallel_workloads:logged_fsdp2_gpt",
            "--world-sizes", "1,2", "--steps", "6", "--warmup", "1", "--no-eval", "--trace",
            "--timeout-s", "30", "--no-tracking", "--baseline-dir", "baselines", "--out", "out",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out"
    counted = []
    for ws in (1, 2):
        metrics = read_json(out / f"metrics-ws{ws}.json")
        assert metrics["workload"] == "gpt-tiny-fsdp2"
        assert f"dp={ws}" in metrics["parallelism"] and metrics["data_parallel_replicas"] == ws
        assert metrics["tokens_per_step_global"] == ws * 8 * 128
        counting = metrics["mfu"]["counting"]
        assert "error" not in counting and counting["ranks"] == ws
        counted.append(counting["per_token"])
    # Every rank counted at once, however sharded: the model's FLOPs per token at both world sizes.
    assert counted[0] == counted[1] > 0
    rows = {c["name"]: c["status"] for c in read_json(out / "compare.json")["checks"]}
    assert rows["tokens/s (ws=2)"] == "NEW" and rows["loss slope (ws=2)"] == "PASS"
    (trace,) = (out / "trace").glob("*.pt.trace.json.gz")
    names = {event.get("name") for event in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]}
    assert "forward" in names and "optimizer_step" in names


def test_fsdp2_through_the_ab_rounds(tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        bench={
            "workload": "benchgate.workloads.gpt:make_workload",
            "workload_args": {"size": "tiny", "parallel": "fsdp2"},
            "world_sizes": [1, 2],
            "timeout_s": 30.0,
        },
        gate={"ab": {"steps": 4, "warmup": 1, "min_measured_s": 0.0, "min_rounds": 2, "max_rounds": 2}},
    )
    same = Side("the installed code")
    outcome = run_ab(config, 2, tmp_path / "ab", same, same)
    assert len(outcome.rounds) == 2 and outcome.decision.status in ("PASS", "FAIL", "UNKNOWN")
    for side in ("A", "B"):
        metrics = read_json(tmp_path / "ab" / "ab" / "ws2" / "round1" / side / "metrics-ws2.json")
        assert "dp=2" in metrics["parallelism"] and len(metrics["samples"]["step_time_s"]) == 4
        assert metrics["mfu"]["counting"] == {"skipped": "an A/B round: only its step times are read"}
