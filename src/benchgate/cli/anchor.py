"""`benchgate baseline anchor`: pin a logged gate run as the anchor of its machine profile and workload,
or clear the pin (`--clear`).

A per-commit gate cannot see slowdowns that each stay within its tolerance: every PASS becomes the next
baseline. The anchor stays put (a release, a chosen older baseline), and compare judges every run
against it too (checks/creep.py). The pin is a tag in MLflow, which is where a fresh CI runner learns
it (tracking/refresh.py brings it into the store before compare), and the pinned run's result files go
into this machine's directory store at once (store/anchor.py). Registered on `baseline_app` by
cli/main.py; exit codes are those of the other MLflow commands (cli/tracking.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from benchgate.cli.terminal import console, fail
from benchgate.cli.tracking import UriOption, connect, talking_to, tracking_config
from benchgate.errors import BadInputError, BenchgateError

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help="TOML config file (the [tracking] section; [gate] baseline_dir: the store the anchor goes "
        "into).  [default: none]",
    ),
]


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
    config: ConfigOption = None,
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


def _pin(run_id: str, reason: str, config: ConfigOption, tracking_uri: UriOption) -> None:
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


def _clear(profile: str | None, workload: str | None, config: ConfigOption, tracking_uri: UriOption) -> None:
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
