"""`benchgate backfill A..B`: gate each commit of a range (or every N-th), oldest first, skipping the
commits MLflow already holds a gate run of for the same setup; then a summary table and the change
points of the range's history, drawn as a PNG.

Thin: the range and the plan are ranges/commits.py and ranges/backfill.py; the setup, the runs (here or
submitted), the out directory with backfill.json and summary.md, and the range's history read back are
ranges/backfill_run.py; what counts as "already measured" tracking/backfill_index.py. Here: the flags,
the progress while commits run (bars on a terminal, stamped lines elsewhere), the plan, the tables and
the PNG, and the exit codes (MLflow's errors exit 3). Bad input is refused before anything runs (exit
2), the range first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from benchgate.cli.mlflow_access import UriOption, connect, talking_to
from benchgate.cli.progress_lines import ProgressLines, is_live_terminal
from benchgate.cli.run_output import live_progress, screen
from benchgate.cli.terminal import (
    BAD_INPUT,
    OK,
    RUN_FAILED,
    SubmitExperimentOption,
    WorkloadArgOption,
    WorkloadFactoryOption,
    console,
    exit_codes,
    fail,
    option,
    parse_pairs,
)
from benchgate.config import RunConfig, load_config
from benchgate.errors import BenchgateError, ConfigError
from benchgate.kit.diskfaults import writing
from benchgate.kit.progress import final_count
from benchgate.ranges.backfill import SUMMARY_COLUMNS, PlannedCommit, Row, counts, summary_cells

if TYPE_CHECKING:
    from benchgate.kit.progress import Reporter
    from benchgate.ranges.backfill_run import BackfillReport
    from benchgate.ranges.commits import CommitRange, RangeCommit
    from benchgate.tracking.backfill_index import Setup
    from benchgate.tracking.client import Tracker

BACKFILL_CODES = exit_codes(
    (OK[0], "done, whatever the verdicts (with --submit: the runs were submitted)"),
    (
        BAD_INPUT[0],
        "bad input: the range, a flag, the config, or a commit whose workload cannot be loaded "
        "(the backfill stops there)",
    ),
    (RUN_FAILED[0], "every commit to run failed to, or MLflow or KFP could not be reached"),
)


class _Bars:
    """The backfill's progress: one bar over the commits, one for the stage of the commit running."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.commits = progress.add_task("commits", total=total)
        self.stage = progress.add_task("", total=None, visible=False)
        self.stage_total: int | None = None
        self.stage_done: int | None = None

    def commit_started(self, commit: RangeCommit) -> Reporter:
        # The bar's text is markup; a subject is shown as written ("[fix]" and all).
        self.progress.update(self.commits, description=escape(f"{commit.sha[:12]} {commit.subject[:48]}"))
        return self

    def commit_done(self, row: Row) -> None:
        self.progress.advance(self.commits)
        self.progress.update(self.stage, visible=False)
        detail = row.verdict or row.note
        self.progress.console.print(f"{row.commit.sha[:12]} {row.status}: {detail}", markup=False)

    # The Reporter of the running commit's gate: its stages on the second bar.
    def stage_started(self, name: str, total: int | None = None) -> None:
        self.stage_total, self.stage_done = total, None
        self.progress.reset(self.stage, total=total, description=f"  {name}", visible=True)

    def advance(self, done: int, total: int) -> None:
        self.stage_total, self.stage_done = total, done
        self.progress.update(self.stage, completed=done, total=total)

    def stage_finished(self, name: str, seconds: float) -> None:
        ran = final_count(self.stage_done, self.stage_total)  # an A/B decided early ends at its rounds
        self.progress.update(self.stage, completed=ran, total=ran)


class _CommitLines:
    """The backfill's progress as stamped lines: each commit's start and end, its stages under it."""

    def __init__(self, lines: ProgressLines, total: int) -> None:
        self.lines, self.total, self.done = lines, total, 0  # done: skipped commits count too

    def commit_started(self, commit: RangeCommit) -> Reporter:
        self.lines.within(f"commit {self.done + 1}/{self.total} {commit.sha[:12]}")
        self.lines.say(f"{self.lines.scope} {commit.subject[:48]!r} started")
        return self.lines

    def commit_done(self, row: Row) -> None:
        self.done += 1
        self.lines.within("")
        self.lines.say(f"{row.commit.sha[:12]} {row.status}: {row.verdict or row.note}")


@contextmanager
def _bars(total: int) -> Iterator[_Bars | _CommitLines]:
    # On stdout as it is now: the commits' gates point sys.stdout at their pipeline log while they run.
    stream = screen()
    if not is_live_terminal(stream):
        with ProgressLines(stream) as lines:
            yield _CommitLines(lines, total)
        return
    with live_progress(stream, transient=True) as progress:
        yield _Bars(progress, total)


def backfill(
    commit_range: Annotated[
        str,
        typer.Argument(
            metavar="A..B",
            help="The commits reachable from B and not from A, along first parents, oldest first "
            "(A an ancestor of B; any refs of this repository, e.g. v1.4..main).",
        ),
    ],
    every: Annotated[
        int,
        typer.Option(
            min=1, metavar="N", help="Keep the 1st commit of the range, every N-th after it, and always B."
        ),
    ] = 1,
    workload: WorkloadFactoryOption = None,
    workload_arg: WorkloadArgOption = None,
    config: Annotated[
        Path | None,
        option(
            metavar="FILE",
            text="TOML config file, as `benchgate run` reads it (steps, world sizes, eval, tracking...); "
            "flags override it.",
            default="none",
        ),
    ] = None,
    force: Annotated[
        bool,
        option(
            "--force",
            text="Gate every commit kept, also those MLflow already holds a gate run of for this setup.",
            default="off",
        ),
    ] = False,
    on_cluster: Annotated[
        bool,
        option(
            "--submit",
            text="Submit one pipeline run per commit to KFP (KFP_HOST, KFP_TOKEN, as `benchgate submit`) "
            "instead of running here; the runs are not waited on.",
            default="off",
        ),
    ] = False,
    profile: Annotated[
        str | None,
        option(
            metavar="PROFILE",
            text="With --submit: the cluster's machine profile, whose runs in MLflow count as done.",
            default="none: every commit is submitted; KFP attaches to the runs an earlier backfill submitted",
        ),
    ] = None,
    repository: Annotated[
        str | None,
        option(
            metavar="URL",
            text="With --submit: the git URL the cluster fetches the commits from.",
            default="$BENCHGATE_REPOSITORY, else origin",
        ),
    ] = None,
    experiment: SubmitExperimentOption = "benchgate",
    tracking_uri: UriOption = None,
    out: Annotated[
        Path,
        typer.Option(metavar="DIR", help="Each commit's results (DIR/<sha12>/), summary.md, backfill.json."),
    ] = Path("benchgate-backfill"),
    png: Annotated[
        Path, typer.Option(metavar="FILE", help="Where to write the plot of the range's history.")
    ] = Path("benchgate-backfill.png"),
) -> None:
    """Gate each commit of a range, oldest first, skipping those MLflow already has; then a summary and
    the change points over the range."""
    from benchgate.ranges.backfill import every_nth
    from benchgate.ranges.commits import resolve_range

    try:
        if not on_cluster and (profile is not None or repository is not None):
            flag = "--profile" if profile is not None else "--repository"
            raise ConfigError(f"{flag}: only with --submit (a local backfill runs here, on this machine)")
        overrides: dict[str, Any] = {
            "bench.workload": workload,
            "bench.workload_args": parse_pairs(workload_arg, "--workload-arg") if workload_arg else None,
            "tracking.uri": tracking_uri,
        }
        cfg = load_config(config, overrides)
        commits = resolve_range(commit_range, Path.cwd())
        kept = every_nth(commits.commits, every)
        if on_cluster:
            _submit(commits, kept, cfg, force, profile, repository, experiment, out)
        else:
            _local(commits, kept, cfg, force, out, png)
    except BenchgateError as exc:
        fail(exc)


def _local(
    commits: CommitRange, kept: list[RangeCommit], cfg: RunConfig, force: bool, out: Path, png: Path
) -> None:
    from benchgate.ranges.backfill_run import backfill_locally, local_setup

    setup = local_setup(cfg)
    tracker = connect(cfg)
    steps = _plan(tracker, setup, kept, force)
    _print_plan(commits, steps, setup, tracker)
    report = backfill_locally(commits, steps, cfg, setup, out, _bars, say=console.print)
    _print_summary(report)
    _print_changes(tracker, setup, kept, png)
    _exit(report)


def _submit(
    commits: CommitRange,
    kept: list[RangeCommit],
    cfg: RunConfig,
    force: bool,
    profile: str | None,
    repository: str | None,
    experiment: str,
    out: Path,
) -> None:
    from benchgate.cli.cluster import default_repository
    from benchgate.ranges.backfill_run import submission, submit_backfill

    url = repository if repository is not None else default_repository()
    target = submission(cfg, commits, kept, url, profile, os.environ)
    tracker = connect(cfg) if target.setup is not None else None
    steps = _plan(tracker, target.setup, kept, force)
    console.print(
        f"backfill {commits.text}: {len(kept)} of {len(commits.commits)} commits, "
        f"{sum(s.run for s in steps)} to submit to {target.conn.host}",
        markup=False,
    )
    report = submit_backfill(commits, steps, target, experiment, out, say=console.print)
    _print_summary(report)
    where = f"--profile {profile}`" if profile else "--profile PROFILE` (the cluster's)"
    console.print(
        f"the runs log to MLflow as they finish; then `benchgate history --changes {where} shows "
        "their change points",
        markup=False,
        soft_wrap=True,
    )
    _exit(report)


def _plan(
    tracker: Tracker | None, setup: Setup | None, kept: list[RangeCommit], force: bool
) -> list[PlannedCommit]:
    """The plan, with the runs MLflow holds of `setup` (without a tracker, MLflow is not asked)."""
    from benchgate.ranges.backfill_run import planned

    if tracker is None:
        return planned(None, setup, kept, force)
    with talking_to(tracker):
        return planned(tracker, setup, kept, force)


def _exit(report: BackfillReport) -> NoReturn:
    if report.stopped is not None:
        fail(report.stopped)
    raise typer.Exit(report.exit_code)


def _print_plan(commits: CommitRange, steps: Sequence[PlannedCommit], setup: Setup, tracker: Tracker) -> None:
    sizes = ",".join(map(str, setup.world_sizes))
    to_run, known = sum(s.run for s in steps), sum(s.existing is not None for s in steps)
    console.print(
        f"backfill {commits.text}: {len(steps)} of {len(commits.commits)} commits, {to_run} to run, "
        f"{known} already in MLflow ({tracker.uri}) for machine profile {setup.profile}, "
        f"world sizes {sizes}, config fingerprint {setup.config_fingerprint}",
        markup=False,
        soft_wrap=True,
    )


def _print_summary(report: BackfillReport) -> None:
    """The table on the terminal, as summary.md and backfill.json hold it (on disk already)."""
    table = Table(title=f"{report.title} · {counts(report.rows)}", title_justify="left")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, overflow="fold")
    for cells in summary_cells(report.rows):
        table.add_row(*map(Text, cells))  # a subject may hold brackets: text, never markup
    console.print(table)
    console.print(f"summary: {report.summary}", markup=False)


def _print_changes(tracker: Tracker, setup: Setup, kept: Sequence[RangeCommit], png: Path) -> None:
    """The change points of every figure over the range's runs of this setup, and their plot."""
    from benchgate.cli.history import change_table
    from benchgate.history.changes import ALPHA
    from benchgate.publish.plots import history_png
    from benchgate.ranges.backfill_run import range_changes

    with talking_to(tracker):
        points, found = range_changes(tracker, setup, kept)
    if not points:
        console.print("change points: no run of these commits in MLflow to read them from")
        return
    if not found:
        console.print(f"change points: none in {len(points)} runs (at the {ALPHA:.0%} level)")
    else:
        console.print(change_table(found))
    with writing("the plot", png):
        marks = [(change.panel, change.run.run_id) for change in found]
        console.print(f"plot: {history_png(points, png, changes=marks, keep_order=True)}", markup=False)
