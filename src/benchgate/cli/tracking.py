"""The MLflow commands: `benchgate baseline show|promote` and `benchgate sync` (history: cli/history.py;
`baseline anchor`: cli/anchor.py).

Each reads the same settings as `benchgate run` (config file, MLFLOW_TRACKING_URI, --tracking-uri), so
they talk to the store the runs went to. An unreachable server is exit 3 after the bounded wait, a run
id or profile that does not exist is exit 2, and so is a damaged spool entry (`sync` names it and sends
the others). A disk of this machine that refuses a write (the spool, MLflow's local store, the PNG) is
exit 3, naming the path. `mlflow_ui_command` says how to browse a store from where the user is.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from benchgate.cli.terminal import (
    APP_SETTINGS,
    BAD_INPUT,
    OK,
    RUN_FAILED,
    PlainCommand,
    console,
    errors,
    exit_codes,
    fail,
)
from benchgate.config import RunConfig, load_config
from benchgate.errors import (
    BadInputError,
    BenchgateError,
    DiskError,
    RunFailedError,
    SpoolEntryError,
)
from benchgate.kit.diskfaults import local_faults

if TYPE_CHECKING:
    from benchgate.tracking.client import Tracker
    from benchgate.tracking.read import Run

# The exit codes of the commands that read or write MLflow.
TRACKING_CODES = exit_codes(
    OK,
    (BAD_INPUT[0], "bad input: a flag or the config file, or a run id or profile MLflow does not have"),
    RUN_FAILED,
)
baseline_app = typer.Typer(
    help="The baseline of a machine profile in MLflow: show it, promote a run, or pin a run as the anchor.",
    epilog=TRACKING_CODES,
    **APP_SETTINGS,
)
SYNC_CODES = exit_codes(
    (OK[0], "every entry was sent (or there was nothing to send)"),
    (BAD_INPUT[0], "bad input, or a damaged entry was left in place (a partial sync: it needs a human)"),
    (RUN_FAILED[0], "MLflow could not be reached, or a local disk refused a write"),
)
ConfigOption = Annotated[
    Path | None,
    typer.Option(metavar="FILE", help="TOML config file (the [tracking] section).  [default: none]"),
]
UriOption = Annotated[
    str | None,
    typer.Option(
        metavar="URI",
        help="MLflow tracking URI.  [default: tracking.uri, else MLFLOW_TRACKING_URI, else the local store]",
    ),
]
ProfileOption = Annotated[
    str | None,
    typer.Option(
        metavar="PROFILE",
        help="Machine profile.  [default: this machine's, as `benchgate env` prints it]",
    ),
]
WorkloadOption = Annotated[
    str | None,
    typer.Option(metavar="NAME", help="Only this workload (its name, e.g. gpt-tiny).  [default: all]"),
]


def tracking_config(config: Path | None, tracking_uri: str | None) -> RunConfig:
    return load_config(config, {"tracking.uri": tracking_uri})


def connect(cfg: RunConfig) -> Tracker:
    from benchgate.tracking import client as tracking

    try:
        return tracking.connect(cfg)
    except tracking.TrackingUnavailable as e:
        raise RunFailedError(str(e)) from None


@contextlib.contextmanager
def talking_to(tracker: Tracker) -> Iterator[None]:
    """A server that stops answering after the connect is exit 3 with its error, not a traceback."""
    from benchgate.tracking import client as tracking

    try:
        with local_faults(tracker.local_dir):
            yield
    except tracking.send_errors() as e:
        raise RunFailedError(f"MLflow at {tracker.uri}: {tracking.short_error(e)}") from None


def _this_profile() -> str:
    from benchgate.measure.env import capture_environment

    return str(capture_environment()["machine_profile"])


def profile_runs(
    config: Path | None, tracking_uri: str | None, profile: str | None, workload: str | None, **search: Any
) -> tuple[Tracker, str, list[Run]]:
    """The tracker, the profile (default: this machine's) and its gate runs, newest first."""
    from benchgate.tracking import read as tracking_read

    tracker = connect(tracking_config(config, tracking_uri))
    profile = profile or _this_profile()
    with talking_to(tracker):
        return tracker, profile, tracking_read.gate_runs(tracker, profile, workload, **search)


def when(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(unix))


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


FromOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--from",
        metavar="DIR",
        help="Send the spool entries found under this directory instead (repeatable): a downloaded KFP "
        "results artifact (its spool/), a spool directory, or a mounted pipeline root. Nothing in it is "
        "removed.  [default: none: the spool directory's entries]",
    ),
]


def sync(
    config: ConfigOption = None,
    tracking_uri: UriOption = None,
    spool_dir: Annotated[
        Path | None, typer.Option(metavar="DIR", help="Spool directory.  [default: tracking.spool_dir]")
    ] = None,
    from_dirs: FromOption = None,
) -> None:
    """Send the runs spooled while MLflow was unreachable. Safe to repeat: a run is never logged twice.

    Sent entries are removed from the spool directory; entries read with --from are left in place. A
    damaged entry is named and left where it is while the others are sent.
    """
    from benchgate.store import spool

    try:
        cfg = load_config(config, {"tracking.uri": tracking_uri, "tracking.spool_dir": spool_dir})
        if from_dirs:
            for directory in from_dirs:
                if not directory.is_dir():
                    raise BadInputError(f"--from: got {str(directory)!r} (not a directory)")
            # A directory given twice, or inside another, is read once. (Copies of one run elsewhere are
            # each found; the run key makes every copy after the first "already in MLflow".)
            unique = {str(entry.resolve()): entry for d in from_dirs for entry in spool.found(d)}
            entries, owned, where = list(unique.values()), False, ", ".join(str(d) for d in from_dirs)
            damaged: list[str] = []
        else:
            own = cfg.tracking.spool_dir
            entries, owned, where = spool.pending(own), True, str(own)
            damaged = [f"{p}: not a spool entry (no {spool.RECORD_FILE})" for p in spool.strays(own)]
        for line in damaged:
            _warn_damaged(line)
        if not entries and not damaged:
            console.print(f"nothing to sync in {where}")
            return
        sent = _send(cfg, entries, owned, damaged) if entries else 0
        if damaged:
            raise SpoolEntryError(
                f"{len(damaged)} damaged spool entr{'y' if len(damaged) == 1 else 'ies'} not sent, left "
                f"in place to be repaired or removed ({sent} sent): " + "; ".join(damaged)
            )
    except BenchgateError as exc:
        fail(exc)


def _send(cfg: RunConfig, entries: list[Path], owned: bool, damaged: list[str]) -> int:
    """Log each entry; a damaged one is added to `damaged` and the rest go on. Returns how many went."""
    from benchgate.store import spool
    from benchgate.tracking import client as tracking
    from benchgate.tracking.record import log_entry

    tracker = connect(cfg)
    sent = 0
    for index, entry in enumerate(entries):
        try:
            run_id, logged = log_entry(tracker, entry)
        except SpoolEntryError as e:
            damaged.append(str(e).removeprefix("damaged spool entry "))
            _warn_damaged(damaged[-1])
            continue
        except tracking.send_errors() as e:
            kept = "left in the spool" if owned else "left in place"
            raise RunFailedError(
                f"{entry}: MLflow at {tracker.uri}: {tracking.short_error(e)} ({kept}, with the "
                f"{len(entries) - index - 1} not tried after it; {sent} sent; `benchgate sync` again "
                "sends the rest)"
            ) from None
        if owned:  # only entries of our own spool: --from directories are not ours
            try:
                spool.remove(entry)
            except DiskError as e:
                raise DiskError(f"{entry.name} is logged to MLflow as run {run_id}, but {e}") from None
        sent += 1
        state = "logged" if logged else "already in MLflow"
        console.print(f"{entry.name if owned else entry}: {state} as run {run_id}")
    return sent


def _warn_damaged(line: str) -> None:
    errors.print(f"[yellow]damaged spool entry[/] {escape(line)} (left in place)", highlight=False)


def mlflow_ui_command(uri: str, experiment_id: str | None, cwd: Path) -> str:
    """How to browse the MLflow store at `uri` from `cwd`: `make ui` in a benchgate checkout whose
    Makefile serves that very store, else the `mlflow ui` command line it runs; and the runs table's
    address where the experiment is known. A server store (http) is browsed where it is served."""
    from benchgate.tracking.view import ui_url

    runs = ui_url("http://127.0.0.1:5000", experiment_id) if experiment_id else ""
    if uri.startswith(("http://", "https://")):
        return ui_url(uri, experiment_id) if experiment_id else uri
    makefile = cwd / "Makefile"
    served = f"sqlite:///{(cwd / '.benchgate' / 'mlflow' / 'mlflow.db').resolve()}"
    try:
        has_ui = makefile.is_file() and any(
            line.startswith("ui:") for line in makefile.read_text(encoding="utf-8").splitlines()
        )
    except (OSError, UnicodeDecodeError):
        has_ui = False
    if has_ui and uri == served:
        command = "make ui"
    else:
        # As the Makefile's `ui` target starts it: no job execution (a server for browsing only).
        mlflow = Path(sys.executable).with_name("mlflow")
        program = shlex.quote(str(mlflow)) if mlflow.is_file() else "mlflow"
        command = (
            f"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false {program} ui --backend-store-uri "
            f"{shlex.quote(uri)} --host 127.0.0.1 --port 5000 --workers 1"
        )
    return f"{command}  then open {runs}" if runs else command
