"""The `benchgate` app: it is created here, with `--version`, and every command and group is registered
on it from its own module, in the order `benchgate --help` lists them; `main()` is the console entry.

The modules: cli/gate.py (run, compare, env, version), cluster.py (submit, compile, controller),
doctor.py, backfill.py, bisect.py, sync.py, comment.py, baseline.py (baseline promote, show, anchor),
history.py (history, history ack) and suite.py (suite run, suite report). The MLflow commands share
cli/mlflow_access.py; what a run prints is in cli/run_output.py and progress_lines.py. Each is thin:
parse, validate, call the core or the pipeline, map errors.

Exit codes: 0 pass (or warn), 1 regression (FAIL), 2 bad input or config, 3 the run itself failed
(for submit also: KFP unreachable, or the wait timed out), 4 UNKNOWN (the timing was not resolved).
Each command's help ends with its own; the help conventions (plain text, metavars, defaults) are in
`benchgate.cli.terminal`.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from benchgate._version import __version__
from benchgate.cli.backfill import BACKFILL_CODES, backfill
from benchgate.cli.baseline import baseline_app
from benchgate.cli.bisect import BISECT_CODES, bisect
from benchgate.cli.cluster import COMPILE_CODES, CONTROLLER_CODES, SUBMIT_CODES, compile_, controller, submit
from benchgate.cli.comment import EPILOG as COMMENT_EPILOG
from benchgate.cli.comment import comment
from benchgate.cli.doctor import DOCTOR_CODES, doctor
from benchgate.cli.finalizers import RELEASE_CODES, release_finalizers
from benchgate.cli.gate import ENV_CODES, GATE_EPILOG, VERSION_CODES, compare, env, run, version
from benchgate.cli.history import history_app
from benchgate.cli.policy import policy_app
from benchgate.cli.suite import suite_app
from benchgate.cli.sync import SYNC_CODES, sync
from benchgate.cli.terminal import APP_SETTINGS, PlainCommand, console, errors
from benchgate.errors import EXIT_BAD_INPUT, EXIT_RUN_FAILED

app = typer.Typer(
    help="Benchmark PyTorch training and gate regressions against a per-machine-profile baseline.",
    epilog=GATE_EPILOG,
    no_args_is_help=True,
    **APP_SETTINGS,
)


def _print_version(value: bool) -> None:
    if value:
        console.print(__version__, markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print benchgate's version and exit."
        ),
    ] = False,
) -> None:
    # The group's own options (--version); its help is the Typer's.
    pass


# `benchgate --help` lists the commands in the order they are registered here, then the groups (Typer
# puts groups after commands): the gate's local commands, the cluster ones, what this machine is and can
# decide, then the MLflow commands.
app.command(epilog=GATE_EPILOG)(run)
app.command(cls=PlainCommand, epilog=GATE_EPILOG)(compare)
app.command(epilog=SUBMIT_CODES)(submit)
app.command(name="compile", epilog=COMPILE_CODES)(compile_)
app.command(epilog=CONTROLLER_CODES)(controller)
app.command(name="release-finalizers", epilog=RELEASE_CODES)(release_finalizers)
app.command(epilog=ENV_CODES)(env)
# `doctor`, what this machine can decide, beside `env`, what it is.
app.command(epilog=DOCTOR_CODES)(doctor)
app.command(epilog=VERSION_CODES)(version)
app.command(cls=PlainCommand, epilog=BACKFILL_CODES)(backfill)
app.command(epilog=BISECT_CODES)(bisect)
app.command(epilog=SYNC_CODES)(sync)
app.command(name="comment", epilog=COMMENT_EPILOG)(comment)
app.add_typer(baseline_app, name="baseline")
app.add_typer(history_app, name="history")
app.add_typer(policy_app, name="policy")
app.add_typer(suite_app, name="suite")


def main() -> None:  # pragma: no cover - console entry point used by `python -m benchgate`
    try:
        app()
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(EXIT_RUN_FAILED)


__all__ = ["EXIT_BAD_INPUT", "app", "main"]
