"""A profile's runs as series of figures in commit order, and the change points found in each.

The series are the figures the gate judges, read from the names MLflow stores (results/figures.py):

    tokens/s ws=N              1 / ws<N>/step_time_ms_mean: tokens/s as the gate judges it (total time,
                               each step capped at STALL_CAP x the median), up to the tokens per step
    tokens/s ws=N, corrected   1 / ws<N>/step_time_per_reference_mean: the same with the host's drift
                               divided out, where every run of the series timed the drift reference
    peak memory ws=N           ws<N>/peak_memory_mib
    perplexity                 eval/perplexity

A change point's sign is the figure's: a negative change of tokens/s is a slowdown, a positive change
of memory or perplexity is a regression (`is_regression`).

Runs are ordered by their commit's place on the branch when `commit_order` (oldest first, e.g. `git
rev-list --first-parent --reverse`) holds every run's commit; otherwise by start time. Several runs of
one commit keep their start-time order.

A series is one workload on one branch (`RunGroup`): two workloads' tokens/s are different quantities,
and a feature branch's runs are not the next commits of main, so a level "moving" between them is no
change point. `run_groups` splits runs into such series; `grouped_changes` finds the change points of
each on its own (what `benchgate history` reports, each series drawn as its own line).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from benchgate.history.changes import ALPHA, ChangePoint, change_points
from benchgate.results.figures import RUN_TOKENS_PER_S, HistoryPoint

_WS = re.compile(r"^ws(\d+)/")


@dataclass(frozen=True)
class Series:
    name: str
    panel: str  # the figure the history PNG draws for it (MLflow's name)
    lower_is_worse: bool  # tokens/s: a drop is a regression; memory and perplexity: a rise
    runs: list[HistoryPoint]
    values: list[float]


@dataclass(frozen=True)
class FigureChange:
    """A change point of one figure: the run at which the new level starts, and its statistics."""

    figure: str
    panel: str
    run: HistoryPoint
    point: ChangePoint
    lower_is_worse: bool
    series: str = ""  # the RunGroup's label where the changes of several series are listed together

    @property
    def is_regression(self) -> bool:
        return self.point.change_pct < 0 if self.lower_is_worse else self.point.change_pct > 0


def in_commit_order(points: Sequence[HistoryPoint], commit_order: Sequence[str] | None) -> list[HistoryPoint]:
    by_time = sorted(points, key=lambda p: p.created_unix)
    if not commit_order:
        return by_time
    place = {commit: i for i, commit in enumerate(commit_order)}
    if any(p.commit not in place for p in by_time):
        return by_time
    return sorted(by_time, key=lambda p: place[str(p.commit)])  # stable: same commit keeps time order


Reader = Callable[[dict[str, float]], float | None]


def _series(
    name: str, panel: str, runs: list[HistoryPoint], read: Reader, lower_is_worse: bool
) -> Series | None:
    kept = [(run, read(run.figures)) for run in runs]
    present = [(run, value) for run, value in kept if value is not None and value > 0]
    if not present:
        return None
    return Series(name, panel, lower_is_worse, [r for r, _ in present], [v for _, v in present])


def _inverse(key: str) -> Reader:
    def read(figures: dict[str, float]) -> float | None:
        value = figures.get(key)
        return 1.0 / value if value else None

    return read


def _plain(key: str) -> Reader:
    def read(figures: dict[str, float]) -> float | None:
        return figures.get(key)

    return read


def series_of(runs: Sequence[HistoryPoint]) -> list[Series]:
    """Every figure's series over `runs` (already in order), the figures a run lacks left out of it."""
    world_sizes = sorted({int(m[1]) for run in runs for key in run.figures if (m := _WS.match(key))})
    found: list[Series | None] = []
    for ws in world_sizes:
        rate, mean = f"ws{ws}/{RUN_TOKENS_PER_S}", f"ws{ws}/step_time_ms_mean"
        found.append(_series(f"tokens/s ws={ws}", rate, list(runs), _inverse(mean), True))
        corrected = f"ws{ws}/step_time_per_reference_mean"
        if runs and all(corrected in run.figures for run in runs):
            found.append(_series(f"tokens/s ws={ws}, corrected", rate, list(runs), _inverse(corrected), True))
        memory = f"ws{ws}/peak_memory_mib"
        found.append(_series(f"peak memory ws={ws}", memory, list(runs), _plain(memory), False))
    found.append(_series("perplexity", "eval/perplexity", list(runs), _plain("eval/perplexity"), False))
    return [s for s in found if s is not None]


def figure_changes(runs: Sequence[HistoryPoint], alpha: float = ALPHA) -> list[FigureChange]:
    """The change points of every figure over `runs` (in order), figure by figure, oldest first."""
    changes = []
    for series in series_of(runs):
        for point in change_points(series.values, alpha=alpha):
            run = series.runs[point.index]
            changes.append(FigureChange(series.name, series.panel, run, point, series.lower_is_worse))
    return changes


def unacknowledged_regressions(
    changes: Sequence[FigureChange], runs: Sequence[HistoryPoint], recent: int
) -> list[FigureChange]:
    """The regressions among `changes` that start in one of the newest `recent` runs and that nobody
    acknowledged (`benchgate history ack`): what the nightly check fails on."""
    newest = {run.run_id for run in runs[-recent:]}
    return [c for c in changes if c.is_regression and c.run.run_id in newest and not c.run.acknowledged]


@dataclass(frozen=True)
class RunGroup:
    """The runs that form one series: one workload on one branch (None: not recorded)."""

    workload: str | None
    branch: str | None

    @property
    def label(self) -> str:
        return f"{self.workload or '(workload not recorded)'} @ {self.branch or '(no branch)'}"


def run_groups(runs: Sequence[HistoryPoint]) -> list[tuple[RunGroup, list[HistoryPoint]]]:
    """`runs` split by workload and branch, each group's runs in the given order, the groups in the
    order of their first run."""
    groups: dict[RunGroup, list[HistoryPoint]] = {}
    for run in runs:
        groups.setdefault(RunGroup(run.workload, run.branch), []).append(run)
    return list(groups.items())


def grouped_changes(
    runs: Sequence[HistoryPoint], commit_order: Sequence[str] | None = None, alpha: float = ALPHA
) -> list[FigureChange]:
    """The change points of every series (workload and branch) of `runs`, each searched on its own runs
    only, in commit order where `commit_order` holds all of that series' commits (else start time);
    each change names its series where there are several."""
    groups = run_groups(runs)
    changes = []
    for group, members in groups:
        ordered = in_commit_order(members, commit_order) if commit_order else members
        label = group.label if len(groups) > 1 else ""
        changes += [replace(c, series=label) for c in figure_changes(ordered, alpha)]
    return changes


def grouped_regressions(
    changes: Sequence[FigureChange],
    runs: Sequence[HistoryPoint],
    recent: int,
    commit_order: Sequence[str] | None = None,
) -> list[FigureChange]:
    """As `unacknowledged_regressions`, "newest" counted within each series: a regression among the
    newest `recent` runs of its own workload and branch, however many other series' runs came since."""
    newest = set()
    for _, members in run_groups(runs):
        ordered = in_commit_order(members, commit_order) if commit_order else members
        newest |= {run.run_id for run in ordered[-recent:]}
    return [c for c in changes if c.is_regression and c.run.run_id in newest and not c.run.acknowledged]
