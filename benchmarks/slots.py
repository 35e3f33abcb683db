"""Balanced slots: is either side of an A/A round measured faster for the slot it holds?

Before each round drew which side launches first (ab/round_plan.launch_order), the base always launched
first. `pools` reads the A/A rounds recorded then (benchmarks/results: pool-*.json, aa-rounds.json; every
round's base launched first) and gives each set's mean change of the candidate's slot against the base's,
and all sets together (inverse-variance weighted). `rounds` runs new interleaved A/A rounds of the
layer-stack workload of benchmarks/power.py, with the first launch drawn per round, and gives the mean
change by which side launched first, and over all rounds (the slot effect that remains in a decision).

    python benchmarks/slots.py pools
    python benchmarks/slots.py rounds [--rounds 40] [--layers 100] [--steps 90]
    python benchmarks/slots.py recorded [--pools pool-quiet-100-2026-11-28.json,...]

`recorded` does the same analysis as `rounds` on pools of `power.py record-pool` recorded with the first
launch drawn per round (their rounds carry `base_launched_first`).

Changes are the round figure (ab/decision.round_change) in percent, candidate's tokens/s against the
base's: negative where the candidate's slot is slower. Intervals are t 95% over rounds; results go to
benchmarks/results/slots.json.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scipy import stats as scipy_stats

from benchgate.ab.runner import run_round
from benchgate.kit.files import read_json, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import base_config  # beside this script
from power import checkout

RESULTS = Path(__file__).resolve().parent / "results"


def summary(changes_log: list[float]) -> dict[str, Any]:
    """Mean of round figures (log) in percent, with a t 95% interval and the rounds behind it."""
    n = len(changes_log)
    mean = statistics.fmean(changes_log)
    se = statistics.stdev(changes_log) / math.sqrt(n) if n > 1 else math.inf
    t = float(scipy_stats.t.ppf(0.975, n - 1)) if n > 1 else math.inf
    return {
        "rounds": n,
        "mean_pct": 100 * math.expm1(mean),
        "low_pct": 100 * math.expm1(mean - t * se),
        "high_pct": 100 * math.expm1(mean + t * se),
        "se_pct": 100 * se,
    }


def line(name: str, s: dict[str, Any]) -> str:
    return (
        f"{name}: {s['mean_pct']:+.2f}% [{s['low_pct']:+.2f}, {s['high_pct']:+.2f}] "
        f"(t 95%, {s['rounds']} rounds, se {s['se_pct']:.2f}%)"
    )


def recorded_sets() -> dict[str, list[float]]:
    """The recorded A/A rounds' figures, one set per pool file and pinning setting."""
    sets: dict[str, list[float]] = {}
    for path in sorted([*RESULTS.glob("pool-*.json"), RESULTS / "aa-rounds.json"]):
        for r in read_json(path).get("rounds", []):
            if "change_log" in r and "base_launched_first" not in r:  # recorded before the draw
                sets.setdefault(f"{path.stem} pin {r.get('pin', 'on')}", []).append(float(r["change_log"]))
    return sets


def cmd_pools(_: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {}
    weights = means = 0.0
    for name, changes in recorded_sets().items():
        s = summary(changes)
        report[name] = s
        print(line(f"{name} (base launched first)", s))
        w = 1 / (s["se_pct"] / 100) ** 2
        weights += w
        means += w * statistics.fmean(changes)
    pooled, se = means / weights, 1 / math.sqrt(weights)
    report["all sets"] = {
        "mean_pct": 100 * math.expm1(pooled),
        "se_pct": 100 * se,
        "z": pooled / se,
        "sets": len(report),
    }
    print(
        f"all {len(report) - 1} sets, inverse-variance weighted: {100 * math.expm1(pooled):+.2f}% "
        f"± {196 * se:.2f} (z = {pooled / se:+.1f})"
    )
    return {"pools": report}


def cmd_rounds(args: argparse.Namespace) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        side = checkout(root, "stack", 0, args.layers)
        config = base_config(root, ab={"steps": args.steps})
        for i in range(args.rounds):
            started = time.monotonic()
            figures = run_round(config, 1, root / f"r{i}", side, side, None, seed=args.seed + i)
            rounds.append(
                {k: figures[k] for k in ("change_log", "base_launched_first", "base_first", "seconds")}
            )
            first = "base" if figures["base_launched_first"] else "candidate"
            # Saved after every round: on a loaded host a round can take most of a minute.
            write_json(RESULTS / f"{Path(args.out).stem}-partial.json", {"rounds": rounds})
            print(
                f"round {i + 1}/{args.rounds}: {first} launched first, change "
                f"{100 * math.expm1(figures['change_log']):+.2f}% ({time.monotonic() - started:.1f} s)",
                flush=True,
            )
    report: dict[str, Any] = {"layers": args.layers, "steps": args.steps, "rounds": rounds}
    return {"new_rounds": {**report, **by_launch_order(rounds)}}


def by_launch_order(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean change of rounds by which side launched first, and over all of them."""
    by_first = {
        name: [r["change_log"] for r in rounds if r["base_launched_first"] == flag]
        for name, flag in (("base launched first", True), ("candidate launched first", False))
    }
    report: dict[str, Any] = {}
    for name, changes in [*by_first.items(), ("all rounds", [r["change_log"] for r in rounds])]:
        if len(changes) > 1:
            report[name] = summary(changes)
            print(line(name, report[name]))
    return report


def cmd_recorded(args: argparse.Namespace) -> dict[str, Any]:
    """Pools recorded with the first launch drawn per round (power.py record-pool since v3), together."""
    rounds = [
        r
        for name in args.pools.split(",")
        for r in read_json(RESULTS / name)["rounds"]
        if "base_launched_first" in r and r.get("pin", "on") == "on"
    ]
    print(f"{len(rounds)} pinned A/A rounds of {args.pools}")
    return {"recorded_with_drawn_order": {"pools": args.pools, **by_launch_order(rounds)}}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("pools")
    rounds = sub.add_parser("rounds")
    rounds.add_argument("--rounds", type=int, default=40)
    rounds.add_argument("--layers", type=int, default=100)
    rounds.add_argument("--steps", type=int, default=90)
    rounds.add_argument("--seed", type=int, default=1)
    rounds.add_argument("--out", default="slots.json", help="under benchmarks/results")
    recorded = sub.add_parser("recorded")
    recorded.add_argument("--pools", default="pool-quiet-100-2026-11-28.json,pool-hog-2026-11-28.json")
    args = parser.parse_args()
    commands = {"pools": cmd_pools, "rounds": cmd_rounds, "recorded": cmd_recorded}
    result = commands[args.command](args)
    path = RESULTS / args.out if args.command == "rounds" else RESULTS / "slots.json"
    saved = read_json(path) if path.is_file() else {}
    write_json(path, {**saved, **result})


if __name__ == "__main__":
    main()
