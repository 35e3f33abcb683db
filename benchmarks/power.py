"""Detection power and false alarms of the timing gate, by real runs on this host.

The workload is a stack of LAYERS equal layers; a slower "commit" adds k more layers, real compute in
every step (no sleeps). Each side's code lives in its own directory, as two checkouts would, and the
harness imports the workload from there (benchgate.ab_runner.Side.source_paths).

    python benchmarks/power.py noise      [--rounds 12]   between-launch noise: A/A rounds and plain
                                                          back-to-back launches, gpt-tiny and fast-step
    python benchmarks/power.py record-aa  [--rounds 200]  real A/A rounds, saved for resampling
    python benchmarks/power.py resample   [--trials 20000] the A/B rule's error rates from those rounds
    python benchmarks/power.py power      [--trials 6] [--tolerance 5] [--levels 0,3,5,10,20]
                                          [--modes screen,ab]  real decisions per level and mode,
                                                          interleaved in random order
    python benchmarks/power.py outage     [--trials 3] [--levels 0,10,20]  whole gate runs with MLflow
                                          unreachable and no cached baseline (a pod without a volume):
                                          the verdict now, and what the rule before it said (all NEW)

Results go to benchmarks/results/*.json; every command prints its figures. Rates come with Wilson 95%
intervals and the number of trials behind them.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchgate.ab_runner import Side, run_ab, run_round
from benchgate.config import RunConfig, load_config
from benchgate.files import read_json, write_json
from benchgate.launch import run_bench
from benchgate.verdict.ab import decide
from benchgate.verdict.screen import screen

RESULTS = Path(__file__).resolve().parent / "results"
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


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(successes: int, n: int) -> str:
    low, high = wilson(successes, n)
    return f"{successes}/{n} = {100 * successes / max(n, 1):.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def checkout(root: Path, name: str, extra: int) -> Side:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "powerwork.py").write_text(WORKLOAD.format(layers=LAYERS, extra=extra), encoding="utf-8")
    return Side(f"{name} (+{extra} layers)", None, (directory,))


def base_config(root: Path, workload: str = "powerwork:make_workload", **gate: Any) -> RunConfig:
    return load_config(
        overrides={
            "bench.workload": workload,
            "bench.world_sizes": [1],
            "gate.baseline_dir": root / "baselines",
            "tracking.enabled": False,
            **{f"gate.{k}": v for k, v in gate.items()},
        }
    )


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
            path = run_bench(config, 1, root / f"b2b{i}-{j}", source_paths=side.source_paths)
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


def cmd_record_aa(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        side = checkout(root, "stack", 0)
        config = base_config(root)
        rounds = _aa_rounds(config, root, side, side, args.rounds, "aa")
    write_json(RESULTS / "aa-rounds.json", {"workload": f"layer stack, {LAYERS} layers", "rounds": rounds})


def cmd_resample(args: argparse.Namespace) -> None:
    pool = [r["change_log"] for r in read_json(RESULTS / "aa-rounds.json")["rounds"]]
    config = base_config(Path(tempfile.gettempdir()))
    ab, tol = config.gate.ab, config.gate.tolerances
    rng = random.Random(0)
    print(f"{len(pool)} recorded A/A rounds; {args.trials} resampled decisions per shift; rule as shipped")
    summary = {}
    for shift_pct in (0.0, -3.0, -5.0, -7.5, -10.0, -20.0):
        shift = math.log1p(shift_pct / 100)
        counts = {"PASS": 0, "FAIL": 0, "UNKNOWN": 0}
        rounds_used = []
        for _ in range(args.trials):
            seq: list[float] = []
            while True:
                seq.append(rng.choice(pool) + shift)
                decision = decide(seq, tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds)
                if decision.status != "CONTINUE":
                    break
            counts[decision.status] += 1
            rounds_used.append(len(seq))
        summary[shift_pct] = {**counts, "median_rounds": statistics.median(rounds_used)}
        print(
            f"  tokens/s change {shift_pct:+.1f}% (A/A rounds shifted): "
            f"FAIL {rate(counts['FAIL'], args.trials)}, UNKNOWN {rate(counts['UNKNOWN'], args.trials)}, "
            f"median rounds {statistics.median(rounds_used):g}"
        )
    write_json(RESULTS / "resample.json", {"pool": len(pool), "trials": args.trials, "by_shift": summary})


def _screen_decision(
    config: RunConfig, root: Path, cand: Side, history: list[dict[str, Any]], tag: str
) -> str:
    path = run_bench(config, 1, root / tag, source_paths=cand.source_paths)
    current = read_json(path)["samples"]
    tol = config.gate.tolerances
    base = history[-1]["samples"]
    past = [h["figures"] for h in history]
    return screen(base, current, past, tol.throughput_drop_pct, tol.confidence).status


def _history(config: RunConfig, root: Path, base: Side, runs: int) -> list[dict[str, Any]]:
    history = []
    for i in range(runs):
        samples = read_json(run_bench(config, 1, root / f"history{i}", source_paths=base.source_paths))[
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


def cmd_outage(args: argparse.Namespace) -> None:
    """MLflow down and an empty store: nothing can be compared, so no level may PASS (it would be a
    regression passing as a first run); each run goes through the whole local pipeline."""
    import os
    import socket

    from benchgate.compare import compare
    from benchgate.kfp.local_run import run_gate
    from benchgate.results import load_bundle

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
    sub.add_parser("record-aa").add_argument("--rounds", type=int, default=200)
    sub.add_parser("resample").add_argument("--trials", type=int, default=20000)
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
    commands = {"noise": cmd_noise, "record-aa": cmd_record_aa, "resample": cmd_resample}
    commands.update(power=cmd_power, outage=cmd_outage)
    commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
