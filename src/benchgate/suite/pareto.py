"""The Pareto frontier of a suite's entries: which variants are worth keeping, and which another beats.

Each panel weighs two objectives: tokens/s (more is better) against one figure where less is better
(perplexity, or peak memory). An entry *dominates* another when it is at least as fast and at least as
good on the other figure, and better on one of them; the *frontier* is the entries nothing dominates.

"Better" means better by more than the figure's noise (`Ties`): two peak memories 0.4% apart are one
peak memory, not a trade-off, and a variant is not dropped for a gap its measurement cannot tell from
nothing. Within that margin two figures are *tied*: neither is better, and neither is worse. Two entries
tied on both figures do not dominate each other; both stay on the frontier, since neither is a reason
to drop the other.

An entry without the panel's figure (no eval, hence no perplexity) cannot be placed on that panel: it is
left out of it, and the panel says why, rather than drawing it at zero or at infinity.

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
class Ties:
    """How far apart two figures may be and still count as equal, in percent of the larger.

    tokens/s: 2%, or the wider of the two entries' own measured spread where that is wider (the 95%
    interval of each run's p50, `Point.tokens_per_s_spread_pct`): entries run minutes apart on one host.
    Peak memory: 2%; on CPU it is a process's max RSS, which launches of the same code differ in by up
    to a few MiB of some hundreds (allocator and import order; docs/suites.md gives the figures).
    Perplexity: 0.5%. The eval is deterministic, so a smaller gap is real, but it is a third of what the
    gate itself calls a regression (`perplexity_increase_pct`, 1.5%): no reason to keep a slower variant.
    """

    tokens_per_s_pct: float = 2.0
    perplexity_pct: float = 0.5
    peak_memory_pct: float = 2.0

    def __post_init__(self) -> None:
        for field in ("tokens_per_s_pct", "perplexity_pct", "peak_memory_pct"):
            value = getattr(self, field)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"ties: {field}: got {value!r} (expected a finite number ≥ 0)")

    def figure_pct(self, objective: Objective) -> float:
        return self.perplexity_pct if objective == "perplexity" else self.peak_memory_pct


TIES = Ties()


@dataclass(frozen=True)
class Point:
    """One entry's figures; perplexity or peak memory is None where its run did not measure it.

    `tokens_per_s_spread_pct`: the half-width of the 95% interval of its tokens/s p50, in percent of the
    p50 (None where unknown). `perplexity_missing`: why it has no perplexity, where the reason is not
    the usual one (MISSING): an eval that did not measure the entry's own setup."""

    name: str
    tokens_per_s: float
    perplexity: float | None = None
    peak_memory_bytes: float | None = None
    tokens_per_s_spread_pct: float | None = None
    perplexity_missing: str | None = None

    def __post_init__(self) -> None:
        # A NaN would compare false with everything and quietly land on the frontier.
        for field, value in (
            ("tokens_per_s", self.tokens_per_s),
            ("perplexity", self.perplexity),
            ("peak_memory_bytes", self.peak_memory_bytes),
            ("tokens_per_s_spread_pct", self.tokens_per_s_spread_pct),
        ):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"entry {self.name!r}: {field}: got {value!r} (expected a finite number ≥ 0)"
                )

    def figure(self, objective: Objective) -> float | None:
        return self.perplexity if objective == "perplexity" else self.peak_memory_bytes

    def missing(self, objective: Objective) -> str:
        """Why this entry has no figure for `objective`: a table cell."""
        if objective == "perplexity" and self.perplexity_missing:
            return self.perplexity_missing
        return MISSING[objective]


def tied(a: float, b: float, pct: float) -> bool:
    """a and b within `pct` percent of the larger: one figure, as far as the measurement can tell."""
    return abs(a - b) <= pct / 100.0 * max(abs(a), abs(b))


def speed_margin_pct(a: Point, b: Point, ties: Ties = TIES) -> float:
    """The percentage within which a's and b's tokens/s are tied: the floor, or their measured spread."""
    spreads = [s for s in (a.tokens_per_s_spread_pct, b.tokens_per_s_spread_pct) if s is not None]
    return max([ties.tokens_per_s_pct, *spreads])


def _compare(a: float, b: float, pct: float, higher_is_better: bool) -> int:
    """1 where a is better than b beyond the margin, -1 where worse, 0 where tied."""
    if tied(a, b, pct):
        return 0
    return 1 if (a > b) == higher_is_better else -1


def dominates(a: Point, b: Point, objective: Objective, ties: Ties = TIES) -> bool:
    """a is no slower and no worse on `objective` than b beyond the noise, and better on one of them."""
    ya, yb = a.figure(objective), b.figure(objective)
    if ya is None or yb is None:
        return False
    speed = _compare(a.tokens_per_s, b.tokens_per_s, speed_margin_pct(a, b, ties), True)
    quality = _compare(ya, yb, ties.figure_pct(objective), False)
    return speed >= 0 and quality >= 0 and (speed > 0 or quality > 0)


@dataclass(frozen=True)
class Dominated:
    """An entry beaten by `by`, and the sentence that says how."""

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
    rate: str = "tokens/s"  # the speed's name: "images/s" where the entries count images

    def standing(self, name: str) -> str:
        """'frontier', 'dominated by X' or why the entry is not on this panel: a table cell."""
        if any(p.name == name for p in self.frontier):
            return "frontier"
        for d in self.dominated:
            if d.point.name == name:
                return f"dominated by {d.by.name}"
        for p in self.left_out:
            if p.name == name:
                return p.missing(self.objective)
        raise KeyError(name)

    def notes(self) -> list[str]:
        """One sentence per dominated or left-out entry."""
        lines = [d.sentence for d in self.dominated]
        label = LABELS[self.objective]
        lines += [
            f"{p.name} is left out of the {label} panel: {p.missing(self.objective)}." for p in self.left_out
        ]
        return lines


def frontier(points: Sequence[Point], better: Objective, ties: Ties = TIES, rate: str = "tokens/s") -> Panel:
    """Split `points` into the frontier and the dominated for tokens/s (maximised) against `better`
    (minimised), figures within `ties` counting as equal.

    Each dominated entry is named with the strongest entry that dominates it (the fastest; on equal speed
    the better figure, then the name), a frontier entry wherever one dominates it. With ties, dominance
    is not transitive (a beats b, b beats c, and a and c are tied), so the one that beats an entry may
    itself be beaten: it is still the reason that entry is not worth keeping."""
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"entry names must be unique; got {', '.join(twice)} more than once")
    placed = [p for p in points if p.figure(better) is not None]
    left_out = [p for p in points if p.figure(better) is None]
    top = [p for p in placed if not any(dominates(q, p, better, ties) for q in placed)]
    dominated = []
    for p in placed:
        if p in top:
            continue
        beaters = [q for q in top if dominates(q, p, better, ties)]
        beaters = beaters or [q for q in placed if dominates(q, p, better, ties)]
        by = min(beaters, key=lambda q: (-q.tokens_per_s, q.figure(better), q.name))
        dominated.append(Dominated(p, by, _sentence(p, by, better, ties, rate)))
    top.sort(key=lambda p: (p.tokens_per_s, p.name))
    return Panel(better, top, dominated, left_out, rate)


def _figure_text(objective: Objective, value: float, digits: int) -> str:
    if objective == "peak_memory":
        return f"{value / 2**20:,.{digits}f} MiB"
    return f"{value:,.{digits}f}"


def _pair(objective: Objective | None, mine: float, theirs: float, digits: int, rate: str = "") -> str:
    """'mine vs theirs', with as many decimals as it takes for unequal values not to print alike."""

    def text(value: float, d: int) -> str:
        return f"{value:,.{d}f}" if objective is None else _figure_text(objective, value, d)

    while mine != theirs and text(mine, digits) == text(theirs, digits) and digits < 6:
        digits += 1
    unit = f" {rate}" if objective is None else ""
    return f"{text(mine, digits)} vs {text(theirs, digits)}{unit}"


def _sentence(p: Point, by: Point, objective: Objective, ties: Ties, rate: str) -> str:
    """'b is dominated by a: slower (1,234 vs 1,456 tokens/s) and no better perplexity (3.21 vs 3.20)'.

    "slower"/"worse": beyond the noise; "no faster"/"no better": equal; "as fast within 2%"/"perplexity
    within 0.5%": unequal, but tied."""
    yp, yb = p.figure(objective), by.figure(objective)
    assert yp is not None and yb is not None  # only placed points are dominated
    label = LABELS[objective]
    speed_pct = speed_margin_pct(p, by, ties)
    speeds = _pair(None, p.tokens_per_s, by.tokens_per_s, 0, rate)
    if _compare(p.tokens_per_s, by.tokens_per_s, speed_pct, True) < 0:
        speed = f"slower ({speeds})"
    elif p.tokens_per_s == by.tokens_per_s:
        speed = f"no faster ({speeds})"
    else:
        speed = f"as fast within {round(speed_pct, 1):g}% ({speeds})"
    figures = _pair(objective, yp, yb, 1 if objective == "peak_memory" else 2)
    if _compare(yp, yb, ties.figure_pct(objective), False) < 0:
        quality = f"worse {label} ({figures})"
    elif yp == yb:
        quality = f"no better {label} ({figures})"
    else:
        quality = f"{label} within {ties.figure_pct(objective):g}% ({figures})"
    return f"{p.name} is dominated by {by.name}: {speed} and {quality}"
