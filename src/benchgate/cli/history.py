"""`benchgate history`: a profile's last runs in MLflow as a table and a PNG; with `--changes` the
change points of each figure over them (history/series.py: where the level moved, by how much, how
surely); with `--check` exit 1 on a regression among the newest runs that nobody acknowledged, and
`benchgate history ack RUN_ID --reason TEXT` to accept one.

Runs are read in their commit's order on the branch checked out where the command runs (first parents),
falling back to start time when a run's commit is not on it. A series is one workload on one branch
(history/series.RunGroup): runs of several are drawn as a line each and searched for change points each
on their own, never as one line; `--workload` and `--branch` pick one. The tokens/s shown is the run's
one figure (results/figures.RUN_TOKENS_PER_S), as in the verdict table, `baseline show` and MLflow.
Exit codes are those of the other MLflow commands (cli/mlflow_access.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from benchgate.cli.mlflow_access import (
    ConfigOption,
    ProfileOption,
    UriOption,
    WorkloadOption,
    connect,
    profile_runs,
    talking_to,
    tracking_config,
    when,
)
from benchgate.cli.terminal import (
    APP_SETTINGS,
    BAD_INPUT,
    OK,
    RUN_FAILED,
    PlainCommand,
    console,
    exit_codes,
    fail,
)
from benchgate.errors import EXIT_REGRESSION, BenchgateError
from benchgate.kit.diskfaults import writing
from benchgate.results.figures import RUN_TOKENS_PER_S

if TYPE_CHECKING:
    from benchgate.history.series import FigureChange
    from benchgate.results.figures import HistoryPoint

HISTORY_COLUMNS = (
    ("tok/s ws1", f"ws1/{RUN_TOKENS_PER_S}", "{:,.0f}"),
    ("mean step ms ws1", "ws1/step_time_ms_mean", "{:.1f}"),
    ("mem MiB ws1", "ws1/peak_memory_mib", "{:,.0f}"),
    ("scaling %", "scaling_efficiency_pct", "{:.1f}"),
    ("perplexity", "eval/perplexity", "{:.4f}"),
)
# Without --changes a glance at the newest runs; with it, enough runs for a level to show.
LAST_RUNS, LAST_RUNS_FOR_CHANGES = 10, 100
HISTORY_CODES = exit_codes(
    OK,
    (EXIT_REGRESSION, "--check: a regression starts in one of the newest runs and nobody acknowledged it"),
    (BAD_INPUT[0], "bad input: a flag or the config file, or a run id or profile MLflow does not have"),
    RUN_FAILED,
)
history_app = typer.Typer(
    help="The last runs of a machine profile: a table of key figures and a PNG of them over commits; "
    "their change points (--changes); the nightly check (--check); accepting a change (ack).",
    epilog=HISTORY_CODES,
    invoke_without_command=True,
    **APP_SETTINGS,
)


@history_app.callback(epilog=HISTORY_CODES)
def history(
    ctx: typer.Context,
    profile: ProfileOption = None,
    workload: WorkloadOption = None,
    branch: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Only the runs of this branch (e.g. main).  [default: all]"),
    ] = None,
    last: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=500,
            metavar="N",
            help=f"How many of the newest runs.  "
            f"[default: {LAST_RUNS}, with --changes {LAST_RUNS_FOR_CHANGES}]",
        ),
    ] = None,
    changes: Annotated[
        bool,
        typer.Option(
            "--changes",
            help="Also find the change points of each figure over these runs (E-divisive means, "
            "permutation p-values; docs/design.md).  [default: off]",
        ),
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Exit 1 when a regression (a change point for the worse) starts in one of the newest "
            "--recent runs and was not acknowledged (`history ack`). Implies --changes.  [default: off]",
        ),
    ] = False,
    recent: Annotated[
        int,
        typer.Option(
            min=1, metavar="N", help="--check looks at changes starting in the newest N runs of each series."
        ),
    ] = 10,
    since: Annotated[
        int,
        typer.Option(
            "--new",
            min=1,
            metavar="N",
            help="--check reports only change points that are new with the newest N runs (those since the "
            "last check): found over all runs, not without them. One check per run: 1.",
        ),
    ] = 1,
    png: Annotated[Path, typer.Option(metavar="FILE", help="Where to write the plot.")] = Path(
        "benchgate-history.png"
    ),
    config: ConfigOption = None,
    tracking_uri: UriOption = None,
) -> None:
    """The last runs of a machine profile: a table of key figures and a PNG of them over commits."""
    if ctx.invoked_subcommand is not None:
        return
    from benchgate.history.series import in_commit_order, run_groups
    from benchgate.measure.source import branch_commits
    from benchgate.publish.plots import history_png
    from benchgate.tracking import read as tracking_read

    changes = changes or check
    limit = last or (LAST_RUNS_FOR_CHANGES if changes else LAST_RUNS)
    try:
        tracker, profile, runs = profile_runs(
            config, tracking_uri, profile, workload, limit=limit, branch=branch
        )
    except BenchgateError as exc:
        fail(exc)
    if not runs:
        on = f" on branch {branch!r}" if branch else ""
        console.print(f"no gate runs in MLflow for machine profile {profile!r}{on} at {tracker.uri}")
        raise typer.Exit(0)
    order = branch_commits(Path.cwd())
    points = in_commit_order([tracking_read.history_point(run) for run in runs], order)
    table = Table(title=f"history · {profile} · last {len(points)}", title_justify="left")
    for column in ("date", "commit", "branch", "workload", "verdict", "baseline"):
        table.add_column(column)
    for column, _, _ in HISTORY_COLUMNS:
        table.add_column(column)
    for point in points:
        cells = [
            fmt.format(point.figures[key]) if key in point.figures else "—" for _, key, fmt in HISTORY_COLUMNS
        ]
        table.add_row(
            when(point.created_unix),
            (point.commit or "?")[:12],
            point.branch or "",
            point.workload or "",
            point.verdict or "",
            "yes" if point.is_baseline else "",
            *cells,
        )
    console.print(table)
    groups = [group.label for group, _ in run_groups(points)]
    if len(groups) > 1:
        console.print(
            f"note: these runs are {len(groups)} series (workload @ branch): {', '.join(groups)}; each is "
            "its own line in the plot and has its own change points. --workload NAME and --branch NAME "
            "pick one",
            markup=False,
        )
    floors = _floors(config, tracking_uri)
    found = _print_changes(points, order, floors) if changes else []
    try:
        with writing("the plot", png):
            marks = [(change.panel, change.run.run_id) for change in found]
            console.print(f"plot: {history_png(points, png, changes=marks, keep_order=True)}")
    except BenchgateError as exc:
        fail(exc)
    if check:
        _check(found, points, recent, order, floors, since)


def _floors(config: ConfigOption, tracking_uri: UriOption) -> dict[str, float]:
    """Each figure's magnitude floor (history/changes.floor_pct of its gate tolerance), by the start
    of its series name: a smaller level change is no change point."""
    from benchgate.history.changes import floor_pct

    tol = tracking_config(config, tracking_uri).gate.tolerances
    return {
        "tokens/s": floor_pct(tol.throughput_drop_pct),
        "peak memory": floor_pct(tol.memory_increase_pct),
        "perplexity": floor_pct(tol.perplexity_increase_pct),
    }


def above_floor(found: list[FigureChange], floors: dict[str, float]) -> list[FigureChange]:
    """The change points at least their figure's floor in size (a figure without one keeps all)."""
    floor = lambda figure: next((v for k, v in floors.items() if figure.startswith(k)), 0.0)  # noqa: E731
    return [c for c in found if abs(c.point.change_pct) >= floor(c.figure)]


def new_changes(
    found: list[FigureChange],
    points: list[HistoryPoint],
    order: list[str] | None,
    floors: dict[str, float],
    new: int,
) -> list[FigureChange]:
    """Of `found` (over all `points`), those that the runs before the newest `new` did not show: a
    change point is reported by the check that first sees it, not by every later one (a check after
    every run that re-tested everything would raise each chance point again and again)."""
    from benchgate.history.series import grouped_changes

    earlier = above_floor(grouped_changes(points[:-new], order), floors) if len(points) > new else []
    seen = {(c.series, c.figure, c.run.run_id) for c in earlier}
    return [c for c in found if (c.series, c.figure, c.run.run_id) not in seen]


def _print_changes(
    points: list[HistoryPoint], order: list[str] | None, floors: dict[str, float]
) -> list[FigureChange]:
    from benchgate.history.changes import ALPHA
    from benchgate.history.series import grouped_changes

    found = above_floor(grouped_changes(points, order), floors)
    if not found:
        console.print(f"change points: none in {len(points)} runs (at the {ALPHA:.0%} level)")
        return found
    console.print(change_table(found))
    return found


def change_table(found: list[FigureChange]) -> Table:
    """The change points found, a row each (also `benchgate backfill`'s, over the range's runs)."""
    table = Table(title="change points (the first run at the new level)", title_justify="left")
    series = any(change.series for change in found)  # several series: say whose change each is
    columns = ("figure", "commit", "date", "change", "95% CI", "p", "runs before/after", "", "run")
    for column in ("series", *columns) if series else columns:
        table.add_column(column)
    for change in found:
        point = change.point
        table.add_row(
            *([change.series] if series else []),
            change.figure,
            (change.run.commit or "?")[:12],
            when(change.run.created_unix),
            f"{point.change_pct:+.1f}%",
            f"[{point.ci_low_pct:+.1f}, {point.ci_high_pct:+.1f}]%",
            f"{point.p_value:.3f}",
            f"{point.n_before}/{point.n_after}",
            _label(change),
            str(change.run.run_id or ""),
        )
    return table


def _label(change: FigureChange) -> str:
    if not change.is_regression:
        return ""
    if change.run.acknowledged:
        return f"regression (acknowledged: {change.run.acknowledged})"
    return "[red]regression[/]"


def _check(
    found: list[FigureChange],
    points: list[HistoryPoint],
    recent: int,
    order: list[str] | None,
    floors: dict[str, float],
    new: int,
) -> None:
    from benchgate.history.series import grouped_regressions, run_groups

    alerts = grouped_regressions(new_changes(found, points, order, floors, new), points, recent, order)
    if not alerts:
        newest = min(recent, len(points))
        each = " of each series" if len(run_groups(points)) > 1 else ""
        console.print(
            f"check: no unacknowledged regression new with the newest {new} run(s) starts in the newest "
            f"{newest} runs{each}"
        )
        return
    for change in alerts:
        of = f"{change.figure} ({change.series})" if change.series else change.figure
        console.print(
            f"check: regression of {of} by {change.point.change_pct:+.1f}% from commit "
            f"{(change.run.commit or '?')[:12]} (run {change.run.run_id}); if it is wanted, accept it with "
            f"`benchgate history ack {change.run.run_id} --reason TEXT`",
            markup=False,
            soft_wrap=True,  # one line, so that the command can be copied whole
        )
    raise typer.Exit(EXIT_REGRESSION)


@history_app.command("ack", cls=PlainCommand, epilog=exit_codes(OK, BAD_INPUT, RUN_FAILED))
def ack(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The gate run where the change starts.")],
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why the change is accepted.")],
    config: ConfigOption = None,
    tracking_uri: UriOption = None,
) -> None:
    """Accept the change a gate run starts: `history --check` stops failing on it. Who (USER) and why
    stay on the run as MLflow tags."""
    from benchgate.tracking import read as tracking_read

    who = os.environ.get("USER") or os.environ.get("USERNAME") or "unknown"
    try:
        tracker = connect(tracking_config(config, tracking_uri))
        with talking_to(tracker):
            tracking_read.acknowledge(tracker, run_id, reason, who)
    except BenchgateError as exc:
        fail(exc)
    console.print(f"acknowledged: run {run_id} ({reason}, by {who})", markup=False)
