"""The A/B rule's error rates with the uncertainty of the pool they come from: a double bootstrap.

    python benchmarks/rates.py [--outer 200] [--inner 1000] [--point 20000] [--verify 100]
                               [--pools pool-stack70.json:on,...] [--sd 1,2,3,4.6,6]

A pool is real A/A rounds (identical code on both sides) with every step recorded. Each rate is
measured twice over:

outer   the pool itself is a sample: it is resampled (rounds with replacement) `--outer` times, and
        each resample is a world in which the rule is run; the 2.5% and 97.5% percentiles of a rate
        over the worlds are its interval. A pool of 25 rounds says little about a 1% rate, and the
        interval says how little.
inner   in each world, `--inner` whole decisions: rounds drawn with replacement from the world, a
        slowdown injected, decided look by look until PASS, FAIL or UNKNOWN. The point figure is the
        same on the pool itself, with `--point` decisions.

Exact injected changes. Each world is centred (its mean A/A round figure subtracted): identical code
is unchanged by definition, and a pool whose finite mean is -0.7% would otherwise turn the "-5%" row
into -5.7%. The slowdown is then injected into the recorded candidate steps so that the round's total
time grows by 1/(1 + change): the round figure (log of the time ratio) moves by exactly log(1 + change)
and the tokens/s change is the label. Uniform: every candidate step alike; intermittent: one step in 5
(a random phase per round) carries it all. round_change() computes every injected round, so its stall
cap applies as in a real A/B.

Round sd bins. The centred rounds of each pool are rescaled to a round sd of 1, 2, 3, 4.6 and 6%: the
same pool's shape (tails, skew) at other noise levels; what a verdict with that measured sd can claim.

The rule. Decisions follow benchgate.ab.decision: its looks and per-look t bounds (ab/levels.py), the
indifference zone at the last look, the gate's default tolerance, confidence, min_rounds and
max_rounds. decide() takes about a millisecond a look (exact statistics), too slow for millions of
decisions, so sequences without a capped step are decided on arrays here (replica()), and those with
one (ab/rare.py's rare events) by decide() itself. The first `--verify` decisions of every row are
also taken by decide(), round by round as the runner calls it: any difference in status, rounds or
interval stops the run, so a change of decide() cannot pass unnoticed (re-run after one). Coverage:
the share of decisions whose printed interval (ci_low_pct, ci_high_pct) holds the injected change.

Results: benchmarks/results/rates-2026-11-28.json (--out); every row is printed as it is measured.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rates_rule import STATUSES, Drawn, Rule, decisions, verify  # benchmarks/rates_rule.py, beside this

from benchgate.ab.decision import round_change
from benchgate.ab.levels import INDIFFERENCE
from benchgate.ab.rare import count_capped, uncapped_change
from benchgate.config import load_config
from benchgate.kit import stats
from benchgate.kit.files import read_json, write_json

RESULTS = Path(__file__).resolve().parent / "results"
# (label, tokens/s change, one step in `every` carries it)
LEVELS = [
    ("A/A", 0.0, 1),
    ("-3% uniform", -0.03, 1),
    ("-5% uniform", -0.05, 1),
    ("-7.5% uniform", -0.075, 1),
    ("-10% uniform", -0.10, 1),
    ("-10% intermittent (1 step in 5)", -0.10, 5),
]
TARGETS = {
    ("A/A", "FAIL"): ("<=", 0.01),
    ("A/A", "UNKNOWN"): ("<=", 0.02),
    ("-3% uniform", "UNKNOWN"): ("<=", 0.15),
    ("-7.5% uniform", "FAIL"): (">=", 0.80),
    ("-10% uniform", "FAIL"): (">=", 0.99),
}
COVERAGE_TARGET = 0.90
DEFAULT_POOLS = (
    "pool-stack70.json:on,pool-stack70.json:off,pool-stack350.json:on,aa-rounds.json,"
    "pool-quiet-2026-11-28.json:on,pool-loaded-2026-11-28.json:on,pool-quiet-100-2026-11-28.json:on,"
    "pool-hog-2026-11-28.json:on"
)


@dataclass
class Pool:
    name: str
    condition: str
    loadavg_1m: float | None
    step_ms: float | None
    steps: int | None  # per round, as the rule sets them; None: round figures only
    aa: np.ndarray  # the A/A round figures (round_change), one per round
    injected: dict[str, np.ndarray]  # level -> (rounds, phases): round figure moved by the injection
    # level -> (rounds, phases): the uncapped figure minus the A/A figure, and steps beyond the stall cap
    # (base, candidate; last axis), which decide() weighs as rare events (ab/rare.py)
    uncapped: dict[str, np.ndarray]
    capped: dict[str, np.ndarray]


def _inject(cand: list[float], change: float, every: int, phase: int) -> list[float]:
    """The candidate's steps with the round's total time grown by 1/(1 + change): every step alike
    (every=1), or only the steps at `phase` modulo `every`."""
    total = sum(cand)
    extra = total / (1.0 + change) - total
    hit = sum(cand[phase::every])
    return [t * (1.0 + extra / hit) if i % every == phase else t for i, t in enumerate(cand)]


def load_pool(spec: str, rule: Rule) -> Pool | None:
    """`file[:pin]` from benchmarks/results; None (said) where the file is not there."""
    file, _, pin = spec.partition(":")
    path = RESULTS / file
    if not path.exists():
        print(f"{spec}: not found, left out", flush=True)
        return None
    data = read_json(path)
    rounds = [r for r in data["rounds"] if not pin or r.get("pin", "on") == pin]
    if len(rounds) < 3:
        raise SystemExit(f"{spec}: {len(rounds)} rounds, at least 3 are needed to resample a pool")
    conditions = {r.get("condition") or data.get("condition") or "not recorded" for r in rounds}
    loads = [r["loadavg_1m"] for r in rounds if "loadavg_1m" in r]
    pool = Pool(
        spec,
        ",".join(sorted(conditions)),
        statistics.median(loads) if loads else None,
        None,
        None,
        np.zeros(0),
        {},
        {},
        {},
    )
    if "base_step_s" not in rounds[0]:  # round figures only: the injection moves them by exactly log(1+c)
        pool.aa = np.array([r["change_log"] for r in rounds])
        for label, change, every in LEVELS:
            if every == 1:  # no steps: no capped step can be counted, and none is assumed
                pool.injected[label] = pool.uncapped[label] = np.full((len(rounds), 1), math.log1p(change))
                pool.capped[label] = np.zeros((len(rounds), 1, 2), dtype=int)
        return pool
    step_s = statistics.median(t for r in rounds for t in r["base_step_s"])
    steps = min(len(rounds[0]["base_step_s"]), math.ceil(max(rule.steps, rule.min_measured_s / step_s)))
    pool.step_ms, pool.steps = 1e3 * step_s, steps
    pairs = [(r["base_step_s"][:steps], r["candidate_step_s"][:steps]) for r in rounds]
    pool.aa = np.array([round_change(a, b) for a, b in pairs])
    for label, change, every in LEVELS:
        slowed = [[(a, _inject(b, change, every, p)) for p in range(every)] for a, b in pairs]
        pool.injected[label] = np.array(
            [[round_change(a, b) - x for a, b in row] for row, x in zip(slowed, pool.aa, strict=True)]
        )
        pool.uncapped[label] = np.array(
            [[uncapped_change(a, b) - x for a, b in row] for row, x in zip(slowed, pool.aa, strict=True)]
        )
        pool.capped[label] = np.array([[count_capped(a, b) for a, b in row] for row in slowed])
    return pool


@dataclass
class Cell:
    """One row's decisions: the point figure (the pool itself) and one rate per outer world."""

    point: dict[str, float]
    worlds: dict[str, list[float]]
    decisions: int
    verified: int
    median_rounds: float


def _rates(
    status: np.ndarray, rounds: np.ndarray, low: np.ndarray, high: np.ndarray, truth: float
) -> dict[str, float]:
    out = {s: float(np.mean(status == i)) for i, s in enumerate(STATUSES)}
    out["coverage"] = float(np.mean((low <= truth) & (truth <= high)))
    out["median_rounds"] = float(np.median(rounds))
    return out


def _draw(
    pool: Pool,
    label: str,
    members: np.ndarray,
    count: int,
    target_sd: float | None,
    rng: np.random.Generator,
    max_rounds: int,
) -> Drawn:
    """`count` sequences from the world `members` (indices into the pool): its A/A figures centred
    (uncapped ones by the same amount) and rescaled to `target_sd` (log units) when given, then each
    round's injected move added, at a random phase for an intermittent slowdown."""
    world = pool.aa[members]
    scale = 1.0 if target_sd is None else target_sd / float(np.std(world, ddof=1) or 1.0)
    picks = members[rng.integers(0, len(members), size=(count, max_rounds))]
    phases = rng.integers(0, pool.injected[label].shape[1], size=picks.shape)
    noise = scale * (pool.aa[picks] - world.mean())
    return Drawn(
        noise + pool.injected[label][picks, phases],
        noise + pool.uncapped[label][picks, phases],
        pool.capped[label][picks, phases],
    )


def run_cell(
    pool: Pool,
    label: str,
    change: float,
    target_sd: float | None,
    rule: Rule,
    args: argparse.Namespace,
    rng: np.random.Generator,
) -> Cell:
    truth = 100 * change
    everyone = np.arange(len(pool.aa))
    drawn = _draw(pool, label, everyone, args.point, target_sd, rng, rule.max_rounds)
    got = decisions(drawn, rule)
    checked = np.arange(min(args.verify, len(drawn.x)))
    verified = verify(drawn.rows(checked), tuple(g[checked] for g in got), rule, f"{pool.name} {label}")
    point = _rates(*got, truth)
    worlds: dict[str, list[float]] = {key: [] for key in point}
    for _ in range(args.outer):
        members = rng.integers(0, len(pool.aa), size=len(pool.aa))
        world = _draw(pool, label, members, args.inner, target_sd, rng, rule.max_rounds)
        for key, value in _rates(*decisions(world, rule), truth).items():
            worlds[key].append(value)
    return Cell(point, worlds, args.point + args.outer * args.inner, verified, point["median_rounds"])


def summary(cell: Cell) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in cell.point.items():
        low, median, high = np.percentile(cell.worlds[key], [2.5, 50, 97.5])
        out[key] = {
            "rate": value,
            "outer_low": float(low),
            "outer_median": float(median),
            "outer_high": float(high),
        }
    return {**out, "decisions": cell.decisions, "verified_by_decide": cell.verified}


def line(label: str, row: dict[str, Any]) -> str:
    def show(key: str) -> str:
        r = row[key]
        target = TARGETS.get((label, key)) or ((">=", COVERAGE_TARGET) if key == "coverage" else None)
        mark = ""
        if target is not None:
            ok = r["rate"] <= target[1] if target[0] == "<=" else r["rate"] >= target[1]
            mark = f" (target {target[0]} {100 * target[1]:g}%: {'met' if ok else 'MISSED'})"
        return f"{key} {100 * r['rate']:.2f}% [{100 * r['outer_low']:.1f}, {100 * r['outer_high']:.1f}]{mark}"

    keys = ["FAIL", "UNKNOWN", "PASS", "coverage"]
    return (
        f"    {label:32s} "
        + "; ".join(show(k) for k in keys)
        + f"; median {row['median_rounds']['rate']:g} rounds"
    )


def describe(pool: Pool) -> dict[str, Any]:
    n = len(pool.aa)
    mean, sd = float(np.mean(pool.aa)), float(np.std(pool.aa, ddof=1))
    half = stats.t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return {
        "rounds": n,
        "condition": pool.condition,
        "loadavg_1m_median": pool.loadavg_1m,
        "step_ms": pool.step_ms,
        "steps_per_round": pool.steps,
        "round_sd_pct": 100 * sd,
        "aa_mean_pct": 100 * math.expm1(mean),
        "aa_mean_ci95_pct": [100 * math.expm1(mean - half), 100 * math.expm1(mean + half)],
    }


def cross_check(bins: list[float], rule: Rule) -> dict[str, Any]:
    """What each verdict's row states (ab/error_rates.py: decide() on the studentised real rounds of
    ab/levels.py scaled to the verdict's sd) for every sd bin, to set beside the pools' figures."""
    try:
        from benchgate.ab.error_rates import verdict_rates
    except ImportError:
        print("benchgate.ab.error_rates is not there: no cross-check", flush=True)
        return {}
    out: dict[str, Any] = {}
    for sd_pct in bins:
        rates = verdict_rates(sd_pct, rule.tolerance_pct, rule.confidence, rule.min_rounds, rule.max_rounds)
        out[f"{sd_pct:g}"] = rates.to_dict()
        print(
            f"  error_rates at round sd {sd_pct:g}%: false FAIL {100 * rates.false_fail:.2f}%, FAIL at "
            f"-{rule.tolerance_pct:g}% {100 * rates.fail_at_tolerance:.1f}%, at -{2 * rule.tolerance_pct:g}% "
            f"{100 * rates.fail_at_twice:.1f}% ({rates.trials} decisions each)",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--outer", type=int, default=200, help="resamples of each pool")
    parser.add_argument("--inner", type=int, default=1000, help="decisions in each resample")
    parser.add_argument("--point", type=int, default=20000, help="decisions on the pool itself")
    parser.add_argument("--verify", type=int, default=100, help="decisions per row also taken by decide()")
    parser.add_argument("--pools", default=DEFAULT_POOLS, help="file[:pin] under benchmarks/results")
    parser.add_argument("--sd", default="1,2,3,4.6,6", help="round sd bins, percent ('' for none)")
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--out", default="rates-2026-11-28.json")
    parser.add_argument("--max-rounds", type=int, help="gate.ab.max_rounds (default: the gate's)")
    args = parser.parse_args()
    for name in ("outer", "inner", "point"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    gate = load_config().gate
    rule = Rule(
        gate.tolerances.throughput_drop_pct,
        gate.tolerances.confidence,
        gate.ab.min_rounds,
        args.max_rounds or gate.ab.max_rounds,
        gate.ab.steps,
        gate.ab.min_measured_s,
    )
    bins = [float(s) for s in args.sd.split(",") if s.strip()]
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    print(
        f"rule: looks {rule.looks}, t bounds (FAIL, PASS) "
        f"{[(round(b.fail_t, 3), round(b.pass_t, 3)) for b in rule.bounds]}, indifference zone "
        f"{INDIFFERENCE:g} x tolerance at the last look, tolerance -{rule.tolerance_pct:g}%; "
        f"{args.outer} worlds x {args.inner} decisions + {args.point} on each pool",
        flush=True,
    )
    report: dict[str, Any] = {
        "rule": {
            **{k: v for k, v in rule.__dict__.items() if k != "bounds"},
            "looks": [b.rounds for b in rule.bounds],
            "fail_t": [b.fail_t for b in rule.bounds],
            "pass_t": [b.pass_t for b in rule.bounds],
            "indifference": INDIFFERENCE,
        },
        "trials": {"outer": args.outer, "inner": args.inner, "point": args.point, "verify": args.verify},
        "seed": args.seed,
        "targets": {f"{k[0]} {k[1]}": f"{op} {v}" for k, (op, v) in TARGETS.items()},
        "pools": {},
    }
    for spec in args.pools.split(","):
        pool = load_pool(spec, rule)
        if pool is None:
            continue
        info = describe(pool)
        low, high = info["aa_mean_ci95_pct"]
        print(
            f"{spec}: {info['rounds']} A/A rounds, condition {info['condition']}, load "
            f"{info['loadavg_1m_median']}, round sd {info['round_sd_pct']:.2f}%, mean "
            f"{info['aa_mean_pct']:+.2f}% [{low:+.2f}, {high:+.2f}] (centred away), "
            f"{info['steps_per_round']} steps per round",
            flush=True,
        )
        entry: dict[str, Any] = {**info, "levels": {}, "sd_bins": {}}
        for sd_pct in [None, *bins]:
            if sd_pct is not None:
                print(f"  rescaled to round sd {sd_pct:g}%:", flush=True)
            rows = entry["levels"] if sd_pct is None else entry["sd_bins"].setdefault(f"{sd_pct:g}", {})
            for label, change, _every in LEVELS:
                if label not in pool.injected:
                    rows[label] = None  # round figures only: no steps to slow one in five of
                    continue
                target_sd = None if sd_pct is None else sd_pct / 100  # as decide() reports round_sd_pct
                rows[label] = summary(run_cell(pool, label, change, target_sd, rule, args, rng))
                print(line(label, rows[label]), flush=True)
        report["pools"][spec] = entry
        write_json(RESULTS / args.out, {**report, "seconds": time.monotonic() - started})
    report["error_rates_cross_check"] = cross_check(bins, rule)
    write_json(RESULTS / args.out, {**report, "seconds": time.monotonic() - started})
    print(f"{time.monotonic() - started:.0f} s; written to {RESULTS / args.out}")


if __name__ == "__main__":
    sys.exit(main())
