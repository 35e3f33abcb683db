"""Interleaved A/B timing on one machine: the base code (A) and the candidate (B), round after round.

A round starts a fresh torchrun worker group per side, at the same world size, and lets them take
turns step by step (benchgate.measure.turns) in a random order per pair of steps, warmup included, with rank r
of both sides pinned to the same cores on CPU (gate.ab.pin_cores: measured, the round-to-round spread
fell from 5-8% to under 2%, docs/benchmarks.md). Fresh groups each round sample what differs between
launches of identical code (memory layout), which one long-lived pair of groups would bake into every
step. A round measures at least gate.ab.min_measured_s per side (more steps where steps are short), so
that one host spike moves a round's total time little. After each round the sequential rule
(ab/decision.py) says FAIL, PASS or "another round", until the round or time budget runs out (UNKNOWN).
An UNKNOWN can be resumed: `run_ab(..., resume=True)` continues from the rounds in ab.json.

The harness is this benchgate on both sides; only the workload's code comes from each side's
checkout (`Side.source_paths`), so a difference is the workload's, never the harness's.

    <out>/ab/ws<N>/round<k>/{A,B}/metrics-ws<N>.json   every sample of every round
    <out>/ab/ws<N>/ab.json                             the rounds' figures and steps, and the decision
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchgate.ab.decision import ABDecision, decide, round_change, round_diagnostics
from benchgate.config import RunConfig
from benchgate.errors import BadInputError, BenchgateError, RunFailedError
from benchgate.kit import stats
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import run_bench
from benchgate.measure.turns import TurnCoordinator

AB_FILE = "ab.json"
RoundCallback = Callable[[int, ABDecision], None]


@dataclass(frozen=True)
class Side:
    """One side of the comparison: which code, and where its workload is imported from."""

    description: str  # for messages, e.g. "base 1a2b3c4d5e6f"
    commit: str | None = None
    source_paths: tuple[Path, ...] = ()


@dataclass
class ABOutcome:
    world_size: int
    decision: ABDecision
    rounds: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self, base: Side, candidate: Side) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "base": {"commit": base.commit, "description": base.description},
            "candidate": {"commit": candidate.commit, "description": candidate.description},
            "seconds": self.seconds,
            "decision": self.decision.to_dict(),
            "rounds": self.rounds,
        }


# No round measures more steps than this, however short they are.
MAX_ROUND_STEPS = 2000


def round_steps(config: RunConfig, step_s: float | None) -> int:
    """Measured steps per side in a round: gate.ab.steps, or more where `step_s` (the bench's typical step
    time at this world size) is so short that they would measure less than gate.ab.min_measured_s."""
    ab = config.gate.ab
    if not step_s or step_s <= 0:
        return ab.steps
    return max(ab.steps, min(MAX_ROUND_STEPS, math.ceil(ab.min_measured_s / step_s)))


def round_config(config: RunConfig, steps: int | None = None) -> RunConfig:
    """The bench settings of one side in a round: A/B steps, and no drift reference or sampler.

    Pairing neighbouring steps already cancels the host's drift, so the reference kernel would only
    add time; the system-metrics sampler would add a thread to one side only.
    """
    update = {
        "steps": steps or config.gate.ab.steps,
        # A compiled model compiles at its first step, which must not be a measured one.
        "warmup": max(config.gate.ab.warmup, 1) if config.bench.compile else config.gate.ab.warmup,
        "drift_reference": False,
    }
    bench = config.bench.model_copy(update=update)
    tracking = config.tracking.model_copy(update={"system_metrics": False})
    return config.model_copy(update={"bench": bench, "tracking": tracking})


def _first_cause(failures: dict[str, BaseException], sides: dict[str, Side]) -> BenchgateError:
    # A side that fails on its own (bad workload, a crash) makes the other one lose its coordinator:
    # report the bad input first, then any failure that is not just the lost coordinator.
    def rank(item: tuple[str, BaseException]) -> int:
        exc = item[1]
        if isinstance(exc, BadInputError):
            return 0
        return 2 if "turn coordinator" in str(exc) else 1

    label, exc = min(failures.items(), key=rank)
    message = f"A/B {sides[label].description}: {exc}"
    return BadInputError(message) if isinstance(exc, BadInputError) else RunFailedError(message)


def run_round(
    config: RunConfig,
    world_size: int,
    round_dir: Path,
    base: Side,
    candidate: Side,
    gpus: int | None,
    seed: int,
    steps: int | None = None,
) -> dict[str, Any]:
    """One round: both sides launched at once, taking turns; returns the round's figures."""
    settings = round_config(config, steps)
    sides = {"A": base, "B": candidate}
    coordinator = TurnCoordinator(ranks_per_side=world_size, timeout_s=config.bench.timeout_s, seed=seed)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures: dict[str, Future[Path]] = {
            label: pool.submit(
                run_bench,
                settings,
                world_size,
                round_dir / label,
                None,
                gpus,
                source_paths=side.source_paths,
                turns=(coordinator.address, label),
                pin_cores=config.gate.ab.pin_cores,
            )
            for label, side in sides.items()
        }
        coordination: BaseException | None = None
        try:
            orders = coordinator.run(
                settings.bench.steps,
                alive=lambda: not any(f.done() for f in futures.values()),
                warmup=settings.bench.warmup,
            )
        except RunFailedError as e:
            coordination, orders = e, []
        failures = {label: f.exception() for label, f in futures.items()}
    failed = {label: exc for label, exc in failures.items() if exc is not None}
    if failed:
        raise _first_cause(failed, sides)
    if coordination is not None:
        raise RunFailedError(f"A/B ws={world_size}: {coordination}")
    a = read_json(futures["A"].result())["samples"]
    b = read_json(futures["B"].result())["samples"]
    return {
        "change_log": round_change(a["step_time_s"], b["step_time_s"]),
        **round_diagnostics(a["step_time_s"], b["step_time_s"]),
        "base_tokens_per_s": _rate(a),
        "candidate_tokens_per_s": _rate(b),
        # CPU each side used while idle, as a share of the other side's measured time (ab.IDLE_CPU_FLAG).
        "base_idle_cpu_share": float(a.get("idle_cpu_s", 0.0)) / sum(b["step_time_s"]),
        "candidate_idle_cpu_share": float(b.get("idle_cpu_s", 0.0)) / sum(a["step_time_s"]),
        "base_p50_s": stats.percentile(a["step_time_s"], 50),
        "candidate_p50_s": stats.percentile(b["step_time_s"], 50),
        "base_tokens_per_s_p50": stats.percentile(a["tokens_per_s"], 50),
        "candidate_tokens_per_s_p50": stats.percentile(b["tokens_per_s"], 50),
        "pairs": len(a["step_time_s"]),
        "base_step_s": a["step_time_s"],
        "candidate_step_s": b["step_time_s"],
        "base_first": sum(order == "AB" for order in orders),
        "seconds": time.monotonic() - started,
    }


def _rate(samples: dict[str, Any]) -> float:
    """tokens/s over a side's whole round: tokens over total time, as the round figure judges it."""
    tokens = sum(r * t for r, t in zip(samples["tokens_per_s"], samples["step_time_s"], strict=True))
    return float(tokens / sum(samples["step_time_s"]))


def saved_rounds(path: Path, base: Side, candidate: Side) -> list[dict[str, Any]]:
    """The rounds an earlier, undecided A/B of the same two commits saved in `path` (ab.json).

    A resume continues that sequence; rounds of other commits are refused, never mixed in (a working
    tree candidate, commit None, is the caller's to check: publish/resume.py)."""
    saved = read_json(path)
    for label, side in (("base", base), ("candidate", candidate)):
        commit = (saved.get(label) or {}).get("commit")
        if commit != side.commit:
            raise BadInputError(
                f"--resume: {path} holds an A/B of {label} {commit or 'a working tree'}, not of "
                f"{side.commit or 'a working tree'}; a resume continues the same two sides only"
            )
    if saved["decision"]["status"] in ("PASS", "FAIL"):
        raise BadInputError(f"--resume: {path} is decided already ({saved['decision']['status']})")
    return list(saved["rounds"])


def run_ab(
    config: RunConfig,
    world_size: int,
    out_dir: Path,
    base: Side,
    candidate: Side,
    gpus: int | None = None,
    on_round: RoundCallback | None = None,
    step_s: float | None = None,
    resume: bool = False,
) -> ABOutcome:
    """Rounds of A/B at `world_size` until the rule decides or the budget is spent.

    `step_s`: the typical step time at this world size, which sets the steps per round (round_steps).
    `resume`: continue the rounds saved in <out>/ab/ws<N>/ab.json (the budget starts afresh)."""
    ab = config.gate.ab
    ws_dir = out_dir / "ab" / f"ws{world_size}"
    started = time.monotonic()
    rounds = saved_rounds(ws_dir / AB_FILE, base, candidate) if resume else []
    steps = round_steps(config, step_s)
    outcome = ABOutcome(world_size, _decision(config, rounds, False), rounds)
    while outcome.decision.status == "CONTINUE":
        index = len(outcome.rounds) + 1
        figures = run_round(
            config,
            world_size,
            ws_dir / f"round{index}",
            base,
            candidate,
            gpus,
            seed=config.bench.seed + index,
            steps=steps,
        )
        outcome.rounds.append(figures)
        elapsed = time.monotonic() - started
        # No round may start that would end past the budget: judge by the slowest round so far.
        slowest = max(r["seconds"] for r in outcome.rounds)
        outcome.decision = _decision(config, outcome.rounds, elapsed + slowest > ab.max_seconds)
        outcome.seconds = elapsed
        write_json(ws_dir / AB_FILE, outcome.to_dict(base, candidate))
        if on_round is not None:
            on_round(index, outcome.decision)
    return outcome


def _decision(config: RunConfig, rounds: list[dict[str, Any]], out_of_time: bool) -> ABDecision:
    ab, tol = config.gate.ab, config.gate.tolerances
    changes = [r["change_log"] for r in rounds]
    return decide(changes, tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds, out_of_time)


def round_change_pct(figures: dict[str, Any]) -> float:
    return 100.0 * math.expm1(float(figures["change_log"]))
