"""Why an A/B decided what it did: profiled rounds after the decision, read as per-operator change.

After the rule has decided (FAIL, or any answer where gate.ab.explain is "always"), gate.ab.explain_rounds
more rounds run in the decision's layout, interleaved and pinned (or sequential) as its rounds were, with
both sides profiling their measured steps (measure/op_trace.py). They come after the decision and are
kept apart from its rounds (`ab/ws<N>/explain/round<k>/`), so the profiler's cost never biases it.
attribution/attribute.py pairs their steps and names the operators, kernels and ranges that the change
is made of; the block goes into ab.json (and compare.json, ab/stage.py) with the traces' paths.

A profiled round is shorter than a deciding one (EXPLAIN_STEPS measured and EXPLAIN_WARMUP warmup
steps at most): its launches cost what a deciding round's do, the per-step pairs give the intervals, and
what it adds to a FAIL is measured in docs/benchmarks.md ("Attribution: does a FAIL name its cause?").
Its steps are compiled and synchronised as the deciding rounds' are (the same round settings).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchgate.ab.round_plan import first_sequential_order
from benchgate.ab.runner import ABOutcome, Side, run_round, run_sequential_round
from benchgate.attribution.attribute import ProfiledRound, ProfiledSide, attribute
from benchgate.attribution.trace_ops import TRACE_SUFFIX, read_traces
from benchgate.config import MIN_STEPS, RunConfig
from benchgate.errors import BenchgateError
from benchgate.measure.launch import OP_TRACE_DIR
from benchgate.results.comparison import Comparison

EXPLAIN_DIR = "explain"
EXPLAIN_STEPS = 8  # per side and profiled round, at most (the deciding rounds' length, where shorter)
EXPLAIN_WARMUP = 2  # per side, at most (the deciding rounds' warmup, where shorter)
# A seed apart from the deciding rounds' (bench.seed + index): the explaining rounds draw their own
# launch order.
SEED_OFFSET = 10_000


def wants_explanation(config: RunConfig, status: str) -> bool:
    """Whether the A/B that decided `status` is explained (gate.ab.explain)."""
    explain = config.gate.ab.explain
    return explain == "always" or (explain == "fail" and status == "FAIL")


def explain_ab(
    config: RunConfig,
    outcome: ABOutcome,
    ws_dir: Path,
    base: Side,
    candidate: Side,
    gpus: int | None,
    memory: bool = False,
) -> dict[str, Any]:
    """Run the explaining rounds of the decided `outcome` into `ws_dir/explain/`; its attribution block.
    `memory`: record allocations too (where the run's memory row grew), for the block's `allocations`."""
    world_size = outcome.world_size
    deciding = outcome.length.steps if outcome.length else config.gate.ab.steps
    steps = max(MIN_STEPS, min(deciding, EXPLAIN_STEPS))
    settings = _explaining(config)
    first = first_sequential_order(config.bench.seed, outcome.rounds)
    started = time.monotonic()
    step_times: list[tuple[Path, list[float]]] = []  # per profiled side: its directory, its step times
    for index in range(1, config.gate.ab.explain_rounds + 1):
        round_dir = ws_dir / EXPLAIN_DIR / f"round{index}"
        traced = {"op_trace": True, "op_trace_memory": memory}
        if outcome.layout.name == "sequential":
            figures = run_sequential_round(
                settings, world_size, round_dir, base, candidate, gpus, index, steps, first, **traced
            )
        else:
            seed = config.bench.seed + SEED_OFFSET + index
            figures = run_round(
                settings, world_size, round_dir, base, candidate, gpus, seed=seed, steps=steps, **traced
            )
        step_times += [
            (round_dir / "A", figures["base_step_s"]),
            (round_dir / "B", figures["candidate_step_s"]),
        ]
    paths = [sorted((side / OP_TRACE_DIR).glob(f"rank*{TRACE_SUFFIX}")) for side, _ in step_times]
    read = iter(read_traces([p for side_paths in paths for p in side_paths]))
    sides = [
        ProfiledSide([next(read) for _ in side_paths], times)
        for side_paths, (_, times) in zip(paths, step_times, strict=True)
    ]
    profiled = [ProfiledRound(sides[i], sides[i + 1]) for i in range(0, len(sides), 2)]
    block = attribute(profiled, config.gate.tolerances.confidence, decided_change_ms(outcome))
    return {
        **block,
        "world_size": world_size,
        "decision": outcome.decision.status,
        "layout": outcome.layout.name,
        "steps_per_round": steps,
        "memory_profiled": memory,
        "seconds": time.monotonic() - started,
        "decision_seconds": outcome.seconds,
        # Relative to the run directory (ws_dir's grandparent), as the result bundle moves as a whole.
        "traces": [str(p.relative_to(ws_dir.parent.parent)) for side_paths in paths for p in side_paths],
    }


def explain_or_why(
    config: RunConfig,
    outcome: ABOutcome,
    ws_dir: Path,
    base: Side,
    candidate: Side,
    gpus: int | None,
    memory: bool = False,
) -> dict[str, Any]:
    """explain_ab, or where its profiled rounds fail, a block that says why: the explanation never costs
    the decision it explains (a gate run's verdict, a bisect's culprit)."""
    try:
        return explain_ab(config, outcome, ws_dir, base, candidate, gpus, memory)
    except BenchgateError as e:
        return {"world_size": outcome.world_size, "entries": [], "why": f"the profiled rounds failed: {e}"}


def _explaining(config: RunConfig) -> RunConfig:
    """The deciding rounds' settings with at most EXPLAIN_WARMUP warmup steps: paired steps see the same
    warm-up, and a shorter one is most of what keeps an explaining round cheaper than a deciding one."""
    ab = config.gate.ab.model_copy(update={"warmup": min(config.gate.ab.warmup, EXPLAIN_WARMUP)})
    return config.model_copy(update={"gate": config.gate.model_copy(update={"ab": ab})})


def memory_grew(comparison: Comparison, world_size: int) -> bool:
    """Whether the run's peak memory row at `world_size` WARNed or FAILed: the explanation then records
    allocations, to name the operators that allocate more."""
    name = f"peak memory (ws={world_size})"
    return any(c.name == name and c.status in ("WARN", "FAIL") for c in comparison.checks)


def decided_change_ms(outcome: ABOutcome) -> float | None:
    """The deciding rounds' change in ms per step: their base step time, and the tokens/s change the
    rule estimated (tokens/s x (1 + c) means step time / (1 + c)). None where the rule gave no estimate."""
    change = outcome.decision.change_pct
    steps: list[float] = [s for r in outcome.rounds for s in r.get("base_step_s", [])]
    if change is None or not steps or change <= -100:
        return None
    base_ms = 1e3 * sum(steps) / len(steps)
    return base_ms * (1.0 / (1.0 + change / 100.0) - 1.0)
