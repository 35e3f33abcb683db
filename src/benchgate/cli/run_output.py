"""What `benchgate run` shows on the terminal: the stages' progress while it runs (with each A/B's
opening figure: what it can resolve on this machine), and, once a verdict is in, the lines that say
where everything is (results, pipeline log, baseline, MLflow run) and what decides it (`next:`).
`benchgate compare` and `run --resume` end with the same `next:` lines.

The progress is drawn on stdout as the command found it (the pipeline points sys.stdout at its log
while it runs): live bars where that is a terminal, and where it is not (CI, a pipe, `| tee`, TERM=dumb),
where rich would draw nothing until the end, stamped lines as things happen (cli/progress_lines.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
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
from benchgate.cli.mlflow_access import mlflow_ui_command
from benchgate.cli.progress_lines import ProgressLines, is_live_terminal
from benchgate.cli.terminal import console
from benchgate.kfp.local_run import GateOutcome
from benchgate.kit.files import read_json
from benchgate.kit.progress import Reporter, final_count
from benchgate.publish.policy import BASELINE_DECISION_FILE


class RichReporter:
    """The pipeline's stage reporter, drawn as one progress bar per stage.

    The A/B task's opening figure (ab/power.py) arrives as a stage marker of its own, followed by its
    rounds' stage announced again: the figure is printed above the bars, and the announcement of the
    stage already running only updates its bar. A stage that counted ends at its count: an A/B that
    decided after 4 of at most 27 rounds ends 4/4."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: Any = None
        self.running: str | None = None
        self.done: int | None = None
        self.total: int | None = None

    def stage_started(self, name: str, total: int | None = None) -> None:
        if is_opening_line(name):
            self.progress.console.print(name, markup=False, highlight=False, soft_wrap=True)
            return
        if name == self.running:
            self.total = total
            self.progress.update(self.task, total=total)
            return
        self.task = self.progress.add_task(name, total=total)
        self.running, self.done, self.total = name, None, total

    def advance(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        self.progress.update(self.task, completed=done, total=total)

    def stage_finished(self, name: str, seconds: float) -> None:
        self.running = None
        ran = final_count(self.done, self.total)
        self.progress.update(self.task, completed=ran, total=ran, description=f"{name} ({seconds:.1f} s)")


def screen() -> TextIO:
    """Where a command draws its progress: stdout as it is now, at the command's start. While the
    pipeline runs, `benchgate run` points sys.stdout at the pipeline log (kfp/local_run.py), and a
    console that follows sys.stdout (as `terminal.console` does) would draw into the log instead."""
    return sys.stdout


def live_progress(stream: TextIO, transient: bool = False) -> Progress:
    """Bars on the terminal `stream`; lasting ones (transient=False) stay on screen as the run's stage
    log."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=stream),
        transient=transient,
    )


@contextmanager
def progress_reporter() -> Iterator[Reporter]:
    """A reporter of the gate's stages: one lasting bar each on a terminal, stamped lines elsewhere."""
    stream = screen()
    if not is_live_terminal(stream):
        with ProgressLines(stream) as lines:
            yield lines
        return
    with live_progress(stream) as progress:
        yield RichReporter(progress)


class ResumedRounds:
    """`run --resume`'s A/B rounds as one stage: each round's look as it is taken (the rounds of the
    saved decision included), ending at the rounds that ran."""

    NAME = "A/B (resumed rounds)"

    def __init__(self, reporter: Reporter) -> None:
        self.reporter, self.started = reporter, time.monotonic()
        reporter.stage_started(self.NAME)

    def on_round(self, done: int, decision: Any) -> None:
        # The rounds so far, of a budget the saved config or --config sets: the count is what matters.
        self.reporter.advance(done, done)

    def finish(self) -> None:
        self.reporter.stage_finished(self.NAME, time.monotonic() - self.started)


class LiveSteps:
    """A command's long steps (bisect's A/B steps) as one transient bar on a terminal: its name, a
    spinner and the time it has run, with the command's own lines printed above it. The same three
    calls as ProgressLines, which draws them where stdout is no terminal."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("", total=None, visible=False)

    def say(self, text: str) -> None:
        self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def begin(self, name: str, total: int | None = None) -> None:
        self.progress.reset(self.task, total=total, description=escape(name), visible=True)

    def end(self) -> None:
        # Redrawn now: a line said next would otherwise reprint the last frame, bar and all, below it.
        self.progress.update(self.task, visible=False, refresh=True)


@contextmanager
def step_display() -> Iterator[LiveSteps | ProgressLines]:
    """LiveSteps on a terminal, stamped lines (with a periodic line while a step runs) elsewhere."""
    stream = screen()
    if not is_live_terminal(stream):
        with ProgressLines(stream) as lines:
            yield lines
        return
    with live_progress(stream, transient=True) as progress:
        yield LiveSteps(progress)


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
