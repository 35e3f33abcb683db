"""Quality by seeds: eval seconds per seed, the seed-to-seed spread, and the eval rows' A/A outcomes.

The eval of `make bench`'s configuration (gpt-tiny on CPU, the default eval settings: 400 steps, one
thread), run once per seed, seeds eval.seed, eval.seed + 1, ...: the seeds the eval stage adds when its
first seed is out of band (measure/seeds.py). Prints each seed's CPU and wall time, perplexity and
probe accuracies, then the spread: what a commit that only draws the random stream differently moves.
CPU seconds (the process's, one eval thread) are the cost on a shared host, where wall time also
counts the other processes' turns on the cores.

Then A/A: the same code under other seeds is what a numerically neutral commit trains. Every ordered
choice of a baseline seed and a candidate's first seed is judged by the deterministic thresholds of
before (perplexity +1.5%, probe -2 pts) and by checks/quality.py, the candidate taking k - 1 further
seeds (of those left) where its first is out of band, as the eval stage would. The seeds' records go to
benchmarks/results/eval-seeds.json; `--from` judges a saved file again without rerunning the evals.

`--simulate` instead draws probe items at random (16 items, a fixed chance each per seed, or chances
drawn from Beta(0.5, 1) per item) and counts the flip test's false FAILs per probe at 5%: pooled over 3
candidate seeds that all pair with the baseline's one seed, against one-to-one pairs (the rule).

    python benchmarks/eval_seeds.py [--seeds 5] [--train-steps 400] [--from FILE]
    python benchmarks/eval_seeds.py --simulate [--trials 20000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import cv_pct, spread_pct

from benchgate.checks.quality import eval_checks
from benchgate.config import Tolerances, load_config
from benchgate.results.bundle import Bundle

RESULTS = Path(__file__).parent / "results" / "eval-seeds.json"


def run_seeds(n: int, train_steps: int) -> list[dict[str, Any]]:
    from benchgate.measure.evaluate import stage_eval  # loads torch: only when evals run

    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(n):
            config = load_config(
                overrides={
                    "bench.workload_args": {"size": "tiny"},
                    "eval.train_steps": train_steps,
                    "eval.seed": 1234 + k,
                    "eval.seeds": 1,  # one seed per call: this script walks the seeds itself
                    "gate.baseline_dir": Path(tmp) / "baselines",
                }
            )
            cpu = time.process_time()
            result = stage_eval(config, Path(tmp) / f"eval-{k}.json")
            records.append({**result, "cpu_s": time.process_time() - cpu})
            shown = " ".join(f"{n} {p['accuracy_pct']:5.1f}%" for n, p in sorted(result["probes"].items()))
            seconds = f"{records[-1]['cpu_s']:6.1f} s CPU, {result['wall_s']:6.1f} s wall"
            print(f"seed {1234 + k}: {seconds}  perplexity {result['perplexity']:.4f}  {shown}", flush=True)
    return records


def as_eval(first: dict[str, Any], more: list[dict[str, Any]]) -> dict[str, Any]:
    """One eval.json of seeds run separately: the first's top level, every seed in `seeds`."""
    seeds = [s for run in (first, *more) for s in run["seeds"]]
    settings = {k: v for k, v in first["settings"].items() if k != "seed"}
    return {**first, "settings": settings, "seeds": seeds, "more_seeds": f"{len(seeds)} seeds"}


def old_rule(base: dict[str, Any], cur: dict[str, Any], tol: Tolerances) -> str:
    worse = 100 * (cur["perplexity"] / base["perplexity"] - 1) > tol.perplexity_increase_pct
    drops = [
        base["probes"][n]["accuracy_pct"] - p["accuracy_pct"] > tol.probe_accuracy_drop_points
        for n, p in cur["probes"].items()
    ]
    return "FAIL" if worse or any(drops) else "PASS"


def aa(records: list[dict[str, Any]], k: int, tol: Tolerances) -> None:
    env = {"machine_profile": "aa"}
    old, new, rows, extra = Counter[str](), Counter[str](), Counter[tuple[str, str]](), 0
    for b, c in itertools.permutations(range(len(records)), 2):
        base = as_eval(records[b], [])
        first = as_eval(records[c], [])
        old[old_rule(base, first, tol)] += 1
        bundle_base = Bundle(Path("b"), env, eval=base)
        checks = eval_checks(bundle_base, Bundle(Path("c"), env, eval=first), tol, [])
        if all(x.status == "PASS" for x in checks):
            outcomes = [checks]
        else:  # out of band: every choice of k - 1 further seeds among those left
            left = [i for i in range(len(records)) if i not in (b, c)]
            candidates = [
                as_eval(records[c], [records[i] for i in more])
                for more in itertools.combinations(left, k - 1)
            ]
            outcomes = [eval_checks(bundle_base, Bundle(Path("c"), env, eval=e), tol, []) for e in candidates]
            extra += 1
        for checks in outcomes:
            worst = max((x.status for x in checks), key=["PASS", "INFO", "WARN", "UNKNOWN", "FAIL"].index)
            new[worst] += 1 / len(outcomes)
            for x in checks:
                rows[(x.name, x.status)] += 1 / len(outcomes)
    pairs = len(records) * (len(records) - 1)
    print(f"A/A over {pairs} ordered (baseline seed, candidate seed) pairs:")
    print(f"  deterministic thresholds: {dict(old)}")
    print(f"  by seeds: {extra} of {pairs} first seeds out of band (k={k} seeds then);")
    print(f"  eval verdict { ({s: round(v, 2) for s, v in new.items()}) }")
    for (name, status), count in sorted(rows.items()):
        print(f"    {name}: {status} {count:.2f}")


def simulate(trials: int) -> None:
    import numpy as np

    from benchgate.kit.stats import sign_test_p

    rng = np.random.default_rng(0)
    draws = {
        "coin p=0.3 per item": lambda: np.full(16, 0.3),
        "Beta(0.5, 1) per item": lambda: rng.beta(0.5, 1.0, 16),
    }
    for label, chances in draws.items():
        shared = single = 0
        for _ in range(trials):
            p = chances()
            base, cands = rng.random(16) < p, rng.random((3, 16)) < p
            worse, better = int((base & ~cands).sum()), int((~base & cands).sum())
            shared += sign_test_p(worse, better) < 0.05 and worse > better
            worse, better = int((base & ~cands[0]).sum()), int((~base & cands[0]).sum())
            single += sign_test_p(worse, better) < 0.05 and worse > better
        print(
            f"{label}: A/A FAIL per probe at 5% over {trials} trials: 3 seeds pooled against one base "
            f"seed {100 * shared / trials:.1f}%, one-to-one pairs {100 * single / trials:.1f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--train-steps", type=int, default=400)
    parser.add_argument("--k", type=int, default=3, help="eval.seeds for the A/A judging")
    parser.add_argument("--from", dest="source", type=Path, help="judge a saved eval-seeds.json again")
    parser.add_argument("--simulate", action="store_true", help="the flip test on simulated items")
    parser.add_argument("--trials", type=int, default=20000)
    args = parser.parse_args()
    if args.simulate:
        return simulate(args.trials)
    if args.source:
        records = json.loads(args.source.read_text())
    else:
        records = run_seeds(args.seeds, args.train_steps)
        RESULTS.write_text(json.dumps(records, indent=1) + "\n")
    seconds = [r["cpu_s"] for r in records]
    perplexities = [r["perplexity"] for r in records]
    median, low, high = statistics.median(seconds), min(seconds), max(seconds)
    print(f"eval CPU seconds per seed: median {median:.1f} (min {low:.1f}, max {high:.1f})")
    print(
        f"perplexity over {len(records)} seeds: mean {statistics.mean(perplexities):.4f}, "
        f"spread (max-min)/median {spread_pct(perplexities):.2f}%, CV {cv_pct(perplexities):.2f}%"
    )
    for name in sorted(records[0]["probes"]):
        accuracies = [r["probes"][name]["accuracy_pct"] for r in records]
        low, high = min(accuracies), max(accuracies)
        print(f"probe {name}: {low:.1f}% .. {high:.1f}% (range {high - low:.1f} pts)")
    aa(records, args.k, Tolerances())


if __name__ == "__main__":
    main()
