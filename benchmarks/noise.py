"""Noise: how far the p50 step time of repeated runs lands apart, and why.

Part 1 repeats the real bench stage (torchrun, ws=1, gpt-tiny) `--runs` times for 1 and for 2 threads
per rank, interleaved, and reports the spread ((max - min) / median) of p50, p10, min, and of the p50
of step time divided by the drift reference (the fixed CPU kernel bench times after every step).
Part 2 (in process) times a fixed reference kernel between training steps: if the host's speed drifts,
both drift together, and the step / reference ratio shows how much of the spread is the machine.
Target: p50 spread <= 5%.

    python benchmarks/noise.py [--runs 5] [--steps 60]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _common import cv_pct, ms, spread_pct

from benchgate.config import load_config
from benchgate.kit.files import read_json
from benchgate.kit.stats import percentile
from benchgate.measure.launch import stage_bench
from benchgate.workloads.gpt import make_workload
from benchgate.workloads.training import build_trainer


def repeated_bench(runs: int, steps: int) -> None:
    results: dict[int, dict[str, list[float]]] = {
        t: {"p50": [], "p10": [], "min": [], "p50 drift-corrected": []} for t in (1, 2)
    }
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            for threads in (1, 2):
                config = load_config(
                    overrides={
                        "bench.workload_args": {"size": "tiny"},
                        "bench.steps": steps,
                        "bench.threads_per_rank": threads,
                    }
                )
                recorded = read_json(stage_bench(config, 1, Path(tmp)))["samples"]
                samples = recorded["step_time_s"]
                results[threads]["p50"].append(percentile(samples, 50))
                # Step time over the drift reference timed right after it: a ratio without unit, whose
                # relative spread compares directly with the raw p50's.
                corrected = [t / r for t, r in zip(samples, recorded["reference_s"], strict=True)]
                results[threads]["p50 drift-corrected"].append(percentile(corrected, 50))
                results[threads]["p10"].append(percentile(samples, 10))
                results[threads]["min"].append(min(samples))
    for threads, stats in results.items():
        print(f"threads/rank={threads}: p50 per run [ms] {ms(stats['p50'])}")
        for key, values in stats.items():
            print(f"  {key}: spread {spread_pct(values):5.1f}%  cv {cv_pct(values):4.1f}%")


def reference_ratio(rounds: int, steps: int) -> None:
    torch.set_num_threads(1)
    workload = make_workload("tiny")
    a, b = torch.randn(384, 384), torch.randn(384, 384)

    def reference() -> float:
        start = time.perf_counter()
        for _ in range(20):
            torch.mm(a, b)
        return time.perf_counter() - start

    step_p50, ref_p50 = [], []
    for _ in range(rounds):
        trainer = build_trainer(workload, torch.device("cpu"), "fp32", seed=0)
        for _ in range(10):
            trainer.step()
        steps_s, refs_s = [], []
        for _ in range(steps):
            start = time.perf_counter()
            trainer.step()
            steps_s.append(time.perf_counter() - start)
            refs_s.append(reference())
        step_p50.append(statistics.median(steps_s))
        ref_p50.append(statistics.median(refs_s))
    ratio = [s / r for s, r in zip(step_p50, ref_p50, strict=True)]
    print(f"in-process, {rounds} rounds: step p50 [ms] {ms(step_p50)}")
    print(
        f"  step p50 spread {spread_pct(step_p50):.1f}% cv {cv_pct(step_p50):.1f}%; "
        f"reference kernel spread {spread_pct(ref_p50):.1f}% cv {cv_pct(ref_p50):.1f}%; "
        f"step/reference spread {spread_pct(ratio):.1f}% cv {cv_pct(ratio):.1f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    repeated_bench(args.runs, args.steps)
    reference_ratio(8, args.steps)


if __name__ == "__main__":
    main()
