"""False alarms: A/A gate runs of the same code, counted by verdict.

Promotes `--history` baseline runs first (the run-to-run noise floor), then runs the bench `--runs`
times with unchanged code and compares each with the baseline as the gate does: a timing FAIL is
confirmed by re-running that world size (stages.stage_confirm). Verdicts are counted before and after
that confirmation. Target: 0 FAIL with the shipped gate.

    python benchmarks/false_alarms.py [--runs 10] [--history 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import collections
import tempfile
from pathlib import Path

from benchgate.baseline import save_baseline
from benchgate.compare import timing_failures
from benchgate.config import RunConfig, load_config
from benchgate.errors import BenchgateError
from benchgate.launch import run_bench
from benchgate.results import load_bundle
from benchgate.stages import stage_compare, stage_confirm, stage_env


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
    shipped: collections.Counter[str] = collections.Counter()
    before: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "baselines"
        config = load_config(
            overrides={
                "bench.workload_args": {"size": "tiny"},
                "bench.steps": args.steps,
                "gate.baseline_dir": store,
            }
        )
        for i in range(args.history):
            bench_run(config, Path(tmp) / f"base{i}")
            save_baseline(load_bundle(Path(tmp) / f"base{i}"), store, "benchmark history")
        for i in range(args.runs):
            run_dir = Path(tmp) / f"aa{i}"
            try:
                bench_run(config, run_dir)
            except BenchgateError as e:  # a crashed run is no verdict: count it and go on
                shipped["run failed"] += 1
                print(f"A/A {i}: run failed: {str(e).splitlines()[0]}", flush=True)
                continue
            first, _, baseline = stage_compare(config, run_dir)
            assert baseline is not None
            failing = timing_failures(first)
            result = stage_confirm(config, run_dir, failing) if failing else first
            shipped[result.verdict] += 1
            before[first.verdict] += 1
            worst = {
                c.name: f"{c.change:+.1f}% {c.status}"
                for c in result.checks
                if c.name.startswith("tokens/s") and c.change is not None
            }
            print(
                f"A/A {i}: shipped {result.verdict:4s}  before confirmation {first.verdict:4s}  {worst}",
                flush=True,
            )
    print(
        f"A/A runs: {args.runs}, baseline history: {args.history} runs, failed runs: {shipped['run failed']}"
    )
    print(
        f"shipped gate (with confirmation):   FAIL {shipped['FAIL']}, WARN {shipped['WARN']}, "
        f"PASS {shipped['PASS']}   target: 0 FAIL"
    )
    print(
        f"before the confirmation run:        FAIL {before['FAIL']}, WARN {before['WARN']}, "
        f"PASS {before['PASS']}"
    )


if __name__ == "__main__":
    main()
