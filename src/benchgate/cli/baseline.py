"""`benchgate baseline`: the baseline of a machine profile in MLflow. `show` prints it (one per
workload) with its pinned anchor, `promote` makes a logged gate run the baseline from now on, and
`anchor` pins a run as the anchor of its machine profile and workload, or clears the pin (`--clear`).

A per-commit gate cannot see slowdowns that each stay within its tolerance: every PASS becomes the next
baseline. The anchor stays put (a release, a chosen older baseline), and compare judges every run
against it too (checks/creep.py). The pin is a tag in MLflow, which is where a fresh CI runner learns
it (tracking/refresh.py brings it into the store before compare), and the pinned run's result files go
into this machine's directory store at once (store/anchor.py).

Settings, the connection and the exit codes (`TRACKING_CODES`) are cli/mlflow_access.py's; the group is
registered on the app by cli/main.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from benchgate.cli.mlflow_access import (
    TRACKING_CODES,
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
from benchgate.cli.terminal import APP_SETTINGS, PlainCommand, console, fail
from benchgate.errors import BadInputError, BenchgateError

if TYPE_CHECKING:
    from benchgate.tracking.read import Run

baseline_app = typer.Typer(
    help="The baseline of a machine profile in MLflow: show it, promote a run, or pin a run as the anchor.",
    epilog=TRACKING_CODES,
    **APP_SETTINGS,
)
# `anchor` also reads [gate] baseline_dir, so its --config says so.
AnchorConfigOption = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help="TOML config file (the [tracking] section; [gate] baseline_dir: the store the anchor goes "
        "into).  [default: none]",
    ),
]


@baseline_app.command("promote", cls=PlainCommand, epilog=TRACKING_CODES)
def baseline_promote(
    run_id: Annotated[
        str, typer.Argument(metavar="RUN_ID", help="The parent (gate) run to make the baseline.")
    ],
    reason: Annotated[
        str, typer.Option(metavar="TEXT", help="Why; kept as a tag on the run.")
    ] = "benchgate baseline promote",
    config: ConfigOption = None,
    tracking_uri: UriOption = None,
) -> None:
    """Make a logged gate run the baseline of its machine profile and workload, from now on."""
    from benchgate.tracking import client as tracking
    from benchgate.tracking import read as tracking_read

    try:
        tracker = connect(tracking_config(config, tracking_uri))
        with talking_to(tracker):
            run = tracking_read.promote(tracker, run_id, reason)
    except BenchgateError as exc:
        fail(exc)
    tags = run.data.tags
    commit = tags.get(tracking.TAG_COMMIT, "?")[:12]
    console.print(
        f"promoted run {run_id} ({tags.get(tracking.TAG_WORKLOAD)} @ {commit}) "
        f"to baseline of machine profile {tags.get(tracking.TAG_PROFILE)}"
    )


@baseline_app.command("show", epilog=TRACKING_CODES)
def baseline_show(
    profile: ProfileOption = None,
    workload: WorkloadOption = None,
    config: ConfigOption = None,
    tracking_uri: UriOption = None,
) -> None:
    """The current baseline of a machine profile in MLflow, one per workload, and its pinned anchor."""
    from benchgate.results.figures import run_tokens_per_s
    from benchgate.tracking import anchor as tracking_anchor
    from benchgate.tracking import client as tracking
    from benchgate.tracking import read as tracking_read

    try:
        tracker, profile, runs = profile_runs(
            config, tracking_uri, profile, workload, baselines_only=True, limit=500
        )
        with talking_to(tracker):
            anchors = tracking_anchor.newest_anchors(
                tracking_anchor.anchored_runs(tracker, profile, workload)
            )
    except BenchgateError as exc:
        fail(exc)
    newest: dict[str, Run] = {}
    for run in runs:
        name = run.data.tags.get(tracking.TAG_WORKLOAD, "?")
        best = newest.get(name)
        if best is None or tracking_read.baseline_since(run) > tracking_read.baseline_since(best):
            newest[name] = run
    if not newest:
        console.print(f"no baseline in MLflow for machine profile {profile!r} at {tracker.uri}")
        print_anchors(profile, anchors)
        return
    table = Table(title=f"baselines · {profile}", title_justify="left")
    for column in ("workload", "run", "commit", "branch", "since", "reason", "tokens/s by ws"):
        table.add_column(column, overflow="fold")
    for name, run in sorted(newest.items()):
        tags = run.data.tags
        # The run's one tokens/s, as the verdict table and `benchgate history` show it.
        rates = ", ".join(f"ws{ws}: {rate:,.0f}" for ws, rate in run_tokens_per_s(run.data.metrics).items())
        table.add_row(
            name,
            run.info.run_id,
            tags.get(tracking.TAG_COMMIT, "")[:12],
            tags.get(tracking.TAG_BRANCH, ""),
            when(tracking_read.baseline_since(run)),
            tags.get(tracking.TAG_BASELINE_REASON, ""),
            rates,
        )
    console.print(table)
    print_anchors(profile, anchors)


def print_anchors(profile: str, anchors: dict[str, Run]) -> None:
    """The pinned anchors (`benchgate baseline anchor`), one per workload: the runs creep is measured from."""
    from benchgate.tracking import anchor as tracking_anchor
    from benchgate.tracking import client as tracking

    if not anchors:
        return
    table = Table(title=f"anchors · {profile}", title_justify="left")
    for column in ("workload", "run", "commit", "pinned", "by", "reason"):
        table.add_column(column, overflow="fold")
    for name, run in sorted(anchors.items()):
        tags = run.data.tags
        table.add_row(
            name,
            run.info.run_id,
            tags.get(tracking.TAG_COMMIT, "")[:12],
            when(tracking_anchor.anchored_since(run)),
            tags.get(tracking_anchor.TAG_ANCHOR_BY, ""),
            tags.get(tracking_anchor.TAG_ANCHOR_REASON, ""),
        )
    console.print(table)


@baseline_app.command("anchor", cls=PlainCommand, epilog=TRACKING_CODES)
def baseline_anchor(
    run_id: Annotated[
        str | None,
        typer.Argument(metavar="RUN_ID", help="The parent (gate) run to pin; leave out with --clear."),
    ] = None,
    clear: Annotated[
        bool,
        typer.Option(
            "--clear",
            help="Remove the pin instead: in MLflow and in this machine's store (only what benchgate "
            "wrote).  [default: off]",
        ),
    ] = False,
    workload: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="With --clear: only this workload's anchor.  [default: all]"),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            metavar="PROFILE",
            help="With --clear: the machine profile.  "
            "[default: this machine's, as `benchgate env` prints it]",
        ),
    ] = None,
    reason: Annotated[
        str, typer.Option(metavar="TEXT", help="Why; kept as a tag on the run.")
    ] = "benchgate baseline anchor",
    config: AnchorConfigOption = None,
    tracking_uri: UriOption = None,
) -> None:
    """Pin a logged gate run as the anchor of its machine profile and workload: every later run is also
    judged against it ("tokens/s since anchor"), so slowdowns that each pass add up to a FAIL. Who
    (USER) and why stay on the run as MLflow tags; its result files go into gate.baseline_dir."""
    try:
        if clear:
            if run_id is not None:
                raise BadInputError(f"RUN_ID: got {run_id!r} with --clear (clear, or pin a run: not both)")
            _clear(profile, workload, config, tracking_uri)
            return
        if run_id is None:
            raise BadInputError("RUN_ID: got nothing (name the gate run to pin, or pass --clear)")
        for flag, value in (("--workload", workload), ("--profile", profile)):
            if value is not None:
                raise BadInputError(f"{flag}: got {value!r} without --clear (a pinned run has its own)")
        _pin(run_id, reason, config, tracking_uri)
    except BenchgateError as exc:
        fail(exc)


def _pin(run_id: str, reason: str, config: Path | None, tracking_uri: str | None) -> None:
    from benchgate.tracking import anchor as tracking_anchor
    from benchgate.tracking import client as tracking

    if not reason.strip():
        raise BadInputError("--reason: got an empty text (say why this run is the anchor)")
    cfg = tracking_config(config, tracking_uri)
    tracker = connect(cfg)
    who = os.environ.get("USER") or os.environ.get("USERNAME") or "unknown"
    with talking_to(tracker):
        run, location = tracking_anchor.pin(tracker, run_id, reason, who, cfg.gate.baseline_dir)
    tags = run.data.tags
    commit = tags.get(tracking.TAG_COMMIT, "?")[:12]
    console.print(
        f"anchored run {run_id} ({tags.get(tracking.TAG_WORKLOAD)} @ {commit}) "
        f"for machine profile {tags.get(tracking.TAG_PROFILE)}, by {who}; stored in {location}",
        markup=False,
        highlight=False,
    )


def _clear(profile: str | None, workload: str | None, config: Path | None, tracking_uri: str | None) -> None:
    from benchgate.measure.env import capture_environment
    from benchgate.store.anchor import clear_anchor, plain_name
    from benchgate.tracking import anchor as tracking_anchor

    cfg = tracking_config(config, tracking_uri)
    if workload is not None:
        plain_name(workload, "--workload")
    profile = plain_name(profile, "--profile") if profile else str(capture_environment()["machine_profile"])
    tracker = connect(cfg)
    # MLflow first: a pin left there would come back into the store on the next run's refresh.
    with talking_to(tracker):
        unpinned = tracking_anchor.unpin(tracker, profile, workload)
    removed = clear_anchor(cfg.gate.baseline_dir, profile, workload)
    which = f"workload {workload!r}" if workload else "every workload"
    if not unpinned and not removed:
        console.print(f"no anchor of machine profile {profile!r} ({which}) to clear", markup=False)
        return
    runs = ", ".join(run.info.run_id for run in unpinned) or "none"
    stored = ", ".join(removed) or "none"
    console.print(
        f"cleared the anchor of machine profile {profile!r} ({which}): unpinned in MLflow: {runs}; "
        f"removed from {cfg.gate.baseline_dir}: {stored}",
        markup=False,
        highlight=False,
    )
