"""Whole A/B decisions on real rounds in the order they were recorded, each round used once.

    python benchmarks/recorded_decisions.py [--pools pool-quiet-100-2026-11-28.json,...]
                                            [--levels 0,-3,-7.5,-10] [--max-rounds N] [--max-seconds S]

benchmarks/rates.py resamples pools to measure the rule's error rates with their uncertainty; this
does not resample. It walks each pool's pinned A/A rounds (power.py record-pool: fresh interleaved
worker groups of identical code, every step kept) from the first to the last and lets the rule decide
as the runner does (ab/runner.run_ab): decide_rounds() after every round, the time budget ending where
the seconds the rounds really took, plus the slowest round so far, pass gate.ab.max_seconds. When a
decision ends, the next one starts on the next round, so no round serves two decisions and the
decisions are as independent as the rounds (lag-1 autocorrelation 0.07 over 200 rounds,
docs/benchmarks.md). The last rounds of a pool that end no decision are left out (said).

Levels: 0 is the A/A decision itself, uncentred: whatever bias the slots, the launch order or the host
give identical code is in it, as it would be in a real A/A. A slowdown of c% is planted exactly: each
round's candidate steps are scaled so its total time grows by 1/(1 + c), the rounds then decided as
recorded (the same round figure moved by log(1 + c), except where a step crosses the stall cap). Its
truth is therefore c plus the pool's own A/A bias, which is small beside the intervals; coverage is the
share of decisions whose printed interval holds c.

Counts come with Wilson 95% intervals; the number of decisions is what the pool's length allows.
Results: benchmarks/results/recorded-decisions-2026-11-28.json.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path
from typing import Any

from _common import wilson  # beside this script

from benchgate.ab.decision import decide_rounds, round_change
from benchgate.config import load_config
from benchgate.kit.files import read_json, write_json

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_POOLS = (
    "pool-quiet-100-2026-11-28.json,pool-quiet-2026-11-28.json,pool-hog-2026-11-28.json,"
    "pool-loaded-2026-11-28.json,pool-stack70.json,pool-stack350.json,pool-aa-*-block*-2026-11-28.json"
)


def planted(round_: dict[str, Any], change_pct: float, steps: int) -> dict[str, Any]:
    """The round with its candidate's first `steps` steps slowed by `change_pct` (tokens/s), uniformly."""
    grow = 1.0 / (1.0 + change_pct / 100.0)
    base, candidate = round_["base_step_s"][:steps], round_["candidate_step_s"][:steps]
    return {
        "base_step_s": base,
        "candidate_step_s": [t * grow for t in candidate],
        "seconds": round_["seconds"],
    }


def with_figure(round_: dict[str, Any]) -> dict[str, Any]:
    """The round with its figure as the runner computes it."""
    return {**round_, "change_log": round_change(round_["base_step_s"], round_["candidate_step_s"])}


def walk(
    rounds: list[dict[str, Any]],
    tolerance: float,
    confidence: float,
    min_rounds: int,
    max_rounds: int,
    max_s: float,
) -> tuple[list[dict[str, Any]], int]:
    """The decisions over `rounds` in order, as the runner takes them; and the rounds left over."""
    decisions, current = [], []
    for r in rounds:
        current.append(r)
        elapsed = sum(x["seconds"] for x in current)
        out_of_time = elapsed + max(x["seconds"] for x in current) > max_s
        d = decide_rounds(current, tolerance, confidence, min_rounds, max_rounds, out_of_time)
        if d.status != "CONTINUE":
            decisions.append({**d.to_dict(), "seconds": elapsed})
            current = []
    return decisions, len(current)


def summary(decisions: list[dict[str, Any]], truth_pct: float) -> dict[str, Any]:
    n = len(decisions)
    out: dict[str, Any] = {"decisions": n}
    for status in ("PASS", "FAIL", "UNKNOWN"):
        k = sum(d["status"] == status for d in decisions)
        out[status] = {"count": k, "share": k / n if n else None, "wilson95": wilson(k, n) if n else None}
    with_ci = [d for d in decisions if d["ci_low_pct"] is not None]
    covered = sum(d["ci_low_pct"] <= truth_pct <= d["ci_high_pct"] for d in with_ci)
    out["coverage"] = {
        "count": covered,
        "of": len(with_ci),
        "wilson95": wilson(covered, len(with_ci)) if with_ci else None,
    }
    out["median_rounds"] = statistics.median(d["rounds"] for d in decisions) if n else None
    out["median_seconds"] = statistics.median(d["seconds"] for d in decisions) if n else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pools", default=DEFAULT_POOLS, help="files (or patterns) under benchmarks/results")
    parser.add_argument("--levels", default="0,-3,-7.5,-10", help="planted tokens/s changes, percent")
    parser.add_argument("--max-rounds", type=int, help="gate.ab.max_rounds (default: the gate's)")
    parser.add_argument("--max-seconds", type=float, help="gate.ab.max_seconds (default: the gate's)")
    parser.add_argument("--out", default="recorded-decisions-2026-11-28.json")
    args = parser.parse_args()
    gate = load_config().gate
    tol, ab = gate.tolerances, gate.ab
    max_rounds, max_s = args.max_rounds or ab.max_rounds, args.max_seconds or ab.max_seconds
    rule = (tol.throughput_drop_pct, tol.confidence, ab.min_rounds, max_rounds, max_s)
    levels = [float(x) for x in args.levels.split(",")]
    report: dict[str, Any] = {
        "rule": dict(
            zip(("tolerance_pct", "confidence", "min_rounds", "max_rounds", "max_seconds"), rule, strict=True)
        ),
        "pools": {},
    }
    names = [p.name for spec in args.pools.split(",") for p in sorted(RESULTS.glob(spec))]
    for name in names:
        path = RESULTS / name
        data = read_json(path)
        rounds = [r for r in data["rounds"] if r.get("pin", "on") == "on"]
        step_s = statistics.median(t for r in rounds for t in r["base_step_s"])
        # The steps the gate's rule measures per round (ab.steps, at least ab.min_measured_s), at most
        # what the pool recorded.
        steps = min(len(rounds[0]["base_step_s"]), math.ceil(max(ab.steps, ab.min_measured_s / step_s)))
        loads = [r["loadavg_1m"] for r in rounds if "loadavg_1m" in r]
        entry: dict[str, Any] = {
            "condition": data.get("condition") or "not recorded",
            "rounds": len(rounds),
            "steps_per_round": steps,
            "loadavg_1m_median": statistics.median(loads) if loads else None,
            "round_seconds_median": statistics.median(r["seconds"] for r in rounds),
            "levels": {},
        }
        for level in levels:
            moved = [with_figure(planted(r, level, steps)) for r in rounds]
            decisions, left = walk(moved, *rule)
            entry["levels"][f"{level:g}%"] = {
                **summary(decisions, level),
                "rounds_left_over": left,
                "each": decisions,
            }
            s = entry["levels"][f"{level:g}%"]
            print(
                f"{name} ({entry['condition']}), {level:+g}%: {_line(s)}; {left} rounds left over", flush=True
            )
        report["pools"][name] = entry
    report["by_condition"] = totals(report["pools"])
    write_json(RESULTS / args.out, report)  # an absolute --out is kept as given
    print(f"written to {RESULTS / args.out}")


def totals(pools: dict[str, Any]) -> dict[str, Any]:
    """Every level's decisions over all pools of one condition, and over all pools."""
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for entry in pools.values():
        for condition in (entry["condition"], "all"):
            for level, cell in entry["levels"].items():
                groups.setdefault(condition, {}).setdefault(level, []).extend(cell["each"])
    out: dict[str, Any] = {}
    for condition, levels in groups.items():
        out[condition] = {}
        for level, decisions in levels.items():
            out[condition][level] = summary(decisions, float(level.rstrip("%")))
            print(f"{condition}, {level}: {_line(out[condition][level])}")
    return out


def _line(s: dict[str, Any]) -> str:
    if not s["decisions"]:
        return "no decision ended"
    fail, unknown, cover = s["FAIL"], s["UNKNOWN"], s["coverage"]
    return (
        f"{s['decisions']} decisions: PASS {s['PASS']['count']}, "
        f"FAIL {fail['count']} {_ci(fail['wilson95'])}, "
        f"UNKNOWN {unknown['count']} {_ci(unknown['wilson95'])}; "
        f"coverage {cover['count']}/{cover['of']}; "
        f"median {s['median_rounds']} rounds, {s['median_seconds']:.0f} s"
    )


def _ci(interval: tuple[float, float] | None) -> str:
    return "" if interval is None else f"[{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]%"


if __name__ == "__main__":
    main()
