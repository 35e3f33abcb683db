"""Change points on synthetic histories: precision, recall and false change points of the shipped method
(history/changes.py), against a per-commit threshold rule at the same false-alarm rate.

    python benchmarks/changes.py [--histories 200] [--runs 60] [--alpha A]

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

from benchgate.history.changes import ALPHA, change_points
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


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=200)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--alpha", type=float, default=ALPHA, help="significance level (default: shipped)")
    args = parser.parse_args(argv)
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
