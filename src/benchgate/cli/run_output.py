"""What `benchgate run` shows on the terminal: the stages' progress while it runs (with each A/B's
opening figure: what it can resolve on this machine), and, once a verdict is in, the lines that say
where everything is (results, pipeline log, baseline, MLflow run) and what decides it (`next:`).
`benchgate compare` and `run --resume` end with the same `next:` lines.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from benchgate.ab.power import is_opening_line
from benchgate.checks.tables import print_verdict, step_lines
from benchgate.cli.terminal import console
from benchgate.cli.tracking import mlflow_ui_command
from benchgate.kfp.local_run import GateOutcome
from benchgate.kit.files import read_json
from benchgate.publish.policy import BASELINE_DECISION_FILE


class RichReporter:
    """The pipeline's stage reporter, drawn as one progress bar per stage.

    The A/B task's opening figure (ab/power.py) arrives as a stage marker of its own, followed by its
    rounds' stage announced again: the figure is printed above the bars, and the announcement of the
    stage already running only updates its bar."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: Any = None
        self.running: str | None = None

    def stage_started(self, name: str, total: int | None = None) -> None:
        if is_opening_line(name):
            self.progress.console.print(name, markup=False, highlight=False, soft_wrap=True)
            return
        if name == self.running:
            self.progress.update(self.task, total=total)
            return
        self.task = self.progress.add_task(name, total=total)
        self.running = name

    def stage_progress(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total)

    def stage_finished(self, name: str, seconds: float) -> None:
        self.running = None
        total = self.progress.tasks[-1].total or 1
        self.progress.update(self.task, completed=total, total=total, description=f"{name} ({seconds:.1f} s)")


def lasting_progress() -> Progress:
    """Progress bars that stay on screen after the run (transient=False): they are its stage log.

    Their console writes to the stream stdout is now. While the pipeline runs, `benchgate run` points
    sys.stdout at the pipeline log (kfp/local_run.py), and a console that follows sys.stdout (as
    `terminal.console` does) would stop drawing the bars there (the log is no terminal) and would print
    the A/B's opening figure into the log instead of on screen."""
    stream = sys.stdout
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=stream, width=None if stream.isatty() else console.width),
        transient=False,
    )


@contextmanager
def stage_progress() -> Iterator[RichReporter]:
    """A reporter of the gate's stages, one lasting bar each."""
    with lasting_progress() as progress:
        yield RichReporter(progress)


def print_run_outcome(outcome: GateOutcome) -> None:
    """The verdict, then where the run's results, log, baseline and MLflow run are, then `next:`."""
    print_verdict(outcome.comparison, console)
    console.print(f"results: {outcome.out_dir}/  ({result_files(outcome.out_dir)})", markup=False)
    console.print(f"pipeline run: {outcome.pipeline_dir}  (log: {outcome.out_dir}/logs/pipeline.log)")
    for line in baseline_lines(outcome.out_dir, outcome.baseline_written):
        console.print(line, markup=False)
    _print_tracking(outcome)
    print_next_steps(outcome.comparison, outcome.out_dir)


def print_resumed_outcome(comparison: Any, out_dir: Path) -> None:
    """`run --resume`'s end: the resumed A/B's verdict, where its files are, then `next:`."""
    print_verdict(comparison, console)
    console.print(f"results: {out_dir}/  (compare.json, compare.md, report.html, ab/)")
    print_next_steps(comparison, out_dir)


def print_next_steps(comparison: Any, out_dir: Path) -> None:
    """Last, where the reader looks: what decides an UNKNOWN (or where a FAIL's detail is), and, with
    gate.on_unknown = neutral, that the job passes anyway."""
    for step in step_lines(comparison, out_dir):
        # One line each, however long: a command in it must survive copy and paste.
        console.print(f"next: {step}", markup=False, highlight=False, soft_wrap=True)
    if comparison.verdict == "UNKNOWN" and comparison.on_unknown == "neutral":
        console.print("notice: UNKNOWN treated as neutral (gate.on_unknown = neutral): exit 0")


def _print_tracking(outcome: GateOutcome) -> None:
    state, published = outcome.tracking, outcome.published
    if not state.get("enabled"):
        return
    if state.get("reachable") is False:
        console.print(f"[yellow]warning:[/] {state.get('error')}: compared against the cached baseline")
    if published.get("mlflow_run_id"):
        where = published.get("mlflow_url") or state.get("uri")
        console.print(f"MLflow run {published['mlflow_run_id']}: {where}", markup=False)
        if not published.get("mlflow_url"):  # a store on this disk: say how to serve it from here
            browse = mlflow_ui_command(str(state.get("uri")), state.get("experiment_id"), Path.cwd())
            console.print(f"browse: {browse}", markup=False, highlight=False, soft_wrap=True)
    if published.get("spooled"):
        console.print(
            f"[yellow]warning:[/] not in MLflow yet; spooled in {published['spooled']}: "
            "`benchgate sync` sends it"
        )


def baseline_lines(out_dir: Path, written: Path | None) -> list[str]:
    """What the baseline policy decided about the run gathered in `out_dir`, for the terminal."""
    path = out_dir / BASELINE_DECISION_FILE
    if path.is_file():
        return [str(read_json(path)["line"])]
    return [f"baseline written: {written}"] if written else []


def result_files(out_dir: Path) -> str:
    """The result files the run left in `out_dir`, as the terminal lists them (only those that exist)."""
    names = ["compare.json"] if (out_dir / "compare.json").is_file() else []
    if any(out_dir.glob("metrics-ws*.json")):
        names.append("metrics-ws*.json")
    evaluation = out_dir / "eval.json"
    if evaluation.is_file():
        names.append("eval.json (skipped)" if "skipped" in read_json(evaluation) else "eval.json")
    if (out_dir / "trace").is_dir():
        names.append("trace/")
    return ", ".join(names)
