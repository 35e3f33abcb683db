"""`benchgate history` keeps each workload and branch a series of its own: one line each in the plot, and
change points searched within each, never across them.

The runs are the real run of tests/data/stack_run/ (a stack of 24 layers, ws=1 and ws=2) logged as gate
runs (results/figures.run_figures, read back by tracking/read.history_point as the command reads them),
its steps scaled to stand for other workloads, branches and commits.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from harness import TESTS_DIR
from mlflow_runs import logged

from benchgate.history.series import (
    RunGroup,
    figure_changes,
    grouped_changes,
    grouped_regressions,
    run_groups,
)
from benchgate.publish.plots import history_figure
from benchgate.results.bundle import load_bundle
from benchgate.results.figures import HistoryPoint, run_figures
from benchgate.tracking.read import history_point

STACK_RUN = TESTS_DIR / "data" / "stack_run"
REAL = load_bundle(STACK_RUN)


def scaled(metrics: dict[str, Any], factor: float) -> dict[str, Any]:
    m = copy.deepcopy(metrics)
    m["samples"]["step_time_s"] = [t * factor for t in m["samples"]["step_time_s"]]
    m["samples"]["tokens_per_s"] = [r / factor for r in m["samples"]["tokens_per_s"]]
    return m


def gate_run(i: int, slower: float, workload: str = "stack", branch: str = "main") -> HistoryPoint:
    """The real run, every step `slower` times as long (and a +-1% jitter), logged as run i."""
    jitter = 1 + 0.01 * ((i * 7) % 5 - 2) / 2
    bundle = replace(REAL, metrics={ws: scaled(m, slower * jitter) for ws, m in REAL.metrics.items()})
    return history_point(logged(run_figures(bundle), workload, branch, i))


def test_two_workloads_are_two_series_and_no_change_point_lies_between_them() -> None:
    # Eight runs of the stack, then eight of a workload three times as fast (a suite entry added later).
    points = [gate_run(i, 1.0) for i in range(8)] + [gate_run(i, 1 / 3, "small") for i in range(8, 16)]
    mixed = [c for c in figure_changes(points) if c.figure == "tokens/s ws=1"]
    assert [c.run.run_id for c in mixed] == ["run08"]  # one line through both: a "change" at the switch
    assert [g for g, _ in run_groups(points)] == [RunGroup("stack", "main"), RunGroup("small", "main")]
    assert grouped_changes(points) == []


def test_a_change_within_one_series_is_found_and_named_by_it() -> None:
    # stack on main: 25% slower from its 7th run; small on main, steady, run in between.
    stack = [gate_run(i, 1.25 if i >= 6 else 1.0) for i in range(12)]
    small = [gate_run(i, 1 / 3, "small") for i in range(12, 24)]
    points = sorted(stack + small, key=lambda p: p.created_unix)
    found = [c for c in grouped_changes(points) if c.figure == "tokens/s ws=1"]
    assert [(c.series, c.run.run_id, c.is_regression) for c in found] == [("stack @ main", "run06", True)]


def test_a_feature_branch_is_its_own_series_and_the_check_counts_newest_within_each() -> None:
    # main steady for 10 runs; then a feature branch's 4 runs, 20% slower: not main's next commits.
    main = [gate_run(i, 1.0) for i in range(10)]
    feature = [gate_run(i, 1.25, branch="feature/wider") for i in range(10, 14)]
    points = main + feature
    assert any(c.is_regression for c in figure_changes(points))  # one line: a false regression
    assert grouped_changes(points) == []
    # main slows at its 7th run; the feature branch's runs came after. Newest 5 within main still
    # hold the regression; counted over all runs they would not.
    slowed = [gate_run(i, 1.25 if i >= 6 else 1.0) for i in range(12)] + [
        gate_run(i, 1.0, branch="feature/wider") for i in range(12, 20)
    ]
    changes = grouped_changes(slowed)
    alerts = grouped_regressions(changes, slowed, recent=6)
    assert {c.run.run_id for c in alerts} == {"run06"} and alerts[0].series == "stack @ main"


def test_the_history_plot_draws_a_line_per_series_with_a_legend() -> None:
    points = [gate_run(i, 1.0) for i in range(4)] + [gate_run(i, 1 / 3, "small") for i in range(4, 8)]
    figure = history_figure(points, names=["ws1/tokens_per_s_mean"], keep_order=True)
    ax = figure.axes[0]
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert [line.get_label() for line in lines] == ["stack @ main", "small @ main"]
    assert [list(line.get_xdata()) for line in lines] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["stack @ main", "small @ main"]
    one = history_figure(points[:4], names=["ws1/tokens_per_s_mean"], keep_order=True)
    assert one.axes[0].get_legend() is None
