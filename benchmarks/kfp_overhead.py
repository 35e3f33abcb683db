"""kfp.local overhead: the local pipeline's wall time vs the same stages called directly.

Both sides run as a fresh Python process (interpreter start and imports included, as a user pays them),
interleaved round by round so host drift hits both alike, with the same small config (the overhead is
absolute seconds; short stages keep the stages' own noise out of it). Overhead per task is the median
over rounds of (pipeline - direct), divided by the number of pipeline tasks that ran.
Target: <= 1.5 s per task.

    python benchmarks/kfp_overhead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchgate.config import RunConfig, load_config


def config_for(out: Path) -> RunConfig:
    return load_config(
        overrides={
            "bench.workload_args": {"size": "tiny"},
            "bench.steps": 10,
            "bench.warmup": 3,
            "bench.world_sizes": [1, 2],
            "eval.train_steps": 20,
            "gate.baseline_dir": out / "baselines",
            "gate.update_baseline": "never",
            "out": out / "run",
            # MLflow's cost is measured on its own (tracking_overhead.py); this compares runners only.
            "tracking.enabled": False,
        }
    )


def run_pipeline(out: Path) -> int:
    from benchgate.kfp.local_run import run_gate

    outcome = run_gate(config_for(out))
    return len([p for p in outcome.pipeline_dir.iterdir() if p.is_dir()])


def run_direct(out: Path) -> int:
    """The stages the pipeline's tasks call, in the pipeline's order, in one process."""
    from benchgate.checks.stage import stage_compare
    from benchgate.measure.evaluate import stage_eval
    from benchgate.measure.launch import stage_bench
    from benchgate.measure.stage import stage_env
    from benchgate.measure.trace import stage_trace
    from benchgate.publish.policy import stage_update_baseline

    config = config_for(out)
    run_dir = Path(config.out)
    stage_env(run_dir)
    for ws in (1, 2):
        stage_bench(config, ws, run_dir)
    stage_eval(config, run_dir / "eval.json")
    stage_trace(config, run_dir / "trace")
    comparison, _, _ = stage_compare(config, run_dir)
    stage_update_baseline(config, run_dir, comparison.verdict)
    return 0


def timed(mode: str) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--out", tmp],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds, int(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=["pipeline", "direct"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        print(run_pipeline(args.out) if args.child == "pipeline" else run_direct(args.out))
        return
    pipeline_s, direct_s, tasks = [], [], 0
    for i in range(args.rounds):
        p, tasks = timed("pipeline")
        d, _ = timed("direct")
        pipeline_s.append(p)
        direct_s.append(d)
        line = f"round {i}: pipeline {p:.1f} s  direct {d:.1f} s  ratio {p / d:.3f}  tasks {tasks}"
        print(line, flush=True)
    p, d = statistics.median(pipeline_s), statistics.median(direct_s)
    extra = statistics.median(a - b for a, b in zip(pipeline_s, direct_s, strict=True))
    print(f"median: pipeline {p:.1f} s, direct {d:.1f} s, ratio {p / d:.3f}")
    print(f"overhead: {extra:.1f} s for {tasks} tasks = {extra / tasks:.2f} s per task (target <= 1.5)")


if __name__ == "__main__":
    main()
