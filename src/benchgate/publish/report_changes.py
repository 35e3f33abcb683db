"""The change points of report.html's history: where a figure's level moved over the profile's recent
runs and this one, found as `benchgate history --changes` finds them (history/series.py), drawn as
dashed lines on the throughput plot and listed in a table under it.

A per-commit gate compares one run with the baseline; a slide of several small steps shows only in
the history, and the report is where a reviewer already looks. The runs are read in their commit's
order on the branch when the caller has the checkout (`commit_order`, oldest first: the publish stage
passes measure/source.branch_commits of its working directory), else in the order they started; this
run comes last either way, as on the plot. Pure: no files, no git.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from benchgate.history.changes import ALPHA, MIN_SIZE
from benchgate.history.series import FigureChange, figure_changes, in_commit_order
from benchgate.results.figures import HistoryPoint

HEADER = (
    "figure",
    "commit",
    "change",
    "95% CI",
    "p",
    "runs before/after",
    "regression",
    "acknowledged",
    "run",
)
_REGRESSION_STYLE = "font-weight:bold;color:#cf222e"  # the FAIL colour of the verdict table


@dataclass(frozen=True)
class ReportHistory:
    """The report's runs in the order plotted (this run last) and the change points found over them."""

    points: list[HistoryPoint]
    changes: list[FigureChange]

    def index(self, run: HistoryPoint) -> int:
        # By identity: the changes hold the very points of the list, and two runs may look alike.
        return next(i for i, point in enumerate(self.points) if point is run)

    def marks(self) -> list[tuple[str, int]]:
        """(figure as plotted, index of the first run at the new level) for `plots.trend_png`."""
        return [(change.panel, self.index(change.run)) for change in self.changes]


def report_history(
    history: Sequence[HistoryPoint], current: HistoryPoint, commit_order: Sequence[str] | None
) -> ReportHistory:
    """The profile's earlier runs in commit order where `commit_order` holds all their commits (else by
    start time), then this run; and the change points of every figure over them."""
    points = [*in_commit_order(history, commit_order), current]
    return ReportHistory(points, figure_changes(points))


def _row(report: ReportHistory, change: FigureChange) -> str:
    point, run = change.point, change.run
    this_run = report.index(run) == len(report.points) - 1
    commit = html.escape((run.commit or "?")[:12])
    regression = "yes" if change.is_regression else "no"
    style = f' style="{_REGRESSION_STYLE}"' if change.is_regression and not run.acknowledged else ""
    cells = [
        f"<td>{html.escape(change.figure)}</td>",
        f"<td><code>{commit}</code>{' (this run)' if this_run else ''}</td>",
        f"<td>{point.change_pct:+.1f}%</td>",
        f"<td>[{point.ci_low_pct:+.1f}, {point.ci_high_pct:+.1f}]%</td>",
        f"<td>{point.p_value:.3f}</td>",
        f"<td>{point.n_before}/{point.n_after}</td>",
        f"<td{style}>{regression}</td>",
        f"<td>{html.escape(run.acknowledged or '')}</td>",
        f"<td>{'this run' if this_run else html.escape(run.run_id or '')}</td>",
    ]
    return f"<tr>{''.join(cells)}</tr>"


def changes_html(report: ReportHistory) -> str:
    """The change points as a table (the first run at each new level), or one line saying there are none
    and, with too few runs, why none can be found."""
    runs = len(report.points)
    if not report.changes:
        if runs < 2 * MIN_SIZE:
            return (
                f"<p>Change points: none in {runs} runs (a change needs at least {MIN_SIZE} runs on each "
                "side of it).</p>"
            )
        return f"<p>Change points: none in {runs} runs (at the {ALPHA:.0%} level).</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(_row(report, change) for change in report.changes)
    lines = [
        f"<p>Where a figure's level moved over these {runs} runs (each row: the first run at the new level; "
        "dashed on the plot above).</p>",
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
    ]
    if any(c.is_regression and not c.run.acknowledged and c.run.run_id for c in report.changes):
        lines.append(
            "<p>A regression that is wanted is accepted with <code>benchgate history ack RUN_ID --reason "
            "TEXT</code>: <code>benchgate history --check</code> stops failing on it.</p>"
        )
    return "\n".join(lines)
