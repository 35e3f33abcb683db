"""What the commands that read or write MLflow share: their exit codes (`TRACKING_CODES`), their
--config, --tracking-uri, --profile and --workload options, and the way they reach the store.

Used by `baseline` (cli/baseline.py), `sync` (cli/sync.py), `history`, `backfill` and `bisect`, and by
what `run` prints at its end (cli/run_output.py). Each command reads the same settings as `benchgate
run` (config file, MLFLOW_TRACKING_URI, --tracking-uri), so it talks to the store the runs went to. An
unreachable server is exit 3 after the bounded wait (`connect`), and so is one that stops answering
later (`talking_to`), or a disk of this machine that refuses a write (MLflow's local store), naming the
path. `mlflow_ui_command` says how to browse a store from where the user is.
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

from benchgate.cli.terminal import BAD_INPUT, OK, RUN_FAILED, exit_codes
from benchgate.config import RunConfig, load_config
from benchgate.errors import RunFailedError
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
