"""The A/B rule v3's error rates, by resampling the recorded pools (every step of real pinned A/A rounds).

    python benchmarks/rule_v3.py [--trials 2000] [--pools pool-stack70.json,pool-stack350.json,...]

Each decision draws rounds with replacement from one pool, injects the slowdown into the candidate's
recorded steps (uniform; or a rare 60x step, 1 in 400 steps at random, on the candidate only, or on
both sides for "stalls on both": unchanged code on a host that stalls; or, where the workload declares
period_steps=400, rounds of 400 steps that each hold the event once), and lets decide_rounds() judge
them round by round as the runner does (capped steps counted, uncapped figures kept). Rates come with
Wilson 95% intervals and the trials behind them; results go to benchmarks/results/rule-v3.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from benchgate.ab.decision import decide_rounds, round_change, round_diagnostics
from benchgate.ab.rare import count_capped
from benchgate.kit.files import read_json, write_json

sys.path.insert(0, str(Path(__file__).parent))
from _common import RESULTS, rate  # beside this script

TOLERANCE, CONFIDENCE, MIN_ROUNDS, MAX_ROUNDS = 5.0, 0.95, 4, 27
STALL_X, STALL_EVERY = 60.0, 400
# (label, uniform tokens/s change, where rare 60x steps land: "", "candidate" or "both")
LEVELS = [
    ("A/A", 0.0, ""),
    ("A/A, stalls on both sides", 0.0, "both"),
    ("-3% uniform", -0.03, ""),
    ("-4% uniform", -0.04, ""),
    ("-7.5% uniform", -0.075, ""),
    ("-10% uniform", -0.10, ""),
    ("rare: 60x every 400 steps (-12.9%)", 0.0, "candidate"),
    ("rare, period_steps=400 declared", 0.0, "period"),
]


def _stalled(steps: list[float], rng: random.Random) -> list[float]:
    median = statistics.median(steps)
    return [t + (STALL_X - 1) * median if rng.random() < 1 / STALL_EVERY else t for t in steps]


def _period_round(pool: list[dict[str, Any]], rng: random.Random) -> tuple[list[float], list[float]]:
    """A round as the runner makes it when the workload declares period_steps=STALL_EVERY: it measures a
    whole period (recorded rounds joined end to end until STALL_EVERY steps), so the event lands in it
    once, at a random step, on the candidate only."""
    a: list[float] = []
    b: list[float] = []
    while len(a) < STALL_EVERY:
        r = rng.choice(pool)
        a += r["base_step_s"]
        b += r["candidate_step_s"]
    a, b = a[:STALL_EVERY], b[:STALL_EVERY]
    at = rng.randrange(STALL_EVERY)
    b[at] += (STALL_X - 1) * statistics.median(b)
    return a, b


def _round(pool: list[dict[str, Any]], change: float, stalls: str, rng: random.Random) -> dict[str, Any]:
    r = rng.choice(pool)
    a, b = list(r["base_step_s"]), list(r["candidate_step_s"])
    if stalls == "period":
        a, b = _period_round(pool, rng)
        stalls = ""
    if change:
        b = [t / (1.0 + change) for t in b]
    if stalls == "both":
        a = _stalled(a, rng)
    if stalls:
        b = _stalled(b, rng)
    base_capped, candidate_capped = count_capped(a, b)
    return {
        "change_log": round_change(a, b),
        "uncapped_change_log": round_diagnostics(a, b)["uncapped_change_log"],
        "base_capped_steps": base_capped,
        "candidate_capped_steps": candidate_capped,
    }


def decision(pool: list[dict[str, Any]], change: float, stalls: str, rng: random.Random) -> tuple[str, int]:
    rounds: list[dict[str, Any]] = []
    while True:
        rounds.append(_round(pool, change, stalls, rng))
        d = decide_rounds(rounds, TOLERANCE, CONFIDENCE, MIN_ROUNDS, MAX_ROUNDS)
        if d.status != "CONTINUE":
            return d.status, d.rounds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--pools", default="pool-stack70.json,pool-stack350.json,pool-quiet-2026-11-28.json")
    args = parser.parse_args()
    summary: dict[str, Any] = {}
    for pool_file in args.pools.split(","):
        pool = [r for r in read_json(RESULTS / pool_file)["rounds"] if r.get("pin", "on") == "on"]
        sd = 100 * statistics.stdev(r["change_log"] for r in pool)
        steps = len(pool[0]["base_step_s"])
        print(
            f"{pool_file}: {len(pool)} pinned A/A rounds, {steps} steps, round sd {sd:.2f}%; "
            f"{args.trials} decisions per level"
        )
        rng = random.Random(0)
        rows = {}
        for label, change, stalls in LEVELS:
            counts = {"PASS": 0, "FAIL": 0, "UNKNOWN": 0}
            used = []
            for _ in range(args.trials):
                status, n = decision(pool, change, stalls, rng)
                counts[status] += 1
                used.append(n)
            rows[label] = {**counts, "median_rounds": statistics.median(used), "trials": args.trials}
            n = args.trials
            print(
                f"  {label:38s} FAIL {rate(counts['FAIL'], n)}  PASS {rate(counts['PASS'], n)}  UNKNOWN "
                f"{rate(counts['UNKNOWN'], n)}; median {statistics.median(used):g} rounds",
                flush=True,
            )
        summary[pool_file] = {"rounds": len(pool), "steps": steps, "round_sd_pct": sd, "levels": rows}
    write_json(RESULTS / "rule-v3.json", {"trials": args.trials, "rule": "v3", "pools": summary})


if __name__ == "__main__":
    main()
