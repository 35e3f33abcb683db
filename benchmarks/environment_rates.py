"""How often the environment row WARNs when the setup changed nothing, and when it cost 5% or 10%.

    python benchmarks/environment_rates.py [--trials 20000] [--rounds 4,6,9,14]
                                           [--pools pool-quiet-100-2026-11-28.json,...]

The environment row (ab/environment.py) sets the A/B's base rounds (one tokens/s per launch under the
new setup) against the stored baseline run (one launch under the old) and WARNs where the upper bound
of the change lies below -tolerance. A dependency bump that does nothing to speed must not WARN.

Measured on the recorded pools of `power.py record-pool` (real pinned A/A rounds, every side a fresh
launch): a trial draws one side of one round as the stored baseline and the base side of n other
rounds as the A/B's base rounds (n: the rounds an A/B decision took, 4 to 14), optionally slows those
by the setup's cost, and lets `environment_shift` decide with the gate's default tolerance and
confidence. The baseline and the rounds are launches minutes apart in a pool; a real baseline is days
older, so drift between them is larger than here. Seeded; Wilson 95% intervals.
Results: benchmarks/results/environment-rates-2026-11-28.json.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from _common import wilson  # beside this script

from benchgate.ab.environment import environment_shift
from benchgate.config import load_config
from benchgate.kit.files import read_json, write_json

RESULTS = Path(__file__).resolve().parent / "results"
POOLS = "pool-quiet-100-2026-11-28.json,pool-hog-2026-11-28.json,pool-loaded-2026-11-28.json"
COSTS = (0.0, -5.0, -10.0)  # what the new setup does to tokens/s, percent


def warn_rate(
    sides: list[tuple[float, float]], n: int, cost_pct: float, trials: int, rng: random.Random, tol: Any
) -> dict[str, Any]:
    """WARNs of `trials` environment rows of n rounds slowed by `cost_pct`, over rounds (base, candidate
    tokens/s)."""
    warns = 0
    for _ in range(trials):
        picks = rng.sample(range(len(sides)), n + 1)
        baseline = sides[picks[0]][rng.randrange(2)]
        rates = [sides[i][0] * (1 + cost_pct / 100) for i in picks[1:]]
        found = environment_shift(rates, baseline, tol.confidence)
        assert found is not None and found.ci_high_pct is not None
        warns += found.ci_high_pct < -tol.throughput_drop_pct
    low, high = wilson(warns, trials)
    return {"warn": warns / trials, "wilson95": [low, high], "trials": trials}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=20000)
    parser.add_argument("--rounds", default="4,6,9,14")
    parser.add_argument("--pools", default=POOLS)
    args = parser.parse_args()
    tol = load_config().gate.tolerances
    rng = random.Random(20261128)
    report: dict[str, Any] = {
        "tolerance_pct": tol.throughput_drop_pct,
        "confidence": tol.confidence,
        "pools": {},
    }
    for name in args.pools.split(","):
        path = RESULTS / name
        if not path.exists():
            print(f"{name}: not found, left out")
            continue
        rounds = [r for r in read_json(path)["rounds"] if r.get("pin", "on") == "on"]
        sides = [(float(r["base_tokens_per_s"]), float(r["candidate_tokens_per_s"])) for r in rounds]
        entry: dict[str, Any] = {}
        for cost in COSTS:
            for n in (int(k) for k in args.rounds.split(",")):
                cell = warn_rate(sides, n, cost, args.trials, rng, tol)
                entry[f"{cost:g}% n={n}"] = cell
                low, high = cell["wilson95"]
                print(
                    f"{name}: setup {cost:+g}%, {n} rounds: WARN {100 * cell['warn']:.2f}% "
                    f"[{100 * low:.2f}, {100 * high:.2f}] of {args.trials}",
                    flush=True,
                )
        report["pools"][name] = entry
    write_json(RESULTS / "environment-rates-2026-11-28.json", report)


if __name__ == "__main__":
    main()
