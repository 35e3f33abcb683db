"""`benchgate run | compare | env`: the command line. Thin: parse, validate, call the core, map errors.

Exit codes: 0 pass (or warn), 1 regression (FAIL), 2 bad input or config, 3 the run itself failed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
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
from benchgate.compare import compare as compare_bundles
from benchgate.config import load_config
from benchgate.env import capture_environment
from benchgate.errors import EXIT_BAD_INPUT, EXIT_RUN_FAILED, BenchgateError, ConfigError
from benchgate.files import write_json
from benchgate.report import markdown, print_verdict
from benchgate.results import Bundle, load_bundle
from benchgate.runner import run_gate, stage_env

app = typer.Typer(
    help="Benchmark PyTorch training and gate regressions against a per-machine-profile baseline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# CI logs are not terminals; rich would wrap the verdict table at 80 columns there.
console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def _fail(exc: BenchgateError) -> NoReturn:
    errors.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False)
    raise typer.Exit(exc.exit_code)


def _parse_workload_args(pairs: list[str]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--workload-arg: got {pair!r}, expected KEY=VALUE")
        try:
            parsed[key] = json.loads(raw)  # numbers and booleans keep their type
        except json.JSONDecodeError:
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
) -> None:
    """Run the whole gate: env, bench at each world size, eval, trace, compare."""
    try:
        overrides: dict[str, Any] = {
            "bench.workload": workload,
            "bench.workload_args": _parse_workload_args(workload_arg) if workload_arg else None,
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
            outcome = run_gate(cfg, RichReporter(progress))
    except BenchgateError as exc:
        _fail(exc)
    print_verdict(outcome.comparison, console)
    (outcome.out_dir / "compare.md").write_text(markdown(outcome.comparison), encoding="utf-8")
    console.print(f"results: {outcome.out_dir}/  (compare.json, metrics-ws*.json, eval.json, trace/)")
    if outcome.baseline_written:
        console.print(f"baseline written: {outcome.baseline_written}")
    raise typer.Exit(outcome.comparison.exit_code)


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
        write_json(current / "compare.json", comparison.to_dict())
    except BenchgateError as exc:
        _fail(exc)
    print_verdict(comparison, console)
    raise typer.Exit(comparison.exit_code)


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


def main() -> None:  # pragma: no cover - console entry point used by `python -m benchgate`
    try:
        app()
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(EXIT_RUN_FAILED)


__all__ = ["EXIT_BAD_INPUT", "app", "main"]
