"""Error rates of the creep row ("tokens/s since anchor", benchgate/checks/creep.py), by resampling real runs.

    python benchmarks/power.py creep [--trials 10000] [--pools pool-stack70.json,...] [--history 3,10]

The pools of `power.py record-pool` hold real A/A rounds of identical code with every step kept; each
side of a round is a launch of its own. A trial draws distinct pinned rounds and one side of each: the
anchor, the candidate, and HISTORY earlier baseline runs (the store's history.json, whose spread is the
noise the row is judged by). The candidate's steps are slowed by the cumulative change as `power.py
resample` slows them (`_inject`, every step alike), the runs measure the steps the gate measures
(bench.steps, at most what the pool recorded), and `creep_check` decides at the shipped tolerance and
confidence: FAIL, PASS or INFO. The pools time no drift reference, so the raw figure decides.

Different rounds, not the two sides of one round: an anchor is a launch from long before the candidate,
and the two sides of one round ran side by side, closer in time and speed than an anchor ever is.

The row as shipped (ab/creep_ab.py): a screen FAIL leads to an interleaved A/B of the anchor's commit
against the run, and only the A/B's FAIL fails. In the same trial, after the screen's draw, the A/B's
rounds are resampled from the pool's A/A rounds (with replacement, each round's sides swapped at random:
A/A rounds are symmetric), cut to the steps an A/B round measures (ab/round_plan.round_steps), the
candidate's steps slowed by the level as above, and decided look by look by ab/decision.decide at the
shipped tolerance, confidence and looks until it says FAIL, PASS or UNKNOWN. Each A/B launches both
sides afresh, so its rounds share nothing with the screen's launches. Two rates per level:

    screen      the screen-only row (FAIL / PASS / INFO), as before
    ab          the A/B alone on every trial (what the row would be if every run were A/B'd)
    shipped     FAIL only where the screen says FAIL and then the A/B says FAIL; INFO where the A/B is
                UNKNOWN; the shipped creep row's false FAIL is this at 0% (target <= 1%)

Results go to benchmarks/results/creep.json; rates come with Wilson 95% intervals and the trial count.
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path
from typing import Any

from _common import RESULTS, base_config, inject_slowdown, rate  # beside this script

from benchgate.ab.decision import decide, look_rounds, round_change
from benchgate.ab.round_plan import round_steps
from benchgate.checks.creep import creep_check
from benchgate.config import RunConfig
from benchgate.kit.files import read_json, write_json
from benchgate.results.figures import mean_step_time

# Cumulative tokens/s change since the anchor: unchanged code, then slowdowns every step alike (-15%
# and -20%: where the row starts to FAIL reliably).
CREEP_LEVELS = (0.0, -0.03, -0.05, -0.075, -0.10, -0.15, -0.20)
TOKENS_PER_STEP = 64  # the pools' layer stack (power.py WORKLOAD); rates only scale with it


def _run(steps: list[float]) -> dict[str, Any]:
    """One recorded side as the metrics file's samples the creep row reads."""
    return {
        "tokens_per_step_global": TOKENS_PER_STEP,
        "samples": {"step_time_s": steps, "tokens_per_s": [TOKENS_PER_STEP / t for t in steps]},
    }


def ab_status(
    sides: list[list[list[float]]], change: float, config: RunConfig, steps: int, rng: random.Random
) -> str:
    """One creep A/B on resampled A/A rounds: FAIL, PASS or UNKNOWN by the shipped rule and looks."""
    ab, tol = config.gate.ab, config.gate.tolerances
    looks = set(look_rounds(ab.min_rounds, ab.max_rounds))
    changes: list[float] = []
    while True:
        pair = sides[rng.randrange(len(sides))]
        base, candidate = (pair[0], pair[1]) if rng.random() < 0.5 else (pair[1], pair[0])
        base, candidate = base[:steps], candidate[:steps]
        if change:
            candidate = inject_slowdown(base, candidate, change, 1, rng)
        changes.append(round_change(base, candidate))
        if len(changes) in looks:
            status = decide(
                changes, tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds
            ).status
            if status != "CONTINUE":
                return status


def cmd_creep(args: argparse.Namespace) -> None:
    config = base_config(Path("."))
    tol = config.gate.tolerances
    summary: dict[str, Any] = {}
    for pool_file in args.pools.split(","):
        pool = [r for r in read_json(RESULTS / pool_file)["rounds"] if r.get("pin", "on") == "on"]
        steps = min(len(pool[0]["base_step_s"]), config.bench.steps)
        sides = [[r["base_step_s"][:steps], r["candidate_step_s"][:steps]] for r in pool]
        step_ms = 1e3 * statistics.median(t for pair in sides for side in pair for t in side)
        full = [[r["base_step_s"], r["candidate_step_s"]] for r in pool]
        # As many steps as an A/B round measures at this step time, at most what the pool recorded.
        ab_steps = min(len(pool[0]["base_step_s"]), round_steps(config, step_ms / 1e3))
        summary[pool_file] = {
            "rounds": len(pool),
            "steps_per_run": steps,
            "ab_steps_per_round": ab_steps,
            "step_ms": step_ms,
            "history": {},
        }
        for history_runs in (int(h) for h in args.history.split(",")):
            print(
                f"{pool_file}: {len(pool)} pinned rounds, step {step_ms:.1f} ms, {steps} steps per run; "
                f"anchor, candidate and {history_runs} history runs from distinct rounds; tolerance "
                f"{tol.throughput_drop_pct:g}%, confidence {tol.confidence:.0%}; "
                f"{args.trials} trials a level",
                flush=True,
            )
            rng = random.Random(0)
            rows = {}
            for change in CREEP_LEVELS:
                counts = {"FAIL": 0, "PASS": 0, "INFO": 0}
                ab_counts = {"FAIL": 0, "PASS": 0, "UNKNOWN": 0}
                shipped = {"FAIL": 0, "PASS": 0, "INFO": 0}
                for _ in range(args.trials):
                    drawn = [rng.choice(sides[i]) for i in rng.sample(range(len(sides)), history_runs + 2)]
                    anchor, candidate, past = drawn[0], drawn[1], drawn[2:]
                    if change:
                        candidate = inject_slowdown(anchor, candidate, change, 1, rng)
                    history = [{"mean_step_time_s": mean_step_time(run)} for run in past]
                    row = creep_check(1, _run(anchor), _run(candidate), history, tol, "the drawn anchor")
                    counts[row.status] += 1
                    ab = ab_status(full, change, config, ab_steps, rng)
                    ab_counts[ab] += 1
                    final = ab if row.status == "FAIL" else row.status
                    shipped["INFO" if final == "UNKNOWN" else final] += 1
                label = f"{100 * change:+.1f}%"
                rows[label] = {**counts, "ab": ab_counts, "shipped": shipped}
                n = args.trials
                print(
                    f"  {label:7s} screen: FAIL {rate(counts['FAIL'], n)}  PASS {rate(counts['PASS'], n)}  "
                    f"INFO {rate(counts['INFO'], n)}\n"
                    f"          A/B:    FAIL {rate(ab_counts['FAIL'], n)}  "
                    f"PASS {rate(ab_counts['PASS'], n)}  "
                    f"UNKNOWN {rate(ab_counts['UNKNOWN'], n)}\n"
                    f"          shipped: FAIL {rate(shipped['FAIL'], n)}  PASS {rate(shipped['PASS'], n)}  "
                    f"INFO {rate(shipped['INFO'], n)}",
                    flush=True,
                )
            summary[pool_file]["history"][str(history_runs)] = rows
    write_json(
        RESULTS / "creep.json",
        {
            "trials": args.trials,
            "tolerance_pct": tol.throughput_drop_pct,
            "confidence": tol.confidence,
            "pools": summary,
        },
    )
