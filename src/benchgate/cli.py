"""`benchgate run | compare | env | submit | compile`: the command line. Thin: parse, validate, call the
core or the pipeline, map errors.

Exit codes: 0 pass (or warn), 1 regression (FAIL), 2 bad input or config, 3 the run itself failed
(for submit also: KFP unreachable, or the wait timed out), 4 UNKNOWN (the timing was not resolved).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from benchgate import __version__
from benchgate.baseline import find_baseline
from benchgate.cli_tracking import baseline_app, history, sync
from benchgate.compare import compare as compare_bundles
from benchgate.config import load_config
from benchgate.credentials import without_credentials
from benchgate.env import capture_environment
from benchgate.errors import EXIT_BAD_INPUT, EXIT_RUN_FAILED, BenchgateError, ConfigError
from benchgate.kfp.local_run import GateOutcome, run_gate
from benchgate.report import print_verdict
from benchgate.results import Bundle, load_bundle
from benchgate.stages import stage_env, write_comparison
from benchgate.terminal import console, errors
from benchgate.terminal import fail as _fail

app = typer.Typer(
    help="Benchmark PyTorch training and gate regressions against a per-machine-profile baseline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _parse_pairs(pairs: list[str], flag: str) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag}: got {pair!r}, expected KEY=VALUE")
        try:
            parsed[key] = json.loads(raw)  # numbers and booleans keep their type
        except (ValueError, RecursionError):  # not JSON, an int past 4300 digits, nesting too deep
            # Taken as the text it is; the config or the pipeline's parameters then judge it.
            parsed[key] = raw
    return parsed


def _parse_world_sizes(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(
            f"--world-sizes: got {text!r}, expected comma-separated integers like 1,2"
        ) from None


class RichReporter:
    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: Any = None

    def stage_started(self, name: str, total: int | None = None) -> None:
        self.task = self.progress.add_task(name, total=total)

    def stage_progress(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total)

    def stage_finished(self, name: str, seconds: float) -> None:
        total = self.progress.tasks[-1].total or 1
        self.progress.update(self.task, completed=total, total=total, description=f"{name} ({seconds:.1f} s)")


@app.command()
def run(
    config: Annotated[Path | None, typer.Option(help="TOML config file; flags override it.")] = None,
    workload: Annotated[str | None, typer.Option(help="Workload factory, 'module:function'.")] = None,
    workload_arg: Annotated[
        list[str] | None,
        typer.Option("--workload-arg", help="KEY=VALUE for the workload factory; repeatable."),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Measured steps per world size.")] = None,
    warmup: Annotated[int | None, typer.Option(help="Warmup steps before measuring.")] = None,
    world_sizes: Annotated[str | None, typer.Option(help="Comma-separated, e.g. 1,2. Default 1,N.")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda.")] = None,
    out: Annotated[Path | None, typer.Option(help="Directory for this run's results.")] = None,
    baseline_dir: Annotated[Path | None, typer.Option(help="Baseline store directory.")] = None,
    update_baseline: Annotated[
        bool | None,
        typer.Option(
            "--update-baseline/--no-update-baseline",
            help="Always / never write this run as the baseline (default: on main).",
        ),
    ] = None,
    eval_: Annotated[bool | None, typer.Option("--eval/--no-eval", help="Run the eval stage.")] = None,
    trace: Annotated[bool | None, typer.Option("--trace/--no-trace", help="Record a profiler trace.")] = None,
    timeout_s: Annotated[float | None, typer.Option(help="Collective timeout per rank, seconds.")] = None,
    commit: Annotated[
        str, typer.Option(help="Benchmark this full SHA of --repository instead of the code importable here.")
    ] = "",
    repository: Annotated[str, typer.Option(help="git URL of the code under test (with --commit).")] = "",
    branch: Annotated[str, typer.Option(help="The commit's branch (with --commit).")] = "",
    base: Annotated[
        str,
        typer.Option(
            help="A/B: a git ref of this repository (e.g. origin/main) benchmarked side by side with the "
            "candidate wherever the stored-baseline screen does not PASS."
        ),
    ] = "",
    tracking_uri: Annotated[
        str | None, typer.Option(help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else local).")
    ] = None,
    tracking: Annotated[
        bool | None, typer.Option("--tracking/--no-tracking", help="Log to MLflow (default: on).")
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Continue the undecided (UNKNOWN) A/B of the run in this directory from its saved rounds "
            "instead of starting over, with that run's settings; --config may give a larger [gate.ab] budget."
        ),
    ] = None,
) -> None:
    """Run the whole gate locally: the benchgate pipeline, through kfp.local."""
    if resume is not None:
        _resume(resume, config)
    try:
        overrides: dict[str, Any] = {
            "bench.workload": workload,
            "bench.workload_args": _parse_pairs(workload_arg, "--workload-arg") if workload_arg else None,
            "bench.steps": steps,
            "bench.warmup": warmup,
            "bench.world_sizes": _parse_world_sizes(world_sizes),
            "bench.device": device,
            "bench.timeout_s": timeout_s,
            "eval.enabled": eval_,
            "trace.enabled": trace,
            "gate.baseline_dir": baseline_dir,
            "gate.update_baseline": None
            if update_baseline is None
            else ("always" if update_baseline else "never"),
            "out": out,
            "tracking.uri": tracking_uri,
            "tracking.enabled": tracking,
        }
        cfg = load_config(config, overrides)
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            outcome = run_gate(cfg, RichReporter(progress), commit, repository, branch, base)
    except BenchgateError as exc:
        _fail(exc)
    print_verdict(outcome.comparison, console)
    console.print(f"results: {outcome.out_dir}/  (compare.json, metrics-ws*.json, eval.json, trace/)")
    console.print(f"pipeline run: {outcome.pipeline_dir}  (log: {outcome.out_dir}/logs/pipeline.log)")
    if outcome.baseline_written:
        console.print(f"baseline written: {outcome.baseline_written}")
    _print_tracking(outcome)
    _print_unknown_policy(outcome.comparison, outcome.out_dir)
    raise typer.Exit(outcome.comparison.exit_code)


def _resume(directory: Path, config: Path | None) -> None:
    from benchgate.resume import resume_gate

    try:
        settings = load_config(config) if config is not None else None
        comparison = resume_gate(directory, settings)
    except BenchgateError as exc:
        _fail(exc)
    print_verdict(comparison, console)
    console.print(f"results: {directory.resolve()}/  (compare.json, compare.md, report.html, ab/)")
    _print_unknown_policy(comparison, directory.resolve())
    raise typer.Exit(comparison.exit_code)


def _print_unknown_policy(comparison: Any, out_dir: Path) -> None:
    """An UNKNOWN names what decides it; with gate.on_unknown = neutral, it says the job passes anyway."""
    if comparison.verdict != "UNKNOWN":
        return
    undecided_ab = [c for c in comparison.checks if c.status == "UNKNOWN" and c.decided_by == "ab"]
    if undecided_ab:
        spent = next((k for k in ("max_seconds", "max_rounds") if any(k in c.note for c in undecided_ab)), "")
        more = (
            f" --config FILE  (a larger [gate.ab] {spent} in FILE: the budget that ran out)" if spent else ""
        )
        console.print(f"next: continue the A/B from its rounds: benchgate run --resume {out_dir}{more}")
    elif any(c.status == "UNKNOWN" for c in comparison.checks):
        console.print("next: decide it by A/B against the base code: benchgate run --base origin/main")
    if comparison.on_unknown == "neutral":
        console.print("notice: UNKNOWN treated as neutral (gate.on_unknown = neutral): exit 0")


def _print_tracking(outcome: GateOutcome) -> None:
    state, published = outcome.tracking, outcome.published
    if not state.get("enabled"):
        return
    if state.get("reachable") is False:
        console.print(f"[yellow]warning:[/] {state.get('error')}: compared against the cached baseline")
    if published.get("mlflow_run_id"):
        where = published.get("mlflow_url") or f"{state.get('uri')}  (browse: make ui)"
        console.print(f"MLflow run {published['mlflow_run_id']}: {where}")
    if published.get("spooled"):
        console.print(
            f"[yellow]warning:[/] not in MLflow yet; spooled in {published['spooled']}: "
            "`benchgate sync` sends it"
        )


@app.command()
def compare(
    current: Annotated[Path, typer.Argument(help="Result directory of the run to judge.")],
    baseline: Annotated[
        Path | None, typer.Option(help="A baseline or result directory to compare with.")
    ] = None,
    baseline_dir: Annotated[
        Path | None, typer.Option(help="Baseline store to look the baseline up in.")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML config file (for tolerances).")] = None,
) -> None:
    """Compare a finished run with a baseline and print the verdict."""
    try:
        cfg = load_config(config, {"gate.baseline_dir": baseline_dir})
        current_bundle = load_bundle(current)
        base: Bundle | None
        if baseline is not None:
            base = load_bundle(baseline)
        else:
            assert current_bundle.workload is not None
            base = find_baseline(
                cfg.gate.baseline_dir, current_bundle.machine_profile, current_bundle.workload
            )
        comparison = compare_bundles(base, current_bundle, cfg.gate.tolerances)
        write_comparison(current, comparison)
    except BenchgateError as exc:
        _fail(exc)
    print_verdict(comparison, console)
    raise typer.Exit(comparison.exit_code)


def _default_repository() -> str:
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


@app.command()
def submit(
    commit: Annotated[str, typer.Option(help="Full SHA of the commit to benchmark (40 hex digits).")] = "",
    repository: Annotated[
        str | None,
        typer.Option(help="git URL of the code under test [default: $BENCHGATE_REPOSITORY or origin]"),
    ] = None,
    branch: Annotated[
        str | None,
        typer.Option(help="The commit's branch; baselines update on main [default: $BENCHGATE_BRANCH]"),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="KEY=VALUE pipeline parameter, e.g. world_size_n=8; repeatable."),
    ] = None,
    experiment: Annotated[str, typer.Option(envvar="KFP_EXPERIMENT", help="KFP experiment.")] = "benchgate",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the run to its verdict.")] = True,
    timeout_s: Annotated[float, typer.Option(help="Longest wait for the run, seconds.")] = 3600.0,
    poll_s: Annotated[float, typer.Option(help="Seconds between status checks while waiting.")] = 15.0,
    rerun: Annotated[
        bool,
        typer.Option(
            "--rerun",
            help="Start a new attempt (NAME-attempt-2, -3, ...) when the latest run of this commit and "
            "these arguments ended FAILED, CANCELED or SKIPPED; one still going or SUCCEEDED is attached "
            "to as without it.",
        ),
    ] = False,
) -> None:
    """Run the pipeline on a KFP cluster (KFP_HOST, KFP_TOKEN) and exit with the gate's exit code."""
    from benchgate.kfp.params import validate_pipeline_arguments
    from benchgate.kfp.submit import build_arguments, connection_from_env, pipeline_parameter_names
    from benchgate.kfp.submit import submit as submit_run
    from benchgate.source import validate_commit

    try:
        validate_commit(commit, "--commit")  # first, before anything reads the environment or the network
        arguments = build_arguments(
            commit,
            repository if repository is not None else _default_repository(),
            branch or os.environ.get("BENCHGATE_BRANCH", ""),
            _parse_pairs(param or [], "--param"),
            pipeline_parameter_names(),
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


@app.command(name="compile")
def compile_(
    root: Annotated[
        Path, typer.Option(help="Repository root to write pipelines/ and components/ under.")
    ] = Path("."),
) -> None:
    """Compile the pipeline and components to YAML (pipelines/benchgate.yaml, components/*.yaml) and
    generate the CRDs from their models (charts/benchgate/files/crds/)."""
    from benchgate.controller import crds
    from benchgate.kfp.compile import compile_all

    for path in [*compile_all(root), *crds.write(root / crds.DEFAULT_DIR)]:
        console.print(str(path))


@app.command()
def controller(
    liveness: Annotated[
        str, typer.Option(help="URL of kopf's liveness endpoint ('' for none).")
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


@app.command()
def env(
    out: Annotated[Path | None, typer.Option(help="Directory to write env.json into.")] = None,
) -> None:
    """Print the environment and the machine profile (and write env.json with --out)."""
    snapshot = stage_env(out) if out else capture_environment()
    console.print_json(json.dumps(snapshot))
    console.print(f"machine profile: [bold]{snapshot['machine_profile']}[/]")


@app.command()
def version() -> None:
    """Print benchgate's version."""
    console.print(__version__)


# The MLflow commands (cli_tracking.py), listed after the gate's own.
app.add_typer(baseline_app, name="baseline")
app.command()(history)
app.command()(sync)


def main() -> None:  # pragma: no cover - console entry point used by `python -m benchgate`
    try:
        app()
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(EXIT_RUN_FAILED)


__all__ = ["EXIT_BAD_INPUT", "app", "main"]
