"""The Pareto frontier of a suite's entries: which variants are worth keeping, and which another beats.

Each panel weighs two objectives: tokens/s (more is better) against one figure where less is better
(perplexity, or peak memory). An entry *dominates* another when it is at least as fast and at least as
good on the other figure, and strictly better on one of them; the *frontier* is the entries nothing
dominates. Two entries with equal figures do not dominate each other: both stay on the frontier, since
neither is a reason to drop the other.

An entry without the panel's figure (no eval, hence no perplexity) cannot be placed on that panel: it is
left out of it, and the panel says so, rather than being drawn at zero or at infinity.

Pure: numbers in, frontier and sentences out. report.py reads the files, pareto_plot.py draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Objective = Literal["perplexity", "peak_memory"]
OBJECTIVES: tuple[Objective, ...] = ("perplexity", "peak_memory")
# How each objective is named in a sentence, and why an entry may lack it.
LABELS: dict[Objective, str] = {"perplexity": "perplexity", "peak_memory": "peak memory"}
MISSING: dict[Objective, str] = {
    "perplexity": "no perplexity (its run had no eval)",
    "peak_memory": "no peak memory",
}


@dataclass(frozen=True)
class Point:
    """One entry's figures; perplexity or peak memory is None where its run did not measure it."""

    name: str
    tokens_per_s: float
    perplexity: float | None = None
    peak_memory_bytes: float | None = None

    def __post_init__(self) -> None:
        # A NaN would compare false with everything and quietly land on the frontier.
        for field, value in (
            ("tokens_per_s", self.tokens_per_s),
            ("perplexity", self.perplexity),
            ("peak_memory_bytes", self.peak_memory_bytes),
        ):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"entry {self.name!r}: {field}: got {value!r} (expected a finite number ≥ 0)"
                )

    def figure(self, objective: Objective) -> float | None:
        return self.perplexity if objective == "perplexity" else self.peak_memory_bytes


@dataclass(frozen=True)
class Dominated:
    """An entry beaten by `by` (a frontier entry), and the sentence that says how."""

    point: Point
    by: Point
    sentence: str


@dataclass(frozen=True)
class Panel:
    """One panel's verdicts: the frontier slowest first (the order its line joins them), the dominated
    entries in the order given, and the entries left out for lack of the figure."""

    objective: Objective
    frontier: list[Point]
    dominated: list[Dominated]
    left_out: list[Point]

    def standing(self, name: str) -> str:
        """'frontier', 'dominated by X' or why the entry is not on this panel: a table cell."""
        if any(p.name == name for p in self.frontier):
            return "frontier"
        for d in self.dominated:
            if d.point.name == name:
                return f"dominated by {d.by.name}"
        if any(p.name == name for p in self.left_out):
            return MISSING[self.objective]
        raise KeyError(name)

    def notes(self) -> list[str]:
        """One sentence per dominated or left-out entry."""
        lines = [d.sentence for d in self.dominated]
        label = LABELS[self.objective]
        lines += [
            f"{p.name} is left out of the {label} panel: {MISSING[self.objective]}." for p in self.left_out
        ]
        return lines


def dominates(a: Point, b: Point, objective: Objective) -> bool:
    """a is at least as fast and at least as good on `objective` as b, and strictly better on one."""
    ya, yb = a.figure(objective), b.figure(objective)
    if ya is None or yb is None:
        return False
    no_worse = a.tokens_per_s >= b.tokens_per_s and ya <= yb
    return no_worse and (a.tokens_per_s > b.tokens_per_s or ya < yb)


def frontier(points: Sequence[Point], better: Objective) -> Panel:
    """Split `points` into the frontier and the dominated for tokens/s (maximised) against `better`
    (minimised). Each dominated entry is named with the fastest frontier entry that dominates it (the
    strongest alternative; on equal speed the better figure, then the name): one always exists, since
    dominance is transitive and the frontier holds every undominated entry."""
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"entry names must be unique; got {', '.join(twice)} more than once")
    placed = [p for p in points if p.figure(better) is not None]
    left_out = [p for p in points if p.figure(better) is None]
    top = [p for p in placed if not any(dominates(q, p, better) for q in placed)]
    dominated = []
    for p in placed:
        if p in top:
            continue
        by = min(
            (q for q in top if dominates(q, p, better)),
            key=lambda q: (-q.tokens_per_s, q.figure(better), q.name),
        )
        dominated.append(Dominated(p, by, _sentence(p, by, better)))
    top.sort(key=lambda p: (p.tokens_per_s, p.name))
    return Panel(better, top, dominated, left_out)


def _figure_text(objective: Objective, value: float, digits: int) -> str:
    if objective == "peak_memory":
        return f"{value / 2**20:,.{digits}f} MiB"
    return f"{value:,.{digits}f}"


def _pair(objective: Objective | None, mine: float, theirs: float, digits: int) -> str:
    """'mine vs theirs', with as many decimals as it takes for unequal values not to print alike."""

    def text(value: float, d: int) -> str:
        return f"{value:,.{d}f}" if objective is None else _figure_text(objective, value, d)

    while mine != theirs and text(mine, digits) == text(theirs, digits) and digits < 6:
        digits += 1
    unit = " tokens/s" if objective is None else ""
    return f"{text(mine, digits)} vs {text(theirs, digits)}{unit}"


def _sentence(p: Point, by: Point, objective: Objective) -> str:
    """'b is dominated by a: slower (1,234 vs 1,456 tokens/s) and no better perplexity (3.21 vs 3.20)'."""
    yp, yb = p.figure(objective), by.figure(objective)
    assert yp is not None and yb is not None  # only placed points are dominated
    speed = "slower" if p.tokens_per_s < by.tokens_per_s else "no faster"
    quality = "worse" if yp > yb else "no better"
    digits = 1 if objective == "peak_memory" else 2
    return (
        f"{p.name} is dominated by {by.name}: {speed} ({_pair(None, p.tokens_per_s, by.tokens_per_s, 0)}) "
        f"and {quality} {LABELS[objective]} ({_pair(objective, yp, yb, digits)})"
    )
