"""`make gpu-check`'s script (benchmarks/gpu_check.py) must not rot between the sessions that have a GPU:
its first steps run here on CPU (`--smoke`), as the whole script does by hand before GPU time is spent
(docs/benchmarks.md, GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_gpu_checks_first_steps_run_on_cpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_check.py"),
            "--smoke",
            "--only",
            "S0,S1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    steps = summary["steps"]
    assert set(steps) == {"S0_env", "S1_doctor"} and all(step["ok"] for step in steps.values()), steps
    assert steps["S0_env"]["machine_profile"].startswith("cpu-")
    assert steps["S1_doctor"]["type"] == "cpu" and steps["S1_doctor"]["matmul_fp32"]["best_tflops"] > 0
    assert (tmp_path / "results.tar.gz").is_file()
