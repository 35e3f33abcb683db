"""Does the printed interval cover the true change? Real A/B decisions on planted commits, each commit's
truth measured apart from the A/B.

    python benchmarks/decision_truth.py [--trials 3] [--truth-steps 1500] [--condition quiet]

The planted commits are power.py's decision levels (a 70-layer stack; a commit adds layers to every
step, or 39 layers to one step in 5). For each one:

truth      one process builds the base model and the commit's model and trains them turn about, step by
           step, `--truth-steps` steps each after a warmup, on one core (the A/B pins rank 0 of both
           sides to the same cores): the change of tokens/s over all those steps, with no launch
           between the two and a hundred times the steps of a decision. Its own 95% interval comes
           from blocks of 50 step pairs (the step-to-step spread of a paired difference).
decision   `run_ab` as the gate runs it (ab/runner.py; the rule's defaults), in random order over
           levels and trials; its printed interval and status are kept.

Reported per level: each decision's status, estimate and interval, whether the interval holds the
truth, and coverage over all decisions with its Wilson 95% interval.
Results: benchmarks/results/decision-truth-<condition>-2026-11-28.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import base_config, wilson  # beside this script
from power import DECISION_LAYERS, DECISION_LEVELS, decision_side

from benchgate.ab.runner import Side, run_ab
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import stage_bench

RESULTS = Path(__file__).resolve().parent / "results"
WARMUP = 20
BLOCK = 50


def _workload(side: Side, tag: str) -> Any:
    """The side's powerwork module, imported under its own name so that both sides live in one process."""
    spec = importlib.util.spec_from_file_location(f"powerwork_{tag}", side.source_paths[0] / "powerwork.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_workload()


class Trainer:
    """One side's model, optimizer and batch; step() times one training step as the bench takes it."""

    def __init__(self, side: Side, tag: str, seed: int) -> None:
        torch.manual_seed(seed)
        self.workload = _workload(side, tag)
        self.model = self.workload.build_model(torch.device("cpu"))
        self.optimizer = self.workload.make_optimizer(self.model)
        generator = torch.Generator().manual_seed(seed)
        self.batch = self.workload.make_batch(generator, torch.device("cpu"))

    def step(self) -> float:
        started = time.perf_counter()
        loss = self.workload.loss(self.workload.forward(self.model, self.batch), self.batch)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started


def truth(base: Side, candidate: Side, steps: int, seed: int) -> dict[str, Any]:
    """The tokens/s change of `candidate` against `base`, both trained turn about in this process."""
    sides = {"base": Trainer(base, "base", seed), "candidate": Trainer(candidate, "candidate", seed)}
    times: dict[str, list[float]] = {"base": [], "candidate": []}
    rng = random.Random(seed)
    for i in range(WARMUP + steps):
        order = ["base", "candidate"] if rng.random() < 0.5 else ["candidate", "base"]
        for name in order:
            t = sides[name].step()
            if i >= WARMUP:
                times[name].append(t)
    a, b = times["base"], times["candidate"]
    change = math.log(sum(a) / sum(b))
    blocks = [
        math.log(sum(a[k : k + BLOCK]) / sum(b[k : k + BLOCK])) for k in range(0, len(a) - BLOCK + 1, BLOCK)
    ]
    se = statistics.stdev(blocks) / math.sqrt(len(blocks))
    return {
        "change_pct": 100 * math.expm1(change),
        "ci95_pct": [100 * math.expm1(change - 1.96 * se), 100 * math.expm1(change + 1.96 * se)],
        "steps": steps,
        "base_step_ms": 1e3 * statistics.median(a),
        "candidate_step_ms": 1e3 * statistics.median(b),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3, help="decisions per level")
    parser.add_argument("--truth-steps", type=int, default=1500, help="steps per side for each truth")
    parser.add_argument("--condition", default="quiet", help="recorded with the results: quiet or loaded")
    parser.add_argument("--levels", default="", help="comma-separated level names (default: all)")
    args = parser.parse_args()
    levels = [name for name in DECISION_LEVELS if not args.levels or name in args.levels.split(",")]
    out_path = RESULTS / f"decision-truth-{args.condition}-2026-11-28.json"
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = decision_side(root, "base", 0, 0)
        sides = {
            name: decision_side(root, f"level{i}", *DECISION_LEVELS[name])
            for i, name in enumerate(DECISION_LEVELS)
            if name in levels
        }
        truths = {}
        for name, side in sides.items():
            truths[name] = truth(base, side, args.truth_steps, seed=7)
            t = truths[name]
            print(
                f"truth {name}: {t['change_pct']:+.2f}% [{t['ci95_pct'][0]:+.2f}, {t['ci95_pct'][1]:+.2f}] "
                f"({t['steps']} steps a side, {t['base_step_ms']:.1f} vs {t['candidate_step_ms']:.1f} ms)",
                flush=True,
            )
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        config = base_config(root)
        probe = read_json(stage_bench(config, 1, root / "probe", source_paths=base.source_paths))
        step_s = statistics.median(probe["samples"]["step_time_s"])
        plan = [name for name in levels for _ in range(args.trials)]
        random.Random(5).shuffle(plan)
        results: list[dict[str, Any]] = []
        for i, name in enumerate(plan):
            started = time.monotonic()
            d = run_ab(config, 1, root / f"ab{i}", base, sides[name], step_s=step_s).decision
            true = truths[name]["change_pct"]
            covered = d.ci_low_pct is not None and d.ci_low_pct <= true <= d.ci_high_pct
            results.append(
                {
                    "level": name,
                    "status": d.status,
                    "rounds": d.rounds,
                    "change_pct": d.change_pct,
                    "ci_low_pct": d.ci_low_pct,
                    "ci_high_pct": d.ci_high_pct,
                    "round_sd_pct": d.round_sd_pct,
                    "truth_pct": true,
                    "covered": covered,
                    "seconds": time.monotonic() - started,
                    "loadavg_1m": os.getloadavg()[0],
                }
            )
            print(
                f"[{i + 1}/{len(plan)}] {name}: {d.status} after {d.rounds} rounds, {d.change_pct:+.2f}% "
                f"[{d.ci_low_pct}, {d.ci_high_pct}], truth {true:+.2f}%: "
                f"{'covered' if covered else 'MISSED'}, {results[-1]['seconds']:.0f} s",
                flush=True,
            )
            report = {
                "workload": f"layer stack, {DECISION_LAYERS} layers",
                "condition": args.condition,
                "step_s": step_s,
                "truths": truths,
                "decisions": results,
            }
            write_json(out_path, report)
    covered = sum(r["covered"] for r in results)
    low, high = wilson(covered, len(results))
    print(f"coverage: {covered}/{len(results)} [{100 * low:.0f}, {100 * high:.0f}]% (Wilson 95%)")


if __name__ == "__main__":
    main()
