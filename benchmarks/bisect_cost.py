"""What `benchgate bisect` costs: A/B decisions, rounds and wall time per step, on the 12-commit history
the tests bisect (tests/support/stack_repo.py: 12 equal layers, commit 7 doubles them, the later
ones keep 24).

    python benchmarks/bisect_cost.py [--trials N] [--tolerance PCT] [--steps N] [--min-rounds N]
                                     [--max-rounds N]

Each trial builds the repository in a temporary directory and runs the CLI there exactly as a user
would (`benchgate bisect --good <commit 0> --bad main --no-tracking`), with the small A/B rounds of
tests/ranges/test_bisect.py by default (tolerance 30%, gate.ab steps 60, warmup 2, min_measured_s 0,
rounds 2..3). It prints every step (the commit, the decision, the rounds, the wall time) and the
totals, with the host's load average before and after: a round is two torchrun launches, whose
start-up dominates it and grows with whatever else the host runs.
Writes benchmarks/results/bisect_cost.json.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchgate.kit.files import read_json, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))
from stack_repo import git, stack_history  # noqa: E402 - the tests' repository builder

RESULTS = Path(__file__).parent / "results"
CULPRIT = 7
LAYERS = [12] * CULPRIT + [24] * (12 - CULPRIT)


def config_text(tolerance_pct: float, steps: int, min_rounds: int, max_rounds: int) -> str:
    return (
        f"[gate.tolerances]\nthroughput_drop_pct = {tolerance_pct}\n"
        f"[gate.ab]\nsteps = {steps}\nwarmup = 2\nmin_measured_s = 0\n"
        f"min_rounds = {min_rounds}\nmax_rounds = {max_rounds}\n"
    )


def trial(config: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bisect-cost-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "ci@example.com")
        git(repo, "config", "user.name", "CI")
        (repo / ".gitignore").write_text("out*/\n.benchgate/\n*.toml\n")
        (repo / "bisect.toml").write_text(config)
        commits = stack_history(repo, LAYERS)
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable, "-m", "benchgate", "bisect", "--good", commits[0], "--bad", "main",
                "--workload", "stackwork:make_workload", "--config", "bisect.toml", "--out", "out-bisect",
                "--no-tracking",
            ],
            cwd=repo,
            capture_output=True,
            text=True,
        )  # fmt: skip
        wall = time.perf_counter() - started
        if done.returncode not in (0, 1, 4):
            sys.exit(f"benchgate bisect failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        record = read_json(repo / "out-bisect" / "bisect.json")
        index = {sha: i for i, sha in enumerate(commits)}
        steps = [
            {
                "step": s["step"],
                "role": s["role"],
                "commit": index[s["candidate"]],
                "base": index[s["base"]],
                "status": s["decision"]["status"],
                "change_pct": s["decision"]["change_pct"],
                "rounds": s["decision"]["rounds"],
                "more_rounds": s["more_rounds"],
                "seconds": s["seconds"],
                "round_seconds": [
                    r["seconds"] for r in read_json(repo / "out-bisect" / s["ab_json"])["rounds"]
                ],
            }
            for s in record["steps"]
        ]
        culprit = (record.get("culprit") or {}).get("sha")
        return {
            "exit_code": done.returncode,
            "culprit_index": index.get(culprit) if culprit else None,
            "decisions": len(steps),
            "max_decisions": record["max_decisions"],
            "rounds": sum(s["rounds"] for s in steps),
            "wall_s": wall,
            "bisect_s": record["seconds"],
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "steps": steps,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--tolerance", type=float, default=30.0, help="gate.tolerances.throughput_drop_pct")
    parser.add_argument("--steps", type=int, default=60, help="gate.ab.steps: measured steps a side a round")
    parser.add_argument("--min-rounds", type=int, default=2)
    parser.add_argument("--max-rounds", type=int, default=3)
    args = parser.parse_args()
    config = config_text(args.tolerance, args.steps, args.min_rounds, args.max_rounds)
    bound = math.ceil(math.log2(len(LAYERS) - 1)) + 2
    print(f"12 commits, culprit commit {CULPRIT}; range of 11 commits: at most {bound} decisions")
    rounds = f"{args.min_rounds}..{args.max_rounds}"
    print(
        f"A/B: tolerance {args.tolerance:g}%, {args.steps} steps a side, rounds {rounds} (twice the budget "
        "once after an UNKNOWN)"
    )
    trials = []
    for number in range(1, args.trials + 1):
        result = trial(config)
        trials.append(result)
        print(
            f"\ntrial {number}: exit {result['exit_code']}, culprit commit {result['culprit_index']}, "
            f"{result['decisions']} decisions, {result['rounds']} rounds, {result['wall_s']:.1f} s wall "
            f"(load average {result['load_before']:.1f} before, {result['load_after']:.1f} after)"
        )
        print("  step  role     commit vs  status   change   rounds  seconds  s/round  round s")
        for s in result["steps"]:
            more = " (+more)" if s["more_rounds"] else ""
            per_round = s["seconds"] / s["rounds"]
            change = f"{s['change_pct']:+.1f}%" if s["change_pct"] is not None else "-"
            print(
                f"  {s['step']:>4}  {s['role']:<8} {s['commit']:>6} {s['base']:>2}  {s['status']:<8} "
                f"{change:>7}  {s['rounds']:>6}  {s['seconds']:>7.1f}  {per_round:>7.1f}  "
                f"{' '.join(f'{r:.1f}' for r in s['round_seconds'])}{more}"
            )
    walls = [t["wall_s"] for t in trials]
    found = sum(t["culprit_index"] == CULPRIT for t in trials)
    print(
        f"\n{len(trials)} trial(s): culprit found in {found}; decisions "
        f"{statistics.mean(t['decisions'] for t in trials):.1f} (max {max(t['decisions'] for t in trials)}, "
        f"bound {bound}); rounds {statistics.mean(t['rounds'] for t in trials):.1f}; wall median "
        f"{statistics.median(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f}); seconds per round "
        f"{sum(walls) / sum(t['rounds'] for t in trials):.1f}"
    )
    write_json(
        RESULTS / "bisect_cost.json",
        {"config": config, "bound": bound, "cores": os.cpu_count(), "trials": trials},
    )


if __name__ == "__main__":
    main()
