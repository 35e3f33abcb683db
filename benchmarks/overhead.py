"""Harness overhead: median step time as benchgate measures it vs a bare training loop, same process.

Rounds alternate (bare, benchgate) so both see the same machine state; the ratio of medians is reported
per round and pooled. benchgate's side is the real worker (`benchgate.measure.bench.run_worker` at world size
1: Trainer with record_function ranges, StepTimer, loss kept on device). Target: ratio <= 1.01.

    python benchmarks/overhead.py [--rounds 6] [--steps 40]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import ms

from benchgate.config import load_config
from benchgate.kit.files import read_json
from benchgate.measure.bench import run_worker
from benchgate.workloads.gpt import make_workload


def bare_loop(steps: int, warmup: int) -> list[float]:
    torch.manual_seed(0)
    workload = make_workload("tiny")
    model = workload.build_model(torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(0)
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        batch = workload.make_batch(generator, torch.device("cpu"))
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def added_cost_per_step_s(repeats: int = 20000) -> float:
    """What the harness adds to each step, timed alone: 5 profiler ranges, 2 clock reads, a kept loss."""
    from torch.profiler import record_function

    from benchgate.measure.bench import StepTimer
    from benchgate.workloads.training import RANGES

    timer = StepTimer(torch.device("cpu"), repeats)
    loss = torch.tensor(1.0)
    kept = []
    start = time.perf_counter()
    for i in range(repeats):
        timer.start(i)
        for name in RANGES:
            with record_function(name):
                pass
        kept.append(loss.detach())
        timer.stop(i)
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)  # what the bench worker uses per rank on CPU
    config = load_config(
        overrides={"bench.workload_args": {"size": "tiny"}, "bench.steps": args.steps, "bench.warmup": 10}
    )
    bare_all, harness_all, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            bare = bare_loop(args.steps, 10)
            run_worker(config, Path(tmp) / "m.json")
            harness = read_json(Path(tmp) / "m.json")["samples"]["step_time_s"]
            ratio = statistics.median(harness) / statistics.median(bare)
            ratios.append(ratio)
            bare_all += bare
            harness_all += harness
            print(
                f"round {r}: bare p50 {ms([statistics.median(bare)])} ms, "
                f"benchgate p50 {ms([statistics.median(harness)])} ms, ratio {ratio:.4f}"
            )
    pooled = statistics.median(harness_all) / statistics.median(bare_all)
    print(
        f"pooled: bare p50 {ms([statistics.median(bare_all)])} ms, "
        f"benchgate p50 {ms([statistics.median(harness_all)])} ms"
    )
    print(f"overhead ratio (benchgate / bare, pooled medians): {pooled:.4f}  target <= 1.01")
    added = added_cost_per_step_s()
    print(
        f"added work per step, timed alone: {1e6 * added:.1f} us = "
        f"{100 * added / statistics.median(bare_all):.3f}% of the bare p50 step"
    )
    print(
        f"per-round ratios: median {statistics.median(ratios):.4f}, "
        f"min {min(ratios):.4f}, max {max(ratios):.4f}"
    )


if __name__ == "__main__":
    main()
