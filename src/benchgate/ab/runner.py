"""A/B timing on one machine: the base code (A) and the candidate (B), round after round.

A round starts a fresh torchrun worker group per side, at the same world size. Fresh groups each round
sample what differs between launches of identical code (memory layout), which one long-lived pair of
groups would bake into every step. A round measures at least gate.ab.min_measured_s per side (more steps
where steps are short), so that one host spike moves a round's total time little. After each round the
sequential rule (ab/decision.py) says FAIL, PASS or "another round", until the round or time budget runs
out (UNKNOWN). An UNKNOWN can be resumed: `run_ab(..., resume=True)` continues from the rounds in ab.json.

How the two sides share the machine is the layout (gate.ab.layout, ab/layout.py):
- interleaved (`run_round`): both groups alive, taking turns step by step (benchgate.measure.turns) in
  a random order per pair of turns, warmup included, with rank r of both sides pinned to the same cores
  on CPU (gate.ab.pin_cores: measured, the round-to-round spread fell from 5-8% to under 2%,
  docs/benchmarks.md), and the side launched first drawn from the round's seed (ab/round_plan.py);
- sequential (`run_sequential_round`): one group alive at a time, for a GPU that cannot hold both: the
  round is one plain launch per side, the order alternating A B | B A | ... from a seeded first.
Either way the round's figure is `round_change` of the two sides' step times. A round covers the
workload's periodic event, where it declares one (`period_steps`: ab/round_plan.round_length).

The harness is this benchgate on both sides; only the workload's code comes from each side's
checkout (`Side.source_paths`), so a difference is the workload's, never the harness's.

    <out>/ab/ws<N>/round<k>/{A,B}/metrics-ws<N>.json   every sample of every round
    <out>/ab/ws<N>/ab.json                             the layout, the rounds' figures and steps, the decision
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchgate.ab.decision import ABDecision, decide_rounds
from benchgate.ab.layout import LAYOUTS, Layout, layout_for
from benchgate.ab.round_figures import round_figures, round_throttling
from benchgate.ab.round_plan import (
    RoundLength,
    checked_period,
    first_sequential_order,
    launch_order,
    round_length,
    sequential_order,
)
from benchgate.checks.loss import round_losses
from benchgate.config import RunConfig
from benchgate.errors import BadInputError, BenchgateError, RunFailedError
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import metrics_path, stage_bench, uses_cuda, visible_gpus
from benchgate.measure.turns import TurnCoordinator, steps_per_turn, turn_count

AB_FILE = "ab.json"
# How a resume's layout note begins: the rounds it continues chose the layout.
RESUMED = "as the rounds it resumes: "
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
    # Every A/B was interleaved before layouts could be chosen; run_ab always states its own.
    layout: Layout = field(default_factory=lambda: Layout("interleaved", "no layout stated"))
    length: RoundLength | None = None  # the rounds' steps per side and why (None: not stated)
    # What the change is made of, from profiled rounds after the decision (ab/explain.py); None: not run.
    attribution: dict[str, Any] | None = None

    def to_dict(self, base: Side, candidate: Side) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "base": {"commit": base.commit, "description": base.description},
            "candidate": {"commit": candidate.commit, "description": candidate.description},
            "layout": self.layout.to_dict(),
            **({"round_length": self.length.to_dict()} if self.length else {}),
            "seconds": self.seconds,
            "decision": self.decision.to_dict(),
            "rounds": self.rounds,
            **({"attribution": self.attribution} if self.attribution is not None else {}),
        }


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


def _device_type(config: RunConfig, gpus: int | None) -> str:
    """Where the sides' steps run: "cuda" or "cpu" (`gpus`: the host's CUDA devices, None to ask torch)."""
    return "cuda" if uses_cuda(config.bench.device, visible_gpus() if gpus is None else gpus) else "cpu"


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
    op_trace: bool = False,
    op_trace_memory: bool = False,
) -> dict[str, Any]:
    """One round: both sides launched at once, taking turns; returns the round's figures. `op_trace`:
    both sides profile their measured steps (an explaining round, ab/explain.py), with allocations where
    `op_trace_memory`.

    Which side launches first is drawn from `seed` (ab/round_plan.launch_order): the first launch builds
    its model on a quieter host and earlier in memory, and always giving that slot to the base made the
    candidate ~0.5% slower in A/A rounds (docs/benchmarks.md, "Balanced slots")."""
    settings = round_config(config, steps)
    order = launch_order(seed)
    sides = {label: (base if label == "A" else candidate) for label in order}  # submitted in launch order
    coordinator = TurnCoordinator(ranks_per_side=world_size, timeout_s=config.bench.timeout_s, seed=seed)
    # The workers take turns of one synchronised window on CUDA (measure/turns.py): count those.
    per_turn = steps_per_turn(config.bench.sync_every)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures: dict[str, Future[Path]] = {
            label: pool.submit(
                stage_bench,
                settings,
                world_size,
                round_dir / label,
                None,
                gpus,
                source_paths=side.source_paths,
                turns=(coordinator.address, label),
                pin_cores=config.gate.ab.pin_cores,
                op_trace=op_trace,
                op_trace_memory=op_trace_memory,
            )
            for label, side in sides.items()
        }
        coordination: BaseException | None = None
        try:
            orders = coordinator.run(
                turn_count(settings.bench.steps, per_turn),
                alive=lambda: not any(f.done() for f in futures.values()),
                warmup=turn_count(settings.bench.warmup, per_turn),
            )
        except RunFailedError as e:
            coordination, orders = e, []
        failures = {label: f.exception() for label, f in futures.items()}
    failed = {label: exc for label, exc in failures.items() if exc is not None}
    if failed:
        raise _first_cause(failed, sides)
    if coordination is not None:
        raise RunFailedError(f"A/B ws={world_size}: {coordination}")
    a_metrics, b_metrics = read_json(futures["A"].result()), read_json(futures["B"].result())
    a, b = a_metrics["samples"], b_metrics["samples"]
    return {
        **round_throttling(a_metrics, b_metrics),
        **round_figures(a, b),
        **round_losses(a_metrics, b_metrics),  # each side's per-step losses (checks/loss.py)
        # CPU each side used while idle, as a share of the other side's measured time (ab.IDLE_CPU_FLAG).
        "base_idle_cpu_share": float(a.get("idle_cpu_s", 0.0)) / sum(b["step_time_s"]),
        "candidate_idle_cpu_share": float(b.get("idle_cpu_s", 0.0)) / sum(a["step_time_s"]),
        "base_first": sum(pair == "AB" for pair in orders),  # pairs of turns the base took first
        "base_launched_first": order == "AB",
        "seconds": time.monotonic() - started,
    }


def run_sequential_round(
    config: RunConfig,
    world_size: int,
    round_dir: Path,
    base: Side,
    candidate: Side,
    gpus: int | None,
    index: int,
    steps: int | None = None,
    first: str = "AB",
    op_trace: bool = False,
    op_trace_memory: bool = False,
) -> dict[str, Any]:
    """One round of the sequential layout: a plain launch of each side at the round's steps, one after
    the other in `sequential_order(index, first)`; returns the round's figures as `run_round` does.

    No turn coordinator and no pinning (gate.ab.pin_cores is for interleaved rounds): the other side is
    not alive while one is measured, and its launch frees the device before the next starts
    (docs/design.md, "A/B layouts")."""
    settings = round_config(config, steps)
    sides = {"A": base, "B": candidate}
    order = sequential_order(index, first)
    started = time.monotonic()
    paths: dict[str, Path] = {}
    launch_s: dict[str, float] = {}
    for label in order:
        launched = time.monotonic()
        try:
            paths[label] = stage_bench(
                settings,
                world_size,
                round_dir / label,
                None,
                gpus,
                source_paths=sides[label].source_paths,
                count_flops=False,  # a round's step times are all that is read
                op_trace=op_trace,
                op_trace_memory=op_trace_memory,
            )
        except BenchgateError as e:
            raise _first_cause({label: e}, sides) from None
        launch_s[label] = time.monotonic() - launched
    a_metrics, b_metrics = read_json(paths["A"]), read_json(paths["B"])
    a, b = a_metrics["samples"], b_metrics["samples"]
    return {
        **round_figures(a, b),
        **round_throttling(a_metrics, b_metrics),
        **round_losses(a_metrics, b_metrics),
        "first_side": order[0],
        # As in an interleaved round: the pairs in which A ran first (here all of them or none).
        "base_first": len(a["step_time_s"]) if order[0] == "A" else 0,
        "base_launched_first": order[0] == "A",
        "base_launch_s": launch_s["A"],
        "candidate_launch_s": launch_s["B"],
        "seconds": time.monotonic() - started,
    }


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


def ab_layout(config: RunConfig, world_size: int, run_dir: Path, gpus: int | None = None) -> Layout:
    """gate.ab.layout for an A/B at `world_size`; `auto` decides from the run's env.json and
    metrics-ws<N>.json in `run_dir` (a gate run's result directory holds both), read only on CUDA."""
    device_type = _device_type(config, gpus)
    requested = config.gate.ab.layout
    if requested != "auto" or device_type != "cuda":
        return layout_for(requested, device_type, world_size, None, None)
    env = _optional_json(run_dir / "env.json")
    metrics = _optional_json(metrics_path(run_dir, world_size))
    return layout_for(requested, device_type, world_size, env, metrics)


def _optional_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = read_json(path)
    except ValueError as e:
        raise BadInputError(str(e)) from None
    return data if isinstance(data, dict) else None


def resumed_layout(path: Path, requested: str, chosen: Layout) -> Layout:
    """The layout a resume of the A/B saved in `path` continues in: the one its rounds ran in, so that
    every round of one decision was measured alike. `requested` other than auto must be that one."""
    saved = read_json(path).get("layout") or {}
    # ab.json files written before layouts existed are of interleaved rounds.
    before = saved.get("name", "interleaved")
    if before not in LAYOUTS:
        raise BadInputError(f"--resume: {path} layout.name: got {before!r}; expected one of {LAYOUTS}")
    if requested == "auto":
        why = str(saved.get("why") or "").removeprefix(RESUMED)  # a resumed resume names the first why
        return Layout(before, f"{RESUMED}{why}" if why else RESUMED.removesuffix(": "))
    if requested != before:
        raise BadInputError(
            f"gate.ab.layout: got {requested!r}, but the rounds saved in {path} ran {before}; a resume "
            f"continues in the same layout (set gate.ab.layout to auto or {before})"
        )
    return chosen


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
    *,
    layout: Layout | None = None,
    period_steps: int | None = None,
) -> ABOutcome:
    """Rounds of A/B at `world_size` until the rule decides or the budget is spent.

    `step_s`: the typical step time at this world size, which sets the steps per round (round_length).
    `resume`: continue the rounds saved in <out>/ab/ws<N>/ab.json (the budget starts afresh), in their
    layout. `layout`: how the sides share the machine; by default gate.ab.layout, `auto` decided from
    <out>/env.json and <out>/metrics-ws<N>.json (ab_layout). `period_steps`: the workload's period, which
    every round covers; by default the one <out>/metrics-ws<N>.json states (the bench's workload's)."""
    ab = config.gate.ab
    ws_dir = out_dir / "ab" / f"ws{world_size}"
    started = time.monotonic()
    chosen = layout or ab_layout(config, world_size, out_dir, gpus)
    rounds: list[dict[str, Any]] = []
    if resume:
        rounds = saved_rounds(ws_dir / AB_FILE, base, candidate)
        chosen = resumed_layout(ws_dir / AB_FILE, layout.name if layout else ab.layout, chosen)
    if period_steps is None:
        metrics = _optional_json(metrics_path(out_dir, world_size)) or {}
        field_name = f"{metrics_path(out_dir, world_size).name} period_steps"
        period_steps = checked_period(metrics.get("period_steps"), field_name)
    length = round_length(config, step_s, period_steps)
    steps = length.steps
    first = first_sequential_order(config.bench.seed, rounds)
    outcome = ABOutcome(world_size, _decision(config, rounds, False), rounds, layout=chosen, length=length)
    while outcome.decision.status == "CONTINUE":
        index = len(outcome.rounds) + 1
        round_dir = ws_dir / f"round{index}"
        if chosen.name == "sequential":
            figures = run_sequential_round(
                config, world_size, round_dir, base, candidate, gpus, index, steps, first
            )
        else:
            seed = config.bench.seed + index
            figures = run_round(config, world_size, round_dir, base, candidate, gpus, seed=seed, steps=steps)
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
    return decide_rounds(
        rounds, tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds, out_of_time
    )
