"""What the sequential A/B layout costs on this CPU host, against interleaved, by real rounds.

    python benchmarks/ab_layouts.py [--rounds 12] [--detect 3] [--detect-seconds 150] [--extra 7]

1. Noise and cost. A/A rounds of the reference workload (gpt-tiny, ws=1) under both layouts
   (ab/runner.run_round, interleaved; ab/runner.run_sequential_round, one launch per side in A B | B A
   order), alternating the layout round by round, and which layout goes first in each pair, so that
   both see the same host. Steps per round as a gate run sets them (round_steps over a probe bench's
   step time). Per layout:
   - the round-to-round sd of the round figure (log(total A time / total B time), in percent, what the
     decision calls round_sd_pct), with its chi-square 95% interval;
   - wall seconds and CPU seconds per round: the children's CPU (torchrun and its ranks,
     getrusage(RUSAGE_CHILDREN) deltas) and this process's own (the turn coordinator's thread);
   - power per CPU-minute: the smallest slowdown detectable at 80% power (one-sided 5%) with one
     CPU-minute of rounds, (z_0.95 + z_0.80) x sd x sqrt(CPU-seconds per round / 60), per wall-minute
     likewise; and sequential / interleaved of it with a bootstrap 95% interval (rounds resampled
     within each layout).
2. Detection. Whole A/B decisions (the shipped rule: looks at 4, 6, 9, ... rounds, tolerance 5%) of
   a candidate with --extra residual Linear(128, 128) layers before gpt-tiny's blocks (about -10%
   tokens/s: the interleaved A/Bs measure it), each layout in turn, each decision with a budget of
   --detect-seconds: the FAIL rate (Wilson 95%), the rounds and the time it took.

The load average (os.getloadavg) is written before, after and at every round: the host is shared.
Results go to benchmarks/results/ab_layouts.json, rewritten after every round.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import rate, wilson, write_wider_gpt  # beside this script
from scipy import stats as scipy_stats

from benchgate.ab.round_plan import round_steps
from benchgate.ab.runner import Side, run_ab, run_round, run_sequential_round
from benchgate.config import RunConfig, load_config
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import stage_bench

RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "ab_layouts.json"
LAYOUTS = ("interleaved", "sequential")
# One-sided 5% test at 80% power, as the decision's MDE (ab/decision.py MDE_POWER): z_0.95 + z_0.80.
Z_SUM = float(scipy_stats.norm.ppf(0.95) + scipy_stats.norm.ppf(0.80))
BOOTSTRAP = 10_000


def checkout(root: Path, extra: int) -> Side:
    directory = root / f"extra{extra}"
    directory.mkdir(parents=True, exist_ok=True)
    write_wider_gpt(directory / "layoutwork.py", extra)
    return Side(f"gpt-tiny +{extra} layers", None, (directory,))


def settings(root: Path, workload: str, layout: str = "auto", **ab: Any) -> RunConfig:
    overrides: dict[str, Any] = {
        "bench.workload": workload,
        "bench.workload_args": {"size": "tiny"} if workload.startswith("benchgate.") else {},
        "bench.world_sizes": [1],
        "gate.baseline_dir": root / "baselines",
        "gate.ab.layout": layout,
        "tracking.enabled": False,
    }
    overrides.update({f"gate.ab.{k}": v for k, v in ab.items()})
    return load_config(overrides=overrides)


def measured(work: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """`work()`'s result, with the wall seconds and the CPU seconds it cost: its child processes'
    (reaped children only: torchrun waits for its ranks, stage_bench for torchrun) and this process's."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    result = work()
    wall = time.monotonic() - started
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_after = resource.getrusage(resource.RUSAGE_SELF)
    cost = {
        "wall_s": wall,
        "cpu_children_s": (children_after.ru_utime + children_after.ru_stime)
        - (children.ru_utime + children.ru_stime),
        "cpu_self_s": (own_after.ru_utime + own_after.ru_stime) - (own.ru_utime + own.ru_stime),
    }
    return result, cost


def counting_seconds(round_dir: Path) -> float | None:
    """FLOP counting time of a round's launches (rank 0 counts where it takes no turns: sequential)."""
    seconds = []
    for side in ("A", "B"):
        counting = read_json(round_dir / side / "metrics-ws1.json")["mfu"].get("counting") or {}
        if counting.get("seconds") is not None:
            seconds.append(float(counting["seconds"]))
    return sum(seconds) if seconds else None


def sd_interval(sd: float, n: int) -> tuple[float, float]:
    """Chi-square 95% interval of a standard deviation from n normal draws."""
    return (
        sd * math.sqrt((n - 1) / scipy_stats.chi2.ppf(0.975, n - 1)),
        sd * math.sqrt((n - 1) / scipy_stats.chi2.ppf(0.025, n - 1)),
    )


def mde_pct(sd_log: float, seconds_per_round: float, budget_s: float = 60.0) -> float:
    """Smallest slowdown (percent of tokens/s, small-change approximation) detectable at 80% power in
    `budget_s` seconds of rounds: (z_0.95 + z_0.80) x sd / sqrt(rounds in the budget)."""
    return 100.0 * Z_SUM * sd_log * math.sqrt(seconds_per_round / budget_s)


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    changes = [r["change_log"] for r in rounds]
    sd = statistics.stdev(changes)
    low, high = sd_interval(sd, len(changes))
    cpu = statistics.fmean(r["cpu_children_s"] for r in rounds)
    wall = statistics.fmean(r["wall_s"] for r in rounds)
    counting = _mean_or_none([r["counting_s"] for r in rounds])
    return {
        "rounds": len(rounds),
        "mean_change_pct": 100 * math.expm1(statistics.fmean(changes)),
        "round_sd_pct": 100 * sd,
        "round_sd_pct_ci95": [100 * low, 100 * high],
        "wall_s_per_round": wall,
        "cpu_children_s_per_round": cpu,
        "cpu_self_s_per_round": statistics.fmean(r["cpu_self_s"] for r in rounds),
        "counting_s_per_round": counting,
        "step_p50_ms": 1e3 * statistics.median(r["base_p50_s"] for r in rounds),
        "mde_pct_per_cpu_minute": mde_pct(sd, cpu),
        "mde_pct_per_wall_minute": mde_pct(sd, wall),
        # What the launches would cost without rank 0's FLOP count (the bench skips it only when it
        # takes turns, so every sequential launch counts): one thread, so its seconds are CPU-seconds.
        "mde_pct_per_cpu_minute_without_counting": mde_pct(sd, cpu - (counting or 0.0)),
    }


def _mean_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def cost_ratio(rounds: dict[str, list[dict[str, Any]]], key: str, seed: int = 0) -> dict[str, Any]:
    """sequential / interleaved of sd x sqrt(`key` seconds per round) (the MDE per minute of it), with
    a bootstrap 95% interval: each layout's rounds resampled with replacement."""

    def figure(sample: list[dict[str, Any]]) -> float:
        sd = statistics.stdev(r["change_log"] for r in sample)
        return float(sd * math.sqrt(statistics.fmean(r[key] for r in sample)))

    seq, inter = rounds["sequential"], rounds["interleaved"]
    rng = random.Random(seed)
    draws = []
    for _ in range(BOOTSTRAP):
        s = [rng.choice(seq) for _ in seq]
        i = [rng.choice(inter) for _ in inter]
        if statistics.stdev(r["change_log"] for r in i) > 0:
            draws.append(figure(s) / figure(i))
    draws.sort()
    return {
        "ratio": figure(seq) / figure(inter),
        "ci95": [draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]],
    }


def run_aa(args: argparse.Namespace, root: Path, report: dict[str, Any]) -> None:
    side = Side("gpt-tiny")
    config = settings(root, "benchgate.workloads.gpt:make_workload")
    probe = read_json(stage_bench(config, 1, root / "probe"))["samples"]["step_time_s"]
    step_s = statistics.median(probe)
    steps = round_steps(config, step_s)
    report["aa"] = {"probe_step_s": step_s, "steps_per_round": steps, "rounds": []}
    rounds: dict[str, list[dict[str, Any]]] = {layout: [] for layout in LAYOUTS}
    for i in range(1, args.rounds + 1):
        # Which layout goes first alternates too, so neither always follows the other.
        for layout in LAYOUTS if i % 2 else LAYOUTS[::-1]:
            round_dir = root / f"aa-{layout}{i}"
            if layout == "sequential":
                work = functools.partial(
                    run_sequential_round, config, 1, round_dir, side, side, None, i, steps
                )
            else:
                work = functools.partial(
                    run_round, config, 1, round_dir, side, side, None, seed=i, steps=steps
                )
            figures, cost = measured(work)
            entry = {
                "layout": layout,
                "index": i,
                "change_log": figures["change_log"],
                "base_p50_s": figures["base_p50_s"],
                "candidate_p50_s": figures["candidate_p50_s"],
                "first_side": figures.get("first_side"),
                "launch_s": [figures.get("base_launch_s"), figures.get("candidate_launch_s")],
                "counting_s": counting_seconds(round_dir),
                "loadavg_1min": os.getloadavg()[0],
                **cost,
            }
            rounds[layout].append(entry)
            report["aa"]["rounds"].append(entry)
            print(
                f"A/A round {i}/{args.rounds} {layout:11s}: {100 * math.expm1(entry['change_log']):+6.2f}%  "
                f"wall {cost['wall_s']:5.1f} s  CPU {cost['cpu_children_s']:5.1f} s  "
                f"load {entry['loadavg_1min']:.2f}",
                flush=True,
            )
            write_json(OUT, report)
    report["aa"]["layouts"] = {layout: summarize(rounds[layout]) for layout in LAYOUTS}
    report["aa"]["sequential_over_interleaved"] = {
        "mde_per_cpu_minute": cost_ratio(rounds, "cpu_children_s"),
        "mde_per_wall_minute": cost_ratio(rounds, "wall_s"),
    }
    report["aa"]["step_s"] = step_s
    write_json(OUT, report)


def run_detection(args: argparse.Namespace, root: Path, report: dict[str, Any]) -> None:
    base, candidate = checkout(root, 0), checkout(root, args.extra)
    probe_config = settings(root, "layoutwork:make_workload")
    probe = stage_bench(probe_config, 1, root / "probe-detect", source_paths=base.source_paths)
    step_s = statistics.median(read_json(probe)["samples"]["step_time_s"])
    trials: list[dict[str, Any]] = []
    report["detection"] = {"extra_layers": args.extra, "budget_s": args.detect_seconds, "trials": trials}
    for k in range(args.detect):
        for layout in LAYOUTS if k % 2 == 0 else LAYOUTS[::-1]:
            config = settings(root, "layoutwork:make_workload", layout, max_seconds=args.detect_seconds)
            out = root / f"detect-{layout}{k}"
            outcome, cost = measured(
                functools.partial(run_ab, config, 1, out, base, candidate, step_s=step_s)
            )
            d = outcome.decision
            trials.append(
                {
                    "layout": layout,
                    "status": d.status,
                    "rounds": d.rounds,
                    "change_pct": d.change_pct,
                    "ci_pct": [d.ci_low_pct, d.ci_high_pct],
                    "round_sd_pct": d.round_sd_pct,
                    "mde_pct": d.mde_pct,
                    "loadavg_1min": os.getloadavg()[0],
                    **cost,
                }
            )
            print(
                f"detect {k + 1}/{args.detect} {layout:11s}: {d.status} after {d.rounds} rounds, "
                f"{d.change_pct:+.2f}%, round sd {d.round_sd_pct}, {cost['wall_s']:.0f} s",
                flush=True,
            )
            write_json(OUT, report)
    summary = {}
    for layout in LAYOUTS:
        rows = [t for t in trials if t["layout"] == layout]
        fails = sum(t["status"] == "FAIL" for t in rows)
        summary[layout] = {
            "fail": fails,
            "trials": len(rows),
            "fail_rate_wilson95": list(wilson(fails, len(rows))),
            "statuses": [t["status"] for t in rows],
            "rounds": [t["rounds"] for t in rows],
            "seconds": [t["wall_s"] for t in rows],
        }
        print(f"  {layout}: FAIL {rate(fails, len(rows))}, rounds {summary[layout]['rounds']}")
    report["detection"]["layouts"] = summary
    write_json(OUT, report)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=12, help="A/A rounds per layout")
    parser.add_argument("--detect", type=int, default=3, help="-10%% A/B decisions per layout (0: none)")
    parser.add_argument("--detect-seconds", type=float, default=150.0, help="budget of each decision")
    parser.add_argument("--extra", type=int, default=7, help="extra layers of the detection's candidate")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    report: dict[str, Any] = {
        "command": "python benchmarks/ab_layouts.py " + " ".join(sys.argv[1:]),
        "host": {"cpus": os.cpu_count(), "loadavg_before": list(os.getloadavg())},
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run_aa(args, root, report)
        if args.detect:
            run_detection(args, root, report)
    report["host"]["loadavg_after"] = list(os.getloadavg())
    write_json(OUT, report)
    aa = report["aa"]
    for layout in LAYOUTS:
        s = aa["layouts"][layout]
        low, high = s["round_sd_pct_ci95"]
        print(
            f"{layout}: round sd {s['round_sd_pct']:.2f}% [{low:.2f}, {high:.2f}] over {s['rounds']} rounds; "
            f"{s['wall_s_per_round']:.1f} s wall and {s['cpu_children_s_per_round']:.1f} CPU-s per round; "
            f"MDE in one CPU-minute {s['mde_pct_per_cpu_minute']:.1f}%"
        )
    ratio = aa["sequential_over_interleaved"]["mde_per_cpu_minute"]
    print(f"sequential / interleaved, MDE per CPU-minute: {ratio['ratio']:.2f} {ratio['ci95']}")


if __name__ == "__main__":
    main()
