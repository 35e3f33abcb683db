"""Detection power and false alarms of the timing gate, by real runs on this host.

The workload is a stack of LAYERS equal layers; a slower "commit" adds k more layers, real compute in
every step (no sleeps). Each side's code lives in its own directory, as two checkouts would, and the
harness imports the workload from there (benchgate.ab.runner.Side.source_paths).

    python benchmarks/power.py noise      [--rounds 12]   between-launch noise: A/A rounds and plain
                                                          back-to-back launches, gpt-tiny and fast-step
    python benchmarks/power.py resample   [--trials 10000] [--pools pool-stack70.json,...]  the rule's
                                          error rates: slowdowns injected into recorded pinned rounds
    python benchmarks/power.py creep      [--trials 10000] [--pools ...] [--history 3,10]  the creep
                                          row's error rates on the same pools (creep_rates.py)
    python benchmarks/power.py power      [--trials 6] [--tolerance 5] [--levels 0,3,5,10,20]
                                          [--modes screen,ab]  real decisions per level and mode,
                                                          interleaved in random order
    python benchmarks/power.py record-pool [--rounds 30] [--layers 100] [--steps 90] [--pin on,off]
                                          A/A rounds keeping every step, pinned and unpinned interleaved
    python benchmarks/power.py decisions  [--trials 3]    whole A/B decisions against real slower
                                          commits, uniform and intermittent (1 step in 5), random order
    python benchmarks/power.py gpt-tiny-time [--trials 3] A/A decision time of gpt-tiny at ws=1 and 2
    python benchmarks/power.py outage     [--trials 3] [--levels 0,10,20]  whole gate runs with MLflow
                                          unreachable and no cached baseline (a pod without a volume):
                                          the verdict now, and what the rule before it said (all NEW)

Results go to benchmarks/results/*.json; every command prints its figures. Rates come with Wilson 95%
intervals and the number of trials behind them.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, base_config, inject_slowdown, rate  # beside this script

from benchgate.ab.decision import decide, round_change
from benchgate.ab.runner import Side, run_ab, run_round
from benchgate.checks.screen import screen
from benchgate.config import RunConfig, load_config
from benchgate.errors import BenchgateError
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import stage_bench

LAYERS = 100
# Extra layers per level: k / LAYERS of the layer work (the measured change is reported beside it).
LEVELS = {0: 0, 3: 3, 5: 5, 10: 10, 20: 20}

WORKLOAD = '''
"""A stack of {layers} equal layers (+{extra} extra): a step whose cost is known in layers."""
import torch
from torch import nn
import torch.nn.functional as F
from benchgate.workloads.base import FlopsPerToken

LAYERS = {layers} + {extra}
WIDTH, BATCH = 128, 64


class Stack:
    name = "layer-stack"
    tokens_per_step = BATCH

    def build_model(self, device):
        # A deep stack's gradients reach subnormal floats, which some CPUs (this host's Xeon) compute
        # several times slower, so added layers cost less than their share: flushed, each costs alike.
        torch.set_flush_denormal(True)
        layers = []
        for _ in range(LAYERS):
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        return nn.Sequential(*layers).to(device)

    def make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=1e-3)

    def make_batch(self, generator, device):
        return torch.randn(BATCH, WIDTH, generator=generator).to(device)

    def forward(self, model, batch):
        return model(batch)

    def loss(self, output, batch):
        return F.mse_loss(output, batch)

    def flops_per_token(self):
        n = LAYERS * WIDTH * WIDTH
        return FlopsPerToken(dense_6n=6 * n, attention_aware=6 * n)


def make_workload():
    return Stack()
'''


INTERMITTENT_WORKLOAD = '''
"""A stack of {layers} equal layers; every {every}th training step also runs {extra} more layers."""
import torch
from torch import nn
import torch.nn.functional as F
from benchgate.workloads.base import FlopsPerToken

WIDTH, BATCH = 128, 64


class Stack:
    name = "layer-stack"
    tokens_per_step = BATCH
    calls = 0

    def build_model(self, device):
        torch.set_flush_denormal(True)  # as WORKLOAD's: every layer costs alike

        def stack(n):
            layers = []
            for _ in range(n):
                layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
            return nn.Sequential(*layers)
        return nn.ModuleList([stack({layers}), stack(max({extra}, 1))]).to(device)

    def make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=1e-3)

    def make_batch(self, generator, device):
        return torch.randn(BATCH, WIDTH, generator=generator).to(device)

    def forward(self, model, batch):
        self.calls += 1
        out = model[0](batch)
        if {extra} and self.calls % {every} == 0:
            out = model[1](out)  # real extra compute on a minority of steps, as a periodic job would add
        return out

    def loss(self, output, batch):
        return F.mse_loss(output, batch)

    def flops_per_token(self):
        n = {layers} * WIDTH * WIDTH
        return FlopsPerToken(dense_6n=6 * n, attention_aware=6 * n)


def make_workload():
    return Stack()
'''

# Real-decision levels on the ~20 ms workload (70 layers): name -> (extra layers on every step, extra
# layers on every 5th step). The tokens/s change each one causes is measured by A/B and printed beside it.
DECISION_LAYERS = 70
DECISION_LEVELS = {
    "A/A": (0, 0),
    "-3% uniform": (2, 0),
    "-7.5% uniform": (6, 0),
    "-10% uniform": (8, 0),
    "-10% intermittent (1 step in 5)": (0, 39),
}


def checkout(root: Path, name: str, extra: int, layers: int = LAYERS) -> Side:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "powerwork.py").write_text(WORKLOAD.format(layers=layers, extra=extra), encoding="utf-8")
    return Side(f"{name} (+{extra} layers)", None, (directory,))


def _aa_rounds(
    config: RunConfig, root: Path, a: Side, b: Side, rounds: int, tag: str
) -> list[dict[str, Any]]:
    out = []
    for i in range(rounds):
        figures = run_round(config, 1, root / f"{tag}{i}", a, b, None, seed=i)
        out.append(figures)
        print(
            f"{tag} round {i + 1}/{rounds}: change {100 * math.expm1(figures['change_log']):+.2f}% "
            f"({figures['seconds']:.1f} s)",
            flush=True,
        )
    return out


def _back_to_back(config: RunConfig, root: Path, side: Side, pairs: int) -> list[float]:
    """Plain launches of identical code one after the other: paired p50 differences, percent."""
    diffs = []
    for i in range(pairs):
        p50 = []
        for j in range(2):
            path = stage_bench(config, 1, root / f"b2b{i}-{j}", source_paths=side.source_paths)
            p50.append(statistics.median(read_json(path)["samples"]["step_time_s"]))
        diffs.append(100 * (p50[1] / p50[0] - 1))
    return diffs


def cmd_noise(args: argparse.Namespace) -> None:
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stack = checkout(root, "stack", 0)
        tiny = Side("gpt-tiny")
        for name, workload, side in (
            ("fast-step", "powerwork:make_workload", stack),
            ("gpt-tiny", "benchgate.workloads.gpt:make_workload", tiny),
        ):
            if args.workloads and name not in args.workloads.split(","):
                continue
            config = base_config(root, workload)
            rounds = _aa_rounds(config, root / name, side, side, args.rounds, "aa")
            changes = [100 * math.expm1(r["change_log"]) for r in rounds]
            b2b = _back_to_back(config, root / name, side, args.rounds // 2)
            report[name] = {
                "aa_round_changes_pct": changes,
                "aa_round_sd_pct": statistics.stdev(changes),
                "aa_round_seconds_median": statistics.median(r["seconds"] for r in rounds),
                "step_p50_ms": 1e3 * statistics.median(r["base_p50_s"] for r in rounds),
                "back_to_back_diffs_pct": b2b,
                "back_to_back_sd_pct": statistics.stdev(b2b),
            }
            figures = report[name]
            print(
                f"{name}: step p50 {figures['step_p50_ms']:.1f} ms; A/A round changes sd "
                f"{figures['aa_round_sd_pct']:.2f}% (range {min(changes):+.2f}..{max(changes):+.2f}%, "
                f"{len(changes)} rounds); back-to-back launches sd {figures['back_to_back_sd_pct']:.2f}% "
                f"(range {min(b2b):+.1f}..{max(b2b):+.1f}%, {len(b2b)} pairs)",
                flush=True,
            )
    write_json(RESULTS / f"noise-{'-'.join(sorted(report))}.json", report)


def cmd_record_pool(args: argparse.Namespace) -> None:
    """A/A rounds with every step's time kept, for each setting in --pin (on, off), interleaved."""
    settings = args.pin.split(",")
    rounds: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        side = checkout(root, "stack", 0, args.layers)
        for i in range(args.rounds):
            for pin in settings:
                config = base_config(root, ab={"steps": args.steps, "pin_cores": pin == "on"})
                try:
                    figures = run_round(config, 1, root / f"r{i}{pin}", side, side, None, seed=i)
                except BenchgateError as exc:  # a round lost to the host (a timeout under load): counted
                    failed.append({"round": i, "pin": pin, "error": str(exc).splitlines()[0]})
                    print(
                        f"round {i + 1}/{args.rounds} pin {pin}: failed ({failed[-1]['error']})", flush=True
                    )
                    continue
                rounds.append(
                    {"pin": pin, "condition": args.condition, "loadavg_1m": os.getloadavg()[0], **figures}
                )
                print(f"round {i + 1}/{args.rounds} pin {pin}: {figures['seconds']:.1f} s", flush=True)
            name = args.out or f"pool-stack{args.layers}.json"
            write_json(
                RESULTS / name,
                {
                    "workload": f"layer stack, {args.layers} layers",
                    "condition": args.condition,
                    "rounds": rounds,
                    "failed_rounds": failed,
                },
            )


def decision_side(root: Path, name: str, uniform: int, intermittent: int) -> Side:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    text = INTERMITTENT_WORKLOAD.format(layers=DECISION_LAYERS + uniform, extra=intermittent, every=5)
    (directory / "powerwork.py").write_text(text, encoding="utf-8")
    return Side(name, None, (directory,))


def cmd_decisions(args: argparse.Namespace) -> None:
    """Whole A/B decisions as the gate takes them (every round real), per level, in random order."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = decision_side(root, "base", 0, 0)
        sides = {
            name: decision_side(root, f"level{i}", *extra)
            for i, (name, extra) in enumerate(DECISION_LEVELS.items())
        }
        config = base_config(root)
        step_s = statistics.median(
            read_json(stage_bench(config, 1, root / "probe", source_paths=base.source_paths))["samples"][
                "step_time_s"
            ]
        )
        plan = [name for name in DECISION_LEVELS for _ in range(args.trials)]
        random.Random(3).shuffle(plan)
        for i, name in enumerate(plan):
            started = time.monotonic()
            outcome = run_ab(config, 1, root / f"ab{i}", base, sides[name], step_s=step_s)
            d = outcome.decision
            results.append(
                {
                    "level": name,
                    "status": d.status,
                    "rounds": d.rounds,
                    "change_pct": d.change_pct,
                    "round_sd_pct": d.round_sd_pct,
                    "seconds": time.monotonic() - started,
                }
            )
            print(
                f"[{i + 1}/{len(plan)}] {name}: {d.status} after {d.rounds} rounds, {d.change_pct:+.2f}% "
                f"[{d.ci_low_pct}, {d.ci_high_pct}], {results[-1]['seconds']:.0f} s",
                flush=True,
            )
            write_json(
                RESULTS / "decisions.json",
                {"workload": f"layer stack, {DECISION_LAYERS} layers", "step_s": step_s, "trials": results},
            )
    for name in DECISION_LEVELS:
        rows = [r for r in results if r["level"] == name]
        fails = sum(r["status"] == "FAIL" for r in rows)
        unknown = sum(r["status"] == "UNKNOWN" for r in rows)
        print(
            f"  {name}: FAIL {rate(fails, len(rows))}, UNKNOWN {rate(unknown, len(rows))}, measured change "
            f"median {statistics.median(r['change_pct'] for r in rows):+.1f}%, time median "
            f"{statistics.median(r['seconds'] for r in rows):.0f} s, rounds {[r['rounds'] for r in rows]}"
        )


# (tokens/s change, 1 = every step alike or k = one step in k)
RESAMPLE_LEVELS = [
    (0.0, 1),
    (-0.03, 1),
    (-0.05, 1),
    (-0.075, 1),
    (-0.10, 1),
    (-0.20, 1),
    (-0.05, 5),
    (-0.10, 5),
]


def cmd_gpt_tiny_time(args: argparse.Namespace) -> None:
    """How long an A/B decision of gpt-tiny takes per world size (A/A, the shipped rule and budget)."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        side = Side("gpt-tiny")
        config = base_config(root, "benchgate.workloads.gpt:make_workload")
        step_s = {}
        for ws in (1, 2):
            probe = read_json(stage_bench(config, ws, root / f"probe{ws}"))["samples"]["step_time_s"]
            step_s[ws] = statistics.median(probe)
        for i in range(args.trials):
            for ws in (1, 2):
                started = time.monotonic()
                d = run_ab(config, ws, root / f"ab{i}-{ws}", side, side, step_s=step_s[ws]).decision
                seconds = time.monotonic() - started
                results.append(
                    {
                        "world_size": ws,
                        "status": d.status,
                        "rounds": d.rounds,
                        "seconds": seconds,
                        "change_pct": d.change_pct,
                        "round_sd_pct": d.round_sd_pct,
                        "mde_pct": d.mde_pct,
                    }
                )
                print(
                    f"gpt-tiny ws={ws}: {d.status} after {d.rounds} rounds in {seconds:.0f} s, change "
                    f"{d.change_pct:+.2f}%, round sd {d.round_sd_pct}, MDE {d.mde_pct}",
                    flush=True,
                )
                write_json(RESULTS / "gpt-tiny-time.json", {"step_s": step_s, "trials": results})
    for ws in (1, 2):
        rows = [r for r in results if r["world_size"] == ws]
        print(
            f"  ws={ws}: step {1e3 * step_s[ws]:.1f} ms; decision time median "
            f"{statistics.median(r['seconds'] for r in rows):.0f} s over {len(rows)} A/A decisions "
            f"({', '.join(r['status'] for r in rows)})"
        )


def cmd_resample(args: argparse.Namespace) -> None:
    """The shipped rule's error rates, resampling real pinned A/A rounds with every step kept."""
    config = base_config(Path(tempfile.gettempdir()))
    ab, tol = config.gate.ab, config.gate.tolerances
    summary: dict[str, Any] = {}
    for pool_file in args.pools.split(","):
        pool = [r for r in read_json(RESULTS / pool_file)["rounds"] if r.get("pin", "on") == "on"]
        step_s = statistics.median(t for r in pool for t in r["base_step_s"])
        steps = min(len(pool[0]["base_step_s"]), math.ceil(max(ab.steps, ab.min_measured_s / step_s)))
        round_s = statistics.median(r["seconds"] for r in pool)
        print(
            f"{pool_file}: {len(pool)} real pinned A/A rounds, step {1e3 * step_s:.1f} ms, {steps} steps per "
            f"round as the rule sets them, ~{round_s:.0f} s per round; {args.trials} decisions per level"
        )
        rng = random.Random(0)
        rows = {}
        for change, every in RESAMPLE_LEVELS:
            counts = {"PASS": 0, "FAIL": 0, "UNKNOWN": 0}
            within_2x = 0
            rounds_used = []
            for _ in range(args.trials):
                seq: list[float] = []
                while True:
                    r = rng.choice(pool)
                    a, b = r["base_step_s"][:steps], r["candidate_step_s"][:steps]
                    seq.append(round_change(a, inject_slowdown(a, b, change, every, rng) if change else b))
                    decision = decide(
                        seq, tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds
                    )
                    if decision.status != "CONTINUE":
                        break
                counts[decision.status] += 1
                low = decision.ci_low_pct
                within_2x += (
                    decision.status == "UNKNOWN" and low is not None and low > -2 * tol.throughput_drop_pct
                )
                rounds_used.append(len(seq))
            label = f"{100 * change:+.1f}% {'uniform' if every == 1 else f'(1 step in {every})'}"
            n = args.trials
            rows[label] = {
                **counts,
                "within_2x_unconfirmed": within_2x,
                "median_rounds": statistics.median(rounds_used),
                "median_minutes": statistics.median(rounds_used) * round_s / 60,
            }
            print(
                f"  {label:24s} FAIL {rate(counts['FAIL'], n)}  PASS {rate(counts['PASS'], n)}  UNKNOWN "
                f"{rate(counts['UNKNOWN'], n)}  (UNKNOWN within 2x tolerance {rate(within_2x, n)}); median "
                f"{statistics.median(rounds_used):g} rounds ~{rows[label]['median_minutes']:.1f} min",
                flush=True,
            )
        summary[pool_file] = {
            "rounds": len(pool),
            "step_ms": 1e3 * step_s,
            "steps_per_round": steps,
            "levels": rows,
        }
    write_json(RESULTS / "resample.json", {"trials": args.trials, "pools": summary})


def _screen_decision(
    config: RunConfig, root: Path, cand: Side, history: list[dict[str, Any]], tag: str
) -> str:
    path = stage_bench(config, 1, root / tag, source_paths=cand.source_paths)
    current = read_json(path)["samples"]
    tol = config.gate.tolerances
    base = history[-1]["samples"]
    past = [h["figures"] for h in history]
    return screen(base, current, past, tol.throughput_drop_pct, tol.confidence).status


def _history(config: RunConfig, root: Path, base: Side, runs: int) -> list[dict[str, Any]]:
    history = []
    for i in range(runs):
        samples = read_json(stage_bench(config, 1, root / f"history{i}", source_paths=base.source_paths))[
            "samples"
        ]
        steps, ref = samples["step_time_s"], samples["reference_s"]
        figures = {
            "step_time_s": statistics.median(steps),
            "step_time_per_reference": statistics.median(t / r for t, r in zip(steps, ref, strict=True)),
        }
        history.append({"samples": samples, "figures": figures})
    return history


def cmd_power(args: argparse.Namespace) -> None:
    tolerance = args.tolerance
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = checkout(root, "base", 0)
        sides = {level: checkout(root, f"level{level}", extra) for level, extra in LEVELS.items()}
        config = base_config(root, tolerances={"throughput_drop_pct": tolerance})
        history = _history(config, root, base, 3)
        levels = [int(x) for x in args.levels.split(",")]
        plan = [
            (level, mode) for level in levels for mode in args.modes.split(",") for _ in range(args.trials)
        ]
        random.Random(1).shuffle(plan)
        for i, (level, mode) in enumerate(plan):
            cand = sides[level] if level else checkout(root, "level0", 0)
            started = time.monotonic()
            status = _screen_decision(config, root, cand, history, f"screen{i}")
            measured = None
            rounds = 0
            if mode == "ab" and status != "PASS":
                outcome = run_ab(config, 1, root / f"ab{i}", base, cand)
                status, rounds = outcome.decision.status, outcome.decision.rounds
                measured = outcome.decision.change_pct
            seconds = time.monotonic() - started
            results.append(
                {
                    "level": level,
                    "mode": mode,
                    "status": status,
                    "seconds": seconds,
                    "rounds": rounds,
                    "ab_change_pct": measured,
                }
            )
            print(
                f"[{i + 1}/{len(plan)}] +{level}% {mode}: {status} ({seconds:.0f} s, {rounds} rounds)",
                flush=True,
            )
            write_json(
                RESULTS / f"power-tol{tolerance:g}.json", {"tolerance_pct": tolerance, "trials": results}
            )
    _print_power(results)


def _print_power(results: list[dict[str, Any]]) -> None:
    for mode in ("screen", "ab"):
        print(f"mode {mode}:")
        for level in LEVELS:
            rows = [r for r in results if r["level"] == level and r["mode"] == mode]
            if not rows:
                continue
            fails = sum(r["status"] == "FAIL" for r in rows)
            unknown = sum(r["status"] == "UNKNOWN" for r in rows)
            times = sorted(r["seconds"] for r in rows)
            p90 = times[min(len(times) - 1, math.ceil(0.9 * len(times)) - 1)]
            changes = [r["ab_change_pct"] for r in rows if r["ab_change_pct"] is not None]
            measured = f", A/B-measured change median {statistics.median(changes):+.1f}%" if changes else ""
            print(
                f"  +{level}% layers: FAIL {rate(fails, len(rows))}; UNKNOWN {rate(unknown, len(rows))}; "
                f"time median {statistics.median(times):.0f} s, p90 {p90:.0f} s{measured}"
            )


def cmd_creep(args: argparse.Namespace) -> None:
    """The creep row's FAIL and INFO rates, unchanged and slowed, on the resample mode's pools."""
    from creep_rates import cmd_creep as creep  # benchmarks/creep_rates.py, beside this script

    creep(args)


def cmd_outage(args: argparse.Namespace) -> None:
    """MLflow down and an empty store: nothing can be compared, so no level may PASS (it would be a
    regression passing as a first run); each run goes through the whole local pipeline."""
    import os
    import socket

    from benchgate.checks.compare import compare
    from benchgate.kfp.local_run import run_gate
    from benchgate.results.bundle import load_bundle

    with socket.socket() as probe:  # a port nothing listens on: MLflow "down"
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        levels = [int(x) for x in args.levels.split(",")]
        plan = [level for level in levels for _ in range(args.trials)]
        random.Random(2).shuffle(plan)
        for i, level in enumerate(plan):
            side = checkout(root, f"level{level}", LEVELS[level])
            os.environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in side.source_paths)
            sys.path[:0] = [str(p) for p in side.source_paths]
            config = load_config(
                overrides={
                    "bench.workload": "powerwork:make_workload",
                    "bench.world_sizes": [1],
                    "eval.enabled": False,
                    "trace.enabled": False,
                    "gate.baseline_dir": root / f"empty-store{i}",
                    "tracking.uri": dead,
                    "tracking.max_wait_s": 2.0,
                    "tracking.local_dir": root / "mlflow",
                    "tracking.spool_dir": root / f"spool{i}",
                    "out": root / f"out{i}",
                }
            )
            started = time.monotonic()
            outcome = run_gate(config)
            sys.path[: len(side.source_paths)] = []
            before = compare(None, load_bundle(outcome.out_dir), config.gate.tolerances).verdict
            results.append(
                {
                    "level": level,
                    "verdict": outcome.comparison.verdict,
                    "exit_code": outcome.comparison.exit_code,
                    "verdict_before": before,
                    "seconds": time.monotonic() - started,
                }
            )
            print(f"[{i + 1}/{len(plan)}] +{level} layers: {results[-1]}", flush=True)
            write_json(RESULTS / "outage.json", {"mlflow": "unreachable", "store": "empty", "runs": results})
    for level in levels:
        rows = [r for r in results if r["level"] == level]
        passed = sum(r["verdict"] == "PASS" for r in rows)
        unknown = sum(r["verdict"] == "UNKNOWN" for r in rows)
        passed_before = sum(r["verdict_before"] == "PASS" for r in rows)
        print(
            f"  +{level} layers: now PASS {rate(passed, len(rows))}, UNKNOWN {rate(unknown, len(rows))}; "
            f"before PASS {rate(passed_before, len(rows))}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    noise = sub.add_parser("noise")
    noise.add_argument("--rounds", type=int, default=12)
    noise.add_argument("--workloads", default="", help="fast-step, gpt-tiny (default: both)")
    pool = sub.add_parser("record-pool")
    pool.add_argument("--rounds", type=int, default=30)
    pool.add_argument("--layers", type=int, default=LAYERS)
    pool.add_argument("--steps", type=int, default=90)
    pool.add_argument("--pin", default="on,off")
    pool.add_argument(
        "--out", default="", help="file name under benchmarks/results (default pool-stack<N>.json)"
    )
    pool.add_argument("--condition", default="", help="quiet or loaded: recorded with every round")
    resample = sub.add_parser("resample")
    resample.add_argument("--trials", type=int, default=10000)
    resample.add_argument("--pools", default="pool-stack70.json,pool-stack350.json")
    creep = sub.add_parser("creep")
    creep.add_argument("--trials", type=int, default=10000)
    creep.add_argument("--pools", default="pool-stack70.json,pool-stack350.json")
    creep.add_argument("--history", default="3,10", help="earlier baseline runs behind the noise")
    sub.add_parser("decisions").add_argument("--trials", type=int, default=3)
    sub.add_parser("gpt-tiny-time").add_argument("--trials", type=int, default=3)
    power = sub.add_parser("power")
    power.add_argument("--trials", type=int, default=6)
    power.add_argument("--tolerance", type=float, default=5.0)
    power.add_argument("--levels", default=",".join(map(str, LEVELS)), help="e.g. 0,5")
    power.add_argument("--modes", default="screen,ab", help="screen, ab or both")
    outage = sub.add_parser("outage")
    outage.add_argument("--trials", type=int, default=3)
    outage.add_argument("--levels", default="0,10,20", help="e.g. 0,10")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    commands = {"noise": cmd_noise, "resample": cmd_resample, "creep": cmd_creep}
    commands["record-pool"] = cmd_record_pool
    commands["decisions"] = cmd_decisions
    commands["gpt-tiny-time"] = cmd_gpt_tiny_time
    commands.update(power=cmd_power, outage=cmd_outage)
    commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
