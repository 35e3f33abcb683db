"""Change points on synthetic histories: precision, recall and false change points of the shipped method
(history/changes.py), against a per-commit threshold rule at the same false-alarm rate.

    python benchmarks/changes.py [--histories 200] [--runs 60] [--alpha A]
    python benchmarks/changes.py --check-alarms [--histories 500] [--runs 60] [--noise 1.0]

For each noise level, `--histories` histories of `--runs` runs of tokens/s: a third with no shift, a
third with one, a third with two (each 2% to 10%, up or down, at least 5 runs from an end and from each
other), with log-normal run-to-run noise:

- this host: the sd of one launch, from the back-to-back launches of identical code that
  `benchmarks/noise.py` recorded (benchmarks/results/noise-gpt-tiny.json: sd of paired differences / sqrt 2);
- a quiet GPU node: 1% (no GPU here: an assumed figure, the order of run-to-run spreads reported for
  dedicated accelerators; the row shows what the method does at such a noise, not what a node gives).

A change point counts as found when one is reported within +-1 run of it. The threshold rule flags
run i when |log(x_i / x_{i-1})| exceeds a threshold (a per-commit gate against the previous run), set so
that its false flags per 100 runs on the no-shift histories match the method's (or 1 per 100 runs, the
target, where the method had none). Writes benchmarks/results/changes.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from benchgate.history.changes import ALPHA, change_points, floor_pct
from benchgate.kit.files import read_json, write_json

RESULTS = Path(__file__).parent / "results"
SIZE_BINS = ((2.0, 4.0), (4.0, 7.0), (7.0, 10.0))
TARGET_FALSE_PER_100 = 1.0


def host_noise_pct() -> float:
    recorded = read_json(RESULTS / "noise-gpt-tiny.json")["gpt-tiny"]
    return float(recorded["back_to_back_sd_pct"]) / math.sqrt(2)


def history(
    rng: np.random.Generator, runs: int, shifts: int, noise_pct: float
) -> tuple[list[float], list[tuple[int, float]]]:
    """A history and its true changes [(first run at the new level, change %)]."""
    while True:
        at = sorted(int(i) for i in rng.integers(5, runs - 5, shifts))
        if all(b - a >= 5 for a, b in itertools.pairwise(at)):
            break
    sizes = [float(rng.uniform(2.0, 10.0) * rng.choice([-1, 1])) for _ in at]
    level = np.zeros(runs)
    for index, pct in zip(at, sizes, strict=True):
        level[index:] += math.log1p(pct / 100)
    values = 1000.0 * np.exp(level + rng.normal(0.0, noise_pct / 100, runs))
    return list(values), list(zip(at, sizes, strict=True))


def threshold_flags(values: list[float], threshold: float) -> list[int]:
    logs = np.log(values)
    return [i for i in range(1, len(values)) if abs(logs[i] - logs[i - 1]) > threshold]


def score(found: list[list[int]], truth: list[list[tuple[int, float]]]) -> dict[str, object]:
    """Precision and recall within +-1 run, recall per size bin, false points per 100 runs on no-shift."""
    hits = reported = true_found = true_total = 0
    per_bin = {f"{lo:g}-{hi:g}%": [0, 0] for lo, hi in SIZE_BINS}
    for points, changes in zip(found, truth, strict=True):
        reported += len(points)
        hits += sum(any(abs(p - i) <= 1 for i, _ in changes) for p in points)
        for index, pct in changes:
            ok = any(abs(p - index) <= 1 for p in points)
            true_found += ok
            true_total += 1
            for lo, hi in SIZE_BINS:
                if lo <= abs(pct) <= hi:
                    per_bin[f"{lo:g}-{hi:g}%"][0] += ok
                    per_bin[f"{lo:g}-{hi:g}%"][1] += 1
                    break
    return {
        "precision_pct": 100 * hits / reported if reported else None,
        "recall_pct": 100 * true_found / true_total if true_total else None,
        "recall_by_size": {k: f"{v[0]}/{v[1]}" for k, v in per_bin.items()},
    }


def false_per_100(found: list[list[int]], truth: list[list[tuple[int, float]]], runs: int) -> float:
    level = [points for points, changes in zip(found, truth, strict=True) if not changes]
    return 100 * sum(len(p) for p in level) / (runs * len(level))


def calibrated_threshold(
    histories: list[list[float]], truth: list[list[tuple[int, float]]], rate: float, runs: int
) -> float:
    """The smallest threshold whose false flags per 100 runs on the no-shift histories is at most `rate`."""
    steps = sorted(
        abs(b - a)
        for values, changes in zip(histories, truth, strict=True)
        if not changes
        for a, b in itertools.pairwise(np.log(values))
    )
    level_runs = runs * sum(1 for changes in truth if not changes)
    allowed = int(rate * level_runs / 100)
    return float(steps[len(steps) - allowed - 1]) if allowed < len(steps) else 0.0


def ar1_history(rng: np.random.Generator, runs: int, phi: float, noise_pct: float) -> list[float]:
    """A history of unchanged code whose runs are AR(1): a slow host stays slow for a while."""
    x = np.zeros(runs)
    shocks = rng.normal(0.0, noise_pct / 100, runs) * math.sqrt(1 - phi * phi)  # stationary sd = noise
    for i in range(runs):
        x[i] = (phi * x[i - 1] if i else shocks[0] / math.sqrt(1 - phi * phi)) + shocks[i]
    return list(1000.0 * np.exp(x))


def check_alarms(args: argparse.Namespace) -> None:
    """False alarms per 100 `history --check`s on AR(1) histories of unchanged code (phi 0, 0.3, 0.6).

    Each history is checked once, at a random length from --runs/2 to --runs (a check after a run, as a
    nightly schedule does): an alarm is a regression (a drop of tokens/s beyond the floor) that starts
    in the newest 10 runs and is new with the newest run (cli/history.new_changes: found over all runs,
    not without the newest), as `--check --new 1` reports it; beside it the old rule (any such regression
    in the newest 10 runs, re-tested every check). One check per history keeps the checks independent,
    so the Wilson interval holds."""
    from _common import wilson  # beside this script

    floor = floor_pct(5.0)  # tokens/s at the shipped tolerance
    rows = []
    for phi in (0.0, 0.3, 0.6):
        rng = np.random.default_rng(20261124 + int(10 * phi))
        new_alarms = old_alarms = 0
        for _ in range(args.histories):
            length = int(rng.integers(args.runs // 2, args.runs + 1))
            values = ar1_history(rng, length, phi, args.noise)
            now = [p for p in change_points(values, min_change_pct=floor) if p.change_pct < 0]
            recent = [p for p in now if p.index >= length - 10]
            before = {p.index for p in change_points(values[:-1], min_change_pct=floor) if p.change_pct < 0}
            old_alarms += bool(recent)
            new_alarms += any(p.index not in before for p in recent)
        n = args.histories
        row = {"phi": phi, "checks": n, "noise_sd_pct": args.noise, "floor_pct": floor}
        for name, count in (("new_per_100_checks", new_alarms), ("retest_per_100_checks", old_alarms)):
            low, high = wilson(count, n)
            row[name] = {"alarms": count, "rate": 100 * count / n, "wilson95": [100 * low, 100 * high]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    write_json(RESULTS / f"changes-check-noise{args.noise:g}.json", {"rows": rows, "runs": args.runs})


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=200)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--alpha", type=float, default=ALPHA, help="significance level (default: shipped)")
    parser.add_argument("--check-alarms", action="store_true", help="false alarms per 100 --check (AR(1))")
    parser.add_argument("--noise", type=float, default=1.0, help="--check-alarms: run-to-run sd, percent")
    args = parser.parse_args(argv)
    if args.check_alarms:
        check_alarms(args)
        return
    rows = []
    for name, noise in (("this host", host_noise_pct()), ("quiet GPU node (assumed)", 1.0)):
        rng = np.random.default_rng(20261124)
        histories, truth = [], []
        for i in range(args.histories):
            values, changes = history(rng, args.runs, i % 3, noise)
            histories.append(values)
            truth.append(changes)
        started = time.perf_counter()
        found = [[p.index for p in change_points(v, alpha=args.alpha)] for v in histories]
        seconds = time.perf_counter() - started
        method_false = false_per_100(found, truth, args.runs)
        rate = method_false if method_false > 0 else TARGET_FALSE_PER_100
        threshold = calibrated_threshold(histories, truth, rate, args.runs)
        flagged = [threshold_flags(v, threshold) for v in histories]
        row = {
            "noise": name,
            "noise_sd_pct": round(noise, 2),
            "alpha": args.alpha,
            "histories": args.histories,
            "runs": args.runs,
            "seconds_per_history": seconds / args.histories,
            "change_points": score(found, truth) | {"false_per_100_runs": method_false},
            "threshold_rule": score(flagged, truth)
            | {
                "false_per_100_runs": false_per_100(flagged, truth, args.runs),
                "threshold_pct": 100 * math.expm1(threshold),
            },
        }
        rows.append(row)
        print(json.dumps(row, indent=1), flush=True)
    write_json(RESULTS / "changes.json", {"rows": rows})


if __name__ == "__main__":
    main(sys.argv[1:])
