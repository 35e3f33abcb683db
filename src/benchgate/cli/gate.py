"""The gate's own commands: `benchgate run` (the whole gate, locally; `--resume` continues an undecided
A/B), `compare` (a finished run against a baseline), `env` and `version`. Registered on the app, with
the epilogs below, by cli/main.py.

Thin: parse, validate, call the core or the pipeline, map errors; after a verdict, say what decides it
(`next_steps`). What `run` prints while it runs and at its end is in cli/run_output.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from benchgate._version import __version__
from benchgate.checks.compare import compare as compare_bundles
from benchgate.checks.stage import write_comparison
from benchgate.checks.tables import print_verdict
from benchgate.cli.run_output import (
    ResumedRounds,
    print_next_steps,
    print_resumed_outcome,
    print_run_outcome,
    progress_reporter,
)
from benchgate.cli.terminal import (
    GATE_CODES,
    OK,
    TrackingOption,
    TrackingUriOption,
    WorkloadArgOption,
    WorkloadFactoryOption,
    config_option,
    console,
    exit_codes,
    option,
    parse_pairs,
)
from benchgate.cli.terminal import fail as _fail
from benchgate.config import load_config
from benchgate.errors import BenchgateError, ConfigError
from benchgate.kfp.local_run import run_gate
from benchgate.measure.env import capture_environment
from benchgate.measure.stage import stage_env
from benchgate.publish.ci_report import write_step_summary
from benchgate.results.bundle import Bundle, load_bundle
from benchgate.store.baseline import find_baseline

# The epilogs main.py registers each command with: a verdict's codes for `run` and `compare`.
GATE_EPILOG = exit_codes(*GATE_CODES)
ENV_CODES = exit_codes((OK[0], "printed (and written)"))
VERSION_CODES = exit_codes((OK[0], "printed"))


def _parse_world_sizes(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(
            f"--world-sizes: got {text!r}, expected comma-separated integers like 1,2"
        ) from None
    # Taken as given, never reordered; which lists the pipeline can run is bench.world_sizes' check.
    if len(set(sizes)) != len(sizes) or sizes != sorted(sizes):
        raise ConfigError(
            f"--world-sizes: got {text!r} (expected each world size once, in increasing order, e.g. 1,2)"
        )
    return sizes


# `run`'s flags override the config: their defaults are the config's, read from benchgate.config.
def run(
    config: Annotated[
        Path | None, option(metavar="FILE", text="TOML config file; flags override it.", default="none")
    ] = None,
    workload: WorkloadFactoryOption = None,
    workload_arg: WorkloadArgOption = None,
    steps: Annotated[
        int | None, config_option(metavar="N", text="Measured steps per world size.", key="bench.steps")
    ] = None,
    warmup: Annotated[
        int | None, config_option(metavar="N", text="Warmup steps before measuring.", key="bench.warmup")
    ] = None,
    world_sizes: Annotated[
        str | None,
        config_option(
            metavar="1,N",
            text="World sizes, comma-separated, e.g. 1,2.",
            key="bench.world_sizes",
            shown="1,N with N = every GPU, or 2 on CPU",
        ),
    ] = None,
    device: Annotated[
        str | None, config_option(metavar="DEVICE", text="auto, cpu or cuda.", key="bench.device")
    ] = None,
    out: Annotated[
        Path | None, config_option(metavar="DIR", text="Directory for this run's results.", key="out")
    ] = None,
    baseline_dir: Annotated[
        Path | None,
        config_option(metavar="DIR", text="Baseline store directory.", key="gate.baseline_dir"),
    ] = None,
    update_baseline: Annotated[
        bool | None,
        config_option(
            "--update-baseline/--no-update-baseline",
            text="Always / never write this run as the baseline.",
            key="gate.update_baseline",
            shown="auto: on main, when every timing check PASSes",
        ),
    ] = None,
    eval_: Annotated[
        bool | None, config_option("--eval/--no-eval", text="Run the eval stage.", key="eval.enabled")
    ] = None,
    trace: Annotated[
        bool | None,
        config_option("--trace/--no-trace", text="Record a profiler trace.", key="trace.enabled"),
    ] = None,
    timeout_s: Annotated[
        float | None,
        config_option(metavar="SECONDS", text="Collective timeout per rank.", key="bench.timeout_s"),
    ] = None,
    explain: Annotated[
        bool | None,
        config_option(
            "--explain/--no-explain",
            text="After every A/B, profiled rounds name the operators behind the change (compare.json "
            "attribution); --no-explain: not even after a FAIL.",
            key="gate.ab.explain",
            shown="after a FAIL",
        ),
    ] = None,
    commit: Annotated[
        str,
        option(
            metavar="SHA",
            text="Benchmark this full SHA of --repository.",
            default="none: the code importable here",
        ),
    ] = "",
    repository: Annotated[
        str, option(metavar="URL", text="git URL of the code under test (with --commit).", default="none")
    ] = "",
    branch: Annotated[
        str, option(metavar="BRANCH", text="The commit's branch (with --commit).", default="none")
    ] = "",
    base: Annotated[
        str,
        option(
            metavar="REF",
            text="A/B: a git ref of this repository (e.g. origin/main) benchmarked side by side with the "
            "candidate wherever the stored-baseline screen does not PASS.",
            default="none: the stored baseline's commit, where this repository has it",
        ),
    ] = "",
    tracking_uri: TrackingUriOption = None,
    tracking: TrackingOption = None,
    resume: Annotated[
        Path | None,
        option(
            metavar="DIR",
            text="Continue the undecided (UNKNOWN) A/B of the run in this directory from its saved rounds "
            "instead of starting over, with that run's settings; --config may give a larger [gate.ab] "
            "budget (max_rounds, max_seconds).",
            default="none: a new run",
        ),
    ] = None,
) -> None:
    """Run the whole gate locally: the benchgate pipeline, through kfp.local."""
    if resume is not None:
        _resume(resume, config)
    try:
        overrides: dict[str, Any] = {
            "bench.workload": workload,
            "bench.workload_args": parse_pairs(workload_arg, "--workload-arg") if workload_arg else None,
            "bench.steps": steps,
            "bench.warmup": warmup,
            "bench.world_sizes": _parse_world_sizes(world_sizes),
            "bench.device": device,
            "bench.timeout_s": timeout_s,
            "eval.enabled": eval_,
            "trace.enabled": trace,
            "gate.ab.explain": None if explain is None else ("always" if explain else "never"),
            "gate.baseline_dir": baseline_dir,
            "gate.update_baseline": None
            if update_baseline is None
            else ("always" if update_baseline else "never"),
            "out": out,
            "tracking.uri": tracking_uri,
            "tracking.enabled": tracking,
        }
        cfg = load_config(config, overrides)
        with progress_reporter() as reporter:
            outcome = run_gate(cfg, reporter, commit=commit, repository=repository, branch=branch, base=base)
    except BenchgateError as exc:
        _fail(exc)
    print_run_outcome(outcome)
    write_step_summary(outcome.out_dir)
    raise typer.Exit(outcome.comparison.exit_code)


def _resume(directory: Path, config: Path | None) -> None:
    from benchgate.publish.resume import resume_gate

    try:
        settings = load_config(config) if config is not None else None
        with progress_reporter() as reporter:
            counted = ResumedRounds(reporter)
            comparison = resume_gate(directory, settings, counted.on_round)
            counted.finish()
    except BenchgateError as exc:
        _fail(exc)
    print_resumed_outcome(comparison, directory.resolve())
    write_step_summary(directory.resolve())
    raise typer.Exit(comparison.exit_code)


def compare(
    current: Annotated[Path, typer.Argument(metavar="DIR", help="Result directory of the run to judge.")],
    baseline: Annotated[
        Path | None,
        option(
            metavar="DIR",
            text="A baseline or result directory to compare with.",
            default="the store's (--baseline-dir)",
        ),
    ] = None,
    baseline_dir: Annotated[
        Path | None,
        config_option(
            metavar="DIR", text="Baseline store to look the baseline up in.", key="gate.baseline_dir"
        ),
    ] = None,
    config: Annotated[
        Path | None, option(metavar="FILE", text="TOML config file (for tolerances).", default="none")
    ] = None,
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
    print_next_steps(comparison, current)
    raise typer.Exit(comparison.exit_code)


def env(
    out: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Directory to write env.json into.  [default: none: print only]"),
    ] = None,
) -> None:
    """Print the environment and the machine profile (and write env.json with --out)."""
    snapshot = stage_env(out) if out else capture_environment()
    console.print_json(json.dumps(snapshot))
    console.print(f"machine profile: [bold]{snapshot['machine_profile']}[/]")


def version() -> None:
    """Print benchgate's version."""
    console.print(__version__)
