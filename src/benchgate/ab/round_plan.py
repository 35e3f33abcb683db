"""What an A/B round is before it runs: how many steps each side measures, and which side goes first.

Steps per side. gate.ab.steps, or more where steps are so short that they would measure less than
gate.ab.min_measured_s (one host spike then moves a round's total little), at most MAX_ROUND_STEPS.
A workload with a periodic event (a checkpoint, an eval, a log flush every `period_steps` steps: its
optional `period_steps` member, workloads/base.py) gets rounds of a whole number of periods, at least
one: a round shorter than the period holds the event in some rounds and not in others, so a slower event
would read as round-to-round noise, never as the change it is. Whole periods also put the same number of
events into every round, wherever the event falls. Where the period makes a round much longer than it
would be otherwise, `RoundLength.warning` says so (ab.json, and the A/B's opening line).

Slots. Each side of a round holds a slot: launched first or second, first or second in each pair of
turns. A side launched first in every round was measured ~0.5% faster in A/A rounds of this harness
(docs/benchmarks.md, "Balanced slots"), so no slot may belong to one side: an interleaved round draws
which side launches first from its seed (`launch_order`; the pairs of turns draw their own order,
measure/turns.py), and the sequential layout keeps its A B | B A alternation from a seeded first order
(`sequential_order`), so that the launch a round's drift or a warm cache favours falls on each side
alike and no side is always first.

Pure: no processes, no files.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchgate.config import RunConfig
from benchgate.errors import BadInputError

# No round measures more steps than this, however short they are; a period longer than this is still
# covered once (coverage of the event is the point of the period), with a warning.
MAX_ROUND_STEPS = 2000
# A period that makes a round more than this many times as long as it would be otherwise is warned of.
LONG_ROUND_FACTOR = 2.0
ORDERS = ("AB", "BA")


@dataclass(frozen=True)
class RoundLength:
    """Measured steps per side in every round of one A/B, and why that many."""

    steps: int
    why: str  # for ab.json: "gate.ab.steps", "30 steps of 14 ms measure at least gate.ab.min_measured_s"
    period_steps: int | None = None
    warning: str | None = None  # the period made a round long

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "why": self.why,
            "period_steps": self.period_steps,
            "warning": self.warning,
        }


def checked_period(value: Any, field: str) -> int | None:
    """A period in steps as a result file or workload states it: None where absent; an int > 0 (not a bool),
    else an error naming `field` and the value."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadInputError(
            f"{field}: got {value!r}; expected an int > 0 (the steps from one periodic event of the "
            "workload to the next), or no period_steps at all"
        )
    return value


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.3g} ms"


def round_length(config: RunConfig, step_s: float | None, period_steps: int | None = None) -> RoundLength:
    """Measured steps per side in a round (see the module's docstring). `step_s`: the bench's typical step
    time at this world size (None or <= 0: unknown); `period_steps`: the workload's period (None: none)."""
    ab = config.gate.ab
    period = checked_period(period_steps, "period_steps")
    steps, why = ab.steps, "gate.ab.steps"
    if step_s and step_s > 0:
        wanted = math.ceil(ab.min_measured_s / step_s)
        if wanted > ab.steps:
            steps = min(MAX_ROUND_STEPS, wanted)
            why = f"{steps} steps of {_ms(step_s)} measure gate.ab.min_measured_s = {ab.min_measured_s:g} s"
            if wanted > MAX_ROUND_STEPS:
                why += f" (at most {MAX_ROUND_STEPS} steps)"
    if period is None:
        return RoundLength(steps, why)
    periods = math.ceil(steps / period)
    if periods * period > MAX_ROUND_STEPS:
        periods = max(1, MAX_ROUND_STEPS // period)  # whole periods under the cap where one fits
    covered = periods * period
    plural = "s" if periods > 1 else ""
    covered_why = f"{periods} period{plural} of the workload's period_steps = {period} (for {why}: {steps})"
    warning = None
    if covered > LONG_ROUND_FACTOR * steps:
        longer = f"{covered / steps:.1f}x the {steps} steps of {why}"
        measured = f", about {covered * step_s:.3g} s measured per side" if step_s and step_s > 0 else ""
        warning = (
            f"the workload's period_steps = {period} makes each A/B round {covered} steps per side, "
            f"{longer}{measured}: fewer rounds fit in gate.ab.max_seconds = {ab.max_seconds:g} s"
        )
    return RoundLength(covered, covered_why, period, warning)


def round_steps(config: RunConfig, step_s: float | None, period_steps: int | None = None) -> int:
    """Measured steps per side in a round: `round_length`'s steps."""
    return round_length(config, step_s, period_steps).steps


def launch_order(seed: int) -> str:
    """Which side of an interleaved round launches first ("AB": the base, "BA": the candidate), drawn from
    the round's seed. A stream of its own (the seed's string form seeds it), so that it is not the first
    draw of the turn coordinator's order stream, which is seeded by the same number."""
    return ORDERS[random.Random(f"launch order {seed}").random() >= 0.5]


def first_sequential_order(seed: int, saved: Sequence[Mapping[str, Any]] = ()) -> str:
    """The first round's launch order in the sequential layout: drawn from bench.seed, or where rounds are
    `saved` (a resume), their first round's (its `first_side`), so that the alternation goes on."""
    side = saved[0].get("first_side") if saved else None
    if side in ("A", "B"):
        return "AB" if side == "A" else "BA"
    return ORDERS[random.Random(f"sequential first {seed}").random() >= 0.5]


def sequential_order(index: int, first: str = "AB") -> str:
    """The launch order of round `index` (from 1) in the sequential layout: `first` in odd rounds and the
    other order in even ones, so the launches run A B | B A | A B ... (or B A | A B ...): a drift over a
    round's seconds, or a cost that the second launch pays for the first (a warm page cache, a hot or
    throttled device), lands on each side first equally often, and a resume continues the pattern by
    the round's index and its first round's order."""
    if first not in ORDERS:
        raise BadInputError(f"sequential order: got {first!r}; expected one of {', '.join(ORDERS)}")
    return first if index % 2 else first[::-1]
