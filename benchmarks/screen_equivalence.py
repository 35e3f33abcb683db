"""The stored-baseline screen before and after a change to its arithmetic: same decisions, same error rates.

    python benchmarks/screen_equivalence.py [--base-rev 0fb151e] [--trials 10000] [--history 5]

Runs are resampled from the recorded real A/A rounds (benchmarks/results/aa-rounds.json: each round is a
base and a candidate launch of the same code on this host, their p50 step times). A trial draws
`--history` rounds whose base launches are the profile's earlier baselines, and one more round whose base
launch is the stored baseline and whose candidate launch is the run under test, slowed by the shift.
Both versions of `verdict/screen.py` (the one at `--base-rev`, read from git, and the working tree's)
decide every trial; the script counts how often they differ and prints each version's FAIL / PASS /
UNKNOWN rates per shift with Wilson 95% intervals.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from benchgate.checks import screen as current_screen
from benchgate.config import Tolerances
from benchgate.kit.files import read_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, rate  # beside this script

SHIFTS = (0.0, -3.0, -5.0, -7.5, -10.0, -20.0)


def screen_at(rev: str, where: Path) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{rev}:src/benchgate/verdict/screen.py"], capture_output=True, text=True, check=True
    ).stdout
    path = where / f"screen_{rev}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"screen_{rev}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-rev", default="0fb151e")
    parser.add_argument("--trials", type=int, default=10000)
    parser.add_argument("--history", type=int, default=5)
    args = parser.parse_args()
    rounds = read_json(RESULTS / "aa-rounds.json")["rounds"]
    tol = Tolerances()
    with tempfile.TemporaryDirectory() as tmp:
        before = screen_at(args.base_rev, Path(tmp))
        rng = random.Random(0)
        print(
            f"{len(rounds)} recorded A/A rounds; {args.trials} trials per shift; {args.history} earlier "
            f"baselines; tolerance {tol.throughput_drop_pct}%, confidence {tol.confidence}"
        )
        differ = 0
        for shift_pct in SHIFTS:
            counts: dict[str, dict[str, int]] = {"before": {}, "after": {}}
            for _ in range(args.trials):
                *past, now = rng.sample(rounds, args.history + 1)
                history = [{"step_time_s": r["base_p50_s"]} for r in past]
                base = {"step_time_s": [now["base_p50_s"]] * 2}
                # tokens/s changed by shift_pct: the step time is divided by (1 + shift).
                slowed = now["candidate_p50_s"] / (1 + shift_pct / 100)
                current = {"step_time_s": [slowed] * 2}
                decisions = {}
                for name, module in (("before", before), ("after", current_screen)):
                    status = module.screen(
                        base, current, history, tol.throughput_drop_pct, tol.confidence
                    ).status
                    counts[name][status] = counts[name].get(status, 0) + 1
                    decisions[name] = status
                differ += decisions["before"] != decisions["after"]
            for name in ("before", "after"):
                c = counts[name]
                print(
                    f"  {shift_pct:+5.1f}% {name:6}: FAIL {rate(c.get('FAIL', 0), args.trials)}, "
                    f"PASS {rate(c.get('PASS', 0), args.trials)}, "
                    f"UNKNOWN {rate(c.get('UNKNOWN', 0), args.trials)}"
                )
        print(f"decisions that differ between the two versions: {differ} of {args.trials * len(SHIFTS)}")


if __name__ == "__main__":
    main()
