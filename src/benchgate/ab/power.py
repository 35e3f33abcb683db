"""What the A/B can decide on this machine: the smallest change it resolves, and how long that takes.

A verdict is only worth its error rates. From the round-to-round spread of the A/B's round figure (sd,
log units, as `decide()` measures it), the seconds a round takes, and the gate's settings (tolerance T,
confidence, min_rounds, max_rounds, max_seconds), the resolution at each look of the A/B is

    δ(n) = (b(n) + t_0.8(n-1)) · sd / √n                               (log units)

with the same look schedule and FAIL bound b(n) of each look as `decide()` (ab/levels.py, so the two
cannot drift apart). It is `decide()`'s own minimum-detectable-effect margin: a true slowdown of
T + δ FAILs at that look with 80% power, and one of T - δ PASSes with 80% power. In percent it is
written as `decide()` writes `mde_pct` (expm1 of the log figure): `resolution_pct` is exactly
`mde_pct - T` for the same rounds and sd.

The tolerance is *reachable* at a look when an unchanged commit PASSes there with 80% power, i.e.
δ(n) ≤ T in log units (T = -log1p(-T%/100)). In percent, T + δ and T - δ are not symmetric around T,
so near the boundary (δ between T - T² and T, in fractions) the percent δ reads just under T while the
look still falls short of 80%; `pass_below_pct` shows the PASS side exactly (≥ 0 where reachable).

The time budget is the runner's: no round starts that would end past gate.ab.max_seconds (per world
size), so with rounds of s seconds, floor(max_seconds / s) rounds fit, at most max_rounds. Looks past
that are listed but not reachable. Pure: no torch, no files; `benchgate doctor` and the A/B's opening
line (`OpeningFigure`) both print from here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from benchgate.ab.decision import MDE_POWER, ABDecision
from benchgate.ab.levels import look_bounds
from benchgate.config import GateConfig
from benchgate.kit import stats

# How the A/B's opening line begins: the terminal's progress (cli/run_output.py) recognises it in the
# stage markers and prints it above the bars instead of opening a bar for it.
OPENING_MARK = "A/B opening figure"


@dataclass(frozen=True)
class Look:
    rounds: int
    seconds: float  # expected wall time from the A/B's start to this look
    resolution_log: float  # δ(n), log units
    resolution_pct: float  # δ(n) as decide() writes it: mde_pct - tolerance
    fail_at_pct: float  # a true slowdown this large FAILs here with 80% power (decide()'s mde_pct)
    pass_below_pct: float  # a true slowdown this small PASSes here with 80% power (< 0: needs a speed-up)
    in_budget: bool  # this look is reached within max_seconds and max_rounds
    resolves: bool  # δ(n) <= T (log units): an unchanged commit PASSes here with 80% power


@dataclass(frozen=True)
class Plan:
    sd_log: float
    seconds_per_round: float
    tolerance_pct: float
    confidence: float
    min_rounds: int
    max_rounds: int
    max_seconds: float
    level: float  # the two-sided level of the first look's interval (each look has its own: ab/levels.py)
    rounds_in_budget: int
    seconds_in_budget: float
    looks: tuple[Look, ...]

    @property
    def last_look(self) -> Look | None:
        """The last look reached within the budget; None when not even the first one is."""
        reached = [look for look in self.looks if look.in_budget]
        return reached[-1] if reached else None

    @property
    def first_resolving(self) -> Look | None:
        """The first look within the budget where an unchanged commit PASSes with 80% power."""
        return next((look for look in self.looks if look.in_budget and look.resolves), None)

    @property
    def reachable(self) -> bool:
        return self.first_resolving is not None

    def sentence(self) -> str:
        return plan_sentence(self)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["looks"] = [asdict(look) for look in self.looks]
        data["reachable"] = self.reachable
        data["last_look"] = None if self.last_look is None else asdict(self.last_look)
        data["first_resolving"] = None if self.first_resolving is None else asdict(self.first_resolving)
        data["sentence"] = self.sentence()
        return data


def pct(log_ratio: float) -> float:
    """A log ratio in percent, as decide() writes one."""
    return 100.0 * math.expm1(log_ratio)


def _check(name: str, value: float, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"{name}: got {value!r}, expected {expected}")


def plan(
    sd_log: float,
    seconds_per_round: float,
    tolerance_pct: float,
    confidence: float,
    min_rounds: int,
    max_rounds: int,
    max_seconds: float,
) -> Plan:
    """The resolution at every look of the A/B, and what of it the time budget reaches."""
    _check("sd_log", sd_log, math.isfinite(sd_log) and sd_log >= 0, "a finite spread >= 0 (log units)")
    _check(
        "seconds_per_round",
        seconds_per_round,
        math.isfinite(seconds_per_round) and seconds_per_round > 0,
        "seconds > 0",
    )
    _check("tolerance_pct", tolerance_pct, 0 < tolerance_pct < 100, "a percentage between 0 and 100")
    _check("confidence", confidence, 0.5 < confidence < 1, "a probability between 0.5 and 1")
    _check("min_rounds", min_rounds, min_rounds >= 2, "at least 2 rounds")
    _check("max_rounds", max_rounds, max_rounds >= min_rounds, f"at least min_rounds ({min_rounds})")
    _check("max_seconds", max_seconds, max_seconds > 0, "seconds > 0")
    bounds = look_bounds(confidence, min_rounds, max_rounds)
    limit = math.log1p(-tolerance_pct / 100.0)  # the decision's bound, log units (negative)
    # The runner starts a round only if it ends within max_seconds: k rounds of s seconds fit if k*s <= it.
    fit = math.floor(max_seconds / seconds_per_round + 1e-9)
    rounds_in_budget = min(max_rounds, fit)
    looks = []
    for bound in bounds:
        n = bound.rounds
        delta = (bound.fail_t + stats.t_quantile(MDE_POWER, n - 1)) * sd_log / math.sqrt(n)
        fail_at = -pct(limit - delta)  # exactly decide()'s mde_pct
        looks.append(
            Look(
                rounds=n,
                seconds=n * seconds_per_round,
                resolution_log=delta,
                resolution_pct=fail_at - tolerance_pct,
                fail_at_pct=fail_at,
                pass_below_pct=-pct(limit + delta),
                in_budget=n <= rounds_in_budget,
                resolves=delta <= -limit,
            )
        )
    return Plan(
        sd_log=sd_log,
        seconds_per_round=seconds_per_round,
        tolerance_pct=tolerance_pct,
        confidence=confidence,
        min_rounds=min_rounds,
        max_rounds=max_rounds,
        max_seconds=max_seconds,
        level=bounds[0].level(),
        rounds_in_budget=rounds_in_budget,
        seconds_in_budget=rounds_in_budget * seconds_per_round,
        looks=tuple(looks),
    )


def duration(seconds: float) -> str:
    """Seconds for a sentence: "45 s" under two minutes, else minutes ("4.2 min")."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def plan_sentence(p: Plan) -> str:
    """The plan in one plain sentence: what this machine resolves, or why the tolerance is out of reach."""
    tol = f"{p.tolerance_pct:g}%"
    resolving = p.first_resolving
    if resolving is not None:
        return (
            f"this machine resolves changes of {resolving.resolution_pct:.1f}% in about "
            f"{duration(resolving.seconds)} per world size: at the {tol} tolerance a "
            f"{resolving.fail_at_pct:.1f}% slowdown FAILs and an unchanged commit PASSes (80% power)"
        )
    last = p.last_look
    if last is None:
        first = p.looks[0]
        return (
            f"too slow for the budget: the first look needs {first.rounds} rounds (gate.ab.min_rounds), "
            f"about {duration(first.seconds)}, more than gate.ab.max_seconds ({duration(p.max_seconds)}); "
            f"there it would resolve {first.resolution_pct:.1f}%"
        )
    return (
        f"too noisy for {tol}: the smallest change it can see here in {duration(last.seconds)} is "
        f"{last.resolution_pct:.1f}% (a slowdown FAILs from {last.fail_at_pct:.1f}%, and an unchanged "
        "commit mostly ends UNKNOWN)"
    )


class OpeningFigure:
    """The planner's sentence for one world size's A/B, said once, at its first look.

    Fed every ABDecision the runner reports (`on_round`): the first one that carries a spread is the
    first look. The seconds per round are the time since this object was made over the rounds so far,
    so it is made right before the A/B starts; the budget left is max_seconds minus that time."""

    def __init__(
        self,
        world_size: int,
        tolerance_pct: float,
        confidence: float,
        min_rounds: int,
        max_rounds: int,
        max_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.world_size = world_size
        self.settings = (tolerance_pct, confidence, min_rounds, max_rounds, max_seconds)
        self.clock = clock
        self.started = clock()
        self.said = False

    @classmethod
    def for_gate(cls, gate: GateConfig, world_size: int) -> OpeningFigure:
        """The opening figure of an A/B at `world_size` under the gate's tolerance and [gate.ab] budget."""
        ab, tol = gate.ab, gate.tolerances
        return cls(
            world_size, tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds, ab.max_seconds
        )

    def line(self, decision: ABDecision) -> str | None:
        """The opening line at the first look, else None (before it, and after it was said)."""
        if self.said or decision.round_sd_pct is None or decision.rounds < 2:
            return None
        self.said = True
        elapsed = max(self.clock() - self.started, 1e-3)
        tolerance_pct, confidence, min_rounds, max_rounds, max_seconds = self.settings
        figure = plan(
            decision.round_sd_pct / 100.0,
            elapsed / decision.rounds,
            tolerance_pct,
            confidence,
            min_rounds,
            max_rounds,
            max_seconds,
        )
        left = max(0.0, max_seconds - elapsed)
        return (
            f"{OPENING_MARK} ws={self.world_size}: after {decision.rounds} rounds ({duration(elapsed)}, "
            f"round sd {decision.round_sd_pct:.1f}%, {duration(left)} of gate.ab.max_seconds left), "
            f"{figure.sentence()}"
        )


def is_opening_line(text: str) -> bool:
    return text.startswith(f"{OPENING_MARK} ws=")
