"""False alarms: A/A gate runs of the same code, counted by verdict.

Promotes `--history` baseline runs first (the run-to-run noise floor), then runs the bench `--runs`
times with unchanged code and compares each with the baseline, twice: with the history noise floor (the
gate as shipped) and without it (a fresh profile with one baseline run). Target: 0 FAIL with the shipped gate.

    python benchmarks/false_alarms.py [--runs 10] [--history 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import tempfile
from pathlib import Path

from benchgate.baseline import find_baseline, save_baseline
from benchgate.compare import compare
from benchgate.config import RunConfig, load_config
from benchgate.launch import run_bench
from benchgate.results import load_bundle
from benchgate.runner import stage_env


def bench_run(config: RunConfig, directory: Path) -> None:
    stage_env(directory)
    for ws in (1, 2):
        run_bench(config, ws, directory)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--history", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    config = load_config(overrides={"bench.workload_args": {"size": "tiny"}, "bench.steps": args.steps})
    tol = config.gate.tolerances
    shipped: collections.Counter[str] = collections.Counter()
    without_floor: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "baselines"
        for i in range(args.history):
            bench_run(config, Path(tmp) / f"base{i}")
            save_baseline(load_bundle(Path(tmp) / f"base{i}"), store, "benchmark history")
        for i in range(args.runs):
            run_dir = Path(tmp) / f"aa{i}"
            bench_run(config, run_dir)
            current = load_bundle(run_dir)
            baseline = find_baseline(store, current.machine_profile, "gpt-tiny")
            assert baseline is not None
            result = compare(baseline, current, tol)
            bare = compare(dataclasses.replace(baseline, history=[]), current, tol)
            shipped[result.verdict] += 1
            without_floor[bare.verdict] += 1
            worst = {
                c.name: f"{c.change:+.1f}% {c.status}"
                for c in result.checks
                if c.name.startswith("tokens/s") and c.change is not None
            }
            print(f"A/A {i}: shipped {result.verdict:4s}  no history {bare.verdict:4s}  {worst}", flush=True)
    print(f"A/A runs: {args.runs}, baseline history: {args.history} runs")
    print(
        f"shipped gate (history noise floor): FAIL {shipped['FAIL']}, WARN {shipped['WARN']}, "
        f"PASS {shipped['PASS']}   target: 0 FAIL"
    )
    print(
        f"without the history noise floor:    FAIL {without_floor['FAIL']}, WARN {without_floor['WARN']}, "
        f"PASS {without_floor['PASS']}"
    )


if __name__ == "__main__":
    main()
