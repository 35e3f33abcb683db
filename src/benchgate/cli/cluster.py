"""`benchgate submit | compile | controller`: the commands for a cluster (KFP, Kubernetes).

Thin as `cli`: parse, validate, call `benchgate.kfp` or `benchgate.controller`, map errors. `cli`
registers them beside its own, so `benchgate --help` lists every command in one place.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from benchgate.cli.terminal import GATE_CODES, OK, console, exit_codes, option, parse_pairs
from benchgate.cli.terminal import fail as _fail
from benchgate.errors import EXIT_BAD_INPUT, BenchgateError
from benchgate.kit.credentials import without_credentials


def default_repository() -> str:
    """BENCHGATE_REPOSITORY, else the origin of the checkout we are in (what CI usually benchmarks)."""
    from_env = os.environ.get("BENCHGATE_REPOSITORY", "")
    if from_env:
        return from_env
    try:
        done = subprocess.run(
            ["git", "remote", "get-url", "origin"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    # A CI checkout's origin may carry the job's token (https://ci-token:TOKEN@host/...): never pass it on.
    return without_credentials(done.stdout.strip()) if done.returncode == 0 else ""


SUBMIT_CODES = exit_codes(
    (GATE_CODES[0][0], "PASS or WARN (with --no-wait: the run was submitted)"),
    *GATE_CODES[1:3],
    (GATE_CODES[3][0], "KFP unreachable, the run failed, or the wait timed out"),
    GATE_CODES[4],
)
COMPILE_CODES = exit_codes((OK[0], "the files were written"))
CONTROLLER_CODES = exit_codes(
    (OK[0], "stopped"), (EXIT_BAD_INPUT, "a setting in the environment has a bad value (named)")
)


def submit(
    commit: Annotated[
        str,
        option(metavar="SHA", text="Full SHA of the commit to benchmark (40 hex digits).", default="none"),
    ] = "",
    repository: Annotated[
        str | None,
        option(
            metavar="URL",
            text="git URL of the code under test.",
            default="$BENCHGATE_REPOSITORY, else origin",
        ),
    ] = None,
    branch: Annotated[
        str | None,
        option(
            metavar="BRANCH",
            text="The commit's branch; baselines update on main.",
            default="$BENCHGATE_BRANCH",
        ),
    ] = None,
    param: Annotated[
        list[str] | None,
        option(
            "--param",
            metavar="KEY=VALUE",
            text="A pipeline parameter, e.g. world_size_n=8; repeatable.",
            default="none",
        ),
    ] = None,
    experiment: Annotated[
        str, typer.Option(envvar="KFP_EXPERIMENT", metavar="NAME", help="KFP experiment.")
    ] = "benchgate",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the run to its verdict.")] = True,
    timeout_s: Annotated[float, typer.Option(metavar="SECONDS", help="Longest wait for the run.")] = 3600.0,
    poll_s: Annotated[
        float, typer.Option(metavar="SECONDS", help="Time between status checks while waiting.")
    ] = 15.0,
    rerun: Annotated[
        bool,
        option(
            "--rerun",
            text="Start a new attempt (NAME-attempt-2, -3, ...) when the latest run of this commit and "
            "these arguments ended FAILED, CANCELED or SKIPPED; one still going or SUCCEEDED is attached "
            "to as without it.",
            default="off",
        ),
    ] = False,
    suite: Annotated[
        Path | None,
        option(
            "--suite",
            metavar="FILE",
            text="A suite file (suite.toml): its entries one at a time in one run of the benchgate-suite "
            "pipeline, then one exit code as `benchgate suite run`'s (docs/suites-on-kubernetes.md).",
            default="none: one gate run",
        ),
    ] = None,
) -> None:
    """Run the pipeline on a KFP cluster (KFP_HOST, KFP_TOKEN) and exit with the gate's exit code."""
    from benchgate.kfp.api import connection_from_env
    from benchgate.kfp.pipeline import validate_pipeline_arguments
    from benchgate.kfp.run_request import build_arguments, pipeline_parameter_names
    from benchgate.kfp.submit import submit as submit_gate
    from benchgate.measure.source import validate_commit

    submit_run: Callable[..., Any] = submit_gate

    try:
        validate_commit(commit, "--commit")  # first, before anything reads the environment or the network
        repository = repository if repository is not None else default_repository()
        branch = branch or os.environ.get("BENCHGATE_BRANCH", "")
        if suite is not None:
            from benchgate.kfp.suite.submit import submit_suite, suite_arguments
            from benchgate.suite.spec import load_suite

            arguments = suite_arguments(
                load_suite(suite), commit, repository, branch, parse_pairs(param or [], "--param")
            )
            submit_run = submit_suite
        else:
            arguments = build_arguments(
                commit, repository, branch, parse_pairs(param or [], "--param"), pipeline_parameter_names()
            )
            validate_pipeline_arguments(arguments)  # the env task's config check, before anything is sent
        conn = connection_from_env(os.environ)
        outcome = submit_run(
            arguments,
            conn,
            experiment,
            wait=wait,
            timeout_s=timeout_s,
            poll_s=poll_s,
            say=console.print,
            rerun=rerun,
        )
    except BenchgateError as exc:
        _fail(exc)
    if outcome.state:
        console.print(f"run {outcome.run_name}: {outcome.state}: {outcome.message}")
    elif outcome.message:
        console.print(outcome.message)
    raise typer.Exit(outcome.exit_code)


def compile_(
    root: Annotated[
        Path,
        typer.Option(metavar="DIR", help="Repository root to write pipelines/ and components/ under."),
    ] = Path("."),
) -> None:
    """Compile the pipelines and components to YAML (pipelines/benchgate.yaml, pipelines/bisect.yaml,
    pipelines/benchgate-suite.yaml, components/*.yaml) and generate the CRDs from their models
    (charts/benchgate/files/crds/)."""
    from benchgate.controller.spec import crds
    from benchgate.kfp.bisect.pipeline import BISECT_PIPELINE_FILE, bisect_pipeline
    from benchgate.kfp.compile import compile_all, compile_to
    from benchgate.kfp.suite.pipeline import SUITE_PIPELINE_FILE, suite_pipeline

    written = [
        *compile_all(root),
        compile_to(bisect_pipeline, root / BISECT_PIPELINE_FILE),
        compile_to(suite_pipeline(), root / SUITE_PIPELINE_FILE),
    ]
    for path in [*written, *crds.write(root / crds.DEFAULT_DIR)]:
        console.print(str(path))


def controller(
    liveness: Annotated[
        str, typer.Option(metavar="URL", help="URL of kopf's liveness endpoint ('' for none).")
    ] = "http://0.0.0.0:8080/healthz",
) -> None:
    """Run the Kubernetes controller of BenchmarkRun and BenchmarkSchedule (settings from the environment:
    KFP_HOST, KFP_TOKEN, MLFLOW_TRACKING_URI, BENCHGATE_*; see the chart's ConfigMap)."""
    from benchgate.controller.main import run as run_controller
    from benchgate.controller.settings import settings_from_env

    try:
        settings = settings_from_env()
    except BenchgateError as exc:
        _fail(exc)
    run_controller(settings, liveness or None)
