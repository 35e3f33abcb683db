"""The bench and the A/B time the same thing: a host-side slowdown moves both alike.

A candidate whose batch costs `--host-ms` more host time (a sleep in make_batch: nothing on the device)
against the same workload without it, both `sleepy` steps of 20 ms (tests/support/bg_test_workloads.py),
windows of `--sync-every` steps (bench.sync_every; on CUDA a device synchronise ends each). Per trial, side by
side in one run: the change of the bench's tokens/s p50 (a launch of each side, base first in odd
trials) and the A/B's estimate (rounds of turns of one window each). Prints both and their difference.

    python benchmarks/same_clock.py [--trials 3] [--host-ms 6] [--sync-every 3]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The sleepy workload, for the workers too (PYTHONPATH below).
sys.path.insert(0, str(REPO / "tests" / "support"))

from benchgate.ab.runner import Side, run_ab  # noqa: E402
from benchgate.config import parse_config  # noqa: E402
from benchgate.kit.files import read_json, write_json  # noqa: E402
from benchgate.measure.launch import stage_bench  # noqa: E402

HOST_WORK = """
import time

from bg_test_workloads import Sleepy


class HostSide(Sleepy):
    name = "host-side"

    def make_batch(self, generator, device):
        time.sleep({host_ms} / 1000)
        return super().make_batch(generator, device)


def make_workload():
    return HostSide(step_ms=20.0)
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--host-ms", type=float, default=6.0)
    parser.add_argument("--sync-every", type=int, default=3)
    args = parser.parse_args()
    import os

    support = str(REPO / "tests" / "support")
    os.environ["PYTHONPATH"] = os.pathsep.join([support, os.environ.get("PYTHONPATH", "")])
    work = Path(tempfile.mkdtemp(prefix="bg-same-clock-"))
    sides = {}
    for name, ms in (("base", 0.0), ("candidate", args.host_ms)):
        (work / name).mkdir()
        (work / name / "hostwork.py").write_text(HOST_WORK.format(host_ms=ms), encoding="utf-8")
        sides[name] = work / name
    config = parse_config(
        {
            "bench": {"workload": "hostwork:make_workload", "steps": 30, "warmup": 3, "world_sizes": [1],
                      "sync_every": args.sync_every},
            "gate": {
                "ab": {"steps": 30, "warmup": 3, "min_measured_s": 0.0, "min_rounds": 4, "max_rounds": 4}
            },
            "tracking": {"enabled": False},
        }
    )  # fmt: skip
    trials = []
    for trial in range(args.trials):
        rates = {}
        order = ("base", "candidate") if trial % 2 == 0 else ("candidate", "base")
        for name in order:
            out = work / f"t{trial}-{name}"
            metrics = read_json(stage_bench(config, 1, out, source_paths=(sides[name],)))
            rates[name] = metrics["tokens_per_s"]["p50"]
        bench_pct = 100 * (rates["candidate"] / rates["base"] - 1)
        outcome = run_ab(
            config, 1, work / f"t{trial}-ab", Side("base", None, (sides["base"],)),
            Side("candidate", None, (sides["candidate"],)),
        )  # fmt: skip
        ab_pct = 100 * math.expm1(statistics.fmean(r["change_log"] for r in outcome.rounds))
        trials.append({"bench_pct": bench_pct, "ab_pct": ab_pct, "difference_points": ab_pct - bench_pct})
        difference = ab_pct - bench_pct
        print(f"trial {trial + 1}: bench {bench_pct:+.1f}%  A/B {ab_pct:+.1f}%  difference {difference:+.1f}")
    expected = -100 * args.host_ms / (20.0 + args.host_ms)
    differences = [t["difference_points"] for t in trials]
    print(
        f"expected about {expected:+.1f}% (sleeps alone); difference A/B - bench: mean "
        f"{statistics.fmean(differences):+.2f} points, "
        f"range {min(differences):+.1f} to {max(differences):+.1f}"
    )
    write_json(
        REPO / "benchmarks" / "results" / "same_clock.json",
        {"host_ms": args.host_ms, "sync_every": args.sync_every, "expected_pct": expected, "trials": trials,
         "loadavg": os.getloadavg()},
    )  # fmt: skip
    print(json.dumps({"trials": len(trials)}))


if __name__ == "__main__":
    main()
