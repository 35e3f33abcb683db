"""`benchgate run`: the `benchgate` pipeline run on this machine through kfp.local.

There is one code path: the same pipeline function that compiles to pipelines/benchgate.yaml runs here
under `kfp.local.SubprocessRunner(use_venv=False)`, each task a subprocess of this Python environment.
Platform settings (GPUs, node selectors) are ignored locally, and no volume is asked for (`baseline_pvc`
is empty): the baseline store, the spool and MLflow's embedded store are the configured directories
(`gate.baseline_dir`, `tracking.spool_dir`, `tracking.local_dir`), on this disk, so they persist.

This module only adds what a terminal user needs around it: fail-fast checks before minutes of work,
the tasks' stage markers handed to the caller's Reporter as each line arrives (kfp.local's own log goes
to logs/pipeline.log, written line by line so that `tail -f` follows it), and
the results gathered from the pipeline root into `config.out` in the familiar layout (with report.html),
and what became of the run in MLflow. A task's error comes back as the same BenchgateError (and exit
code) it raised. A verdict is not an error: the gate task says it and succeeds here (`tasks.gate_task`),
and pipeline.log ends with it in one line; `benchgate run` exits with its code. The profiler trace is
hard-linked, not copied, from the trace task's output into the bundle and `--out`: one copy on disk.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from benchgate import errors
from benchgate.checks.next_steps import verdict_lines
from benchgate.config import RunConfig
from benchgate.errors import BenchgateError, RunFailedError
from benchgate.kfp.params import parameters_from_config
from benchgate.kfp.task_harness import ERROR_FILE
from benchgate.kfp.tasks import LOCAL_OUT_VARIABLE, link_trace_or_copy
from benchgate.kit import lifeline
from benchgate.kit.credentials import MLFLOW_INSTEAD, refuse_credentials
from benchgate.kit.files import read_json
from benchgate.kit.progress import MarkerRelay, Reporter, SilentReporter
from benchgate.measure.launch import default_world_sizes, visible_gpus
from benchgate.measure.source import (
    local_repository,
    resolve_local_ref,
    validate_branch,
    validate_commit,
    validate_repository,
)
from benchgate.results import outdir
from benchgate.results.comparison import Comparison, load_comparison
from benchgate.tracking.refresh import TRACKING_FILE

PIPELINE_DIR = "pipeline"


@dataclass
class GateOutcome:
    """What `run_gate` returns: the verdict, where the results are, and what became of the run.

    `comparison` is the judged compare.json (its `verdict` and `exit_code`); `out_dir` is `config.out`,
    where the results were gathered; `baseline_written` is the baseline this run became, or None;
    `pipeline_dir` is the local pipeline's run directory, every task's files; `stage_seconds` is each
    stage's wall time, and "pipeline" the whole run's.
    """

    comparison: Comparison
    out_dir: Path
    baseline_written: Path | None
    pipeline_dir: Path
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # What became of the run in MLflow: mlflow_run_id / mlflow_url, or where it is spooled.
    published: dict[str, Any] = field(default_factory=dict)
    # What the run saw of MLflow: reachable, waited_s, error (tracking.json).
    tracking: dict[str, Any] = field(default_factory=dict)


class _TimedReporter:
    def __init__(self, inner: Reporter) -> None:
        self.inner = inner
        self.seconds: dict[str, float] = {}

    def stage_started(self, name: str, total: int | None = None) -> None:
        self.inner.stage_started(name, total)

    def advance(self, done: int, total: int) -> None:
        self.inner.advance(done, total)

    def stage_finished(self, name: str, seconds: float) -> None:
        self.seconds[name] = seconds
        self.inner.stage_finished(name, seconds)


class _Relay(io.TextIOBase):
    """A stdout stand-in: every line goes to the pipeline log, and stage markers to the reporter."""

    def __init__(self, log: TextIO, relay: MarkerRelay) -> None:
        self.log, self.relay, self.pending = log, relay, ""

    def write(self, text: str) -> int:
        self.log.write(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.relay.feed(line)
        return len(text)

    def flush(self) -> None:
        self.log.flush()


def pipeline_arguments(config: RunConfig) -> dict[str, Any]:
    """The config as pipeline arguments, with this machine's default world sizes filled in.

    The workload and the world sizes are checked by the pipeline's first task, which fails within
    seconds; doing it here too would import torch a second time.
    """
    world_sizes = config.bench.world_sizes or default_world_sizes(config.bench.device, visible_gpus())
    return parameters_from_config(config, world_sizes)


def run_gate(
    config: RunConfig,
    reporter: Reporter | None = None,
    *,
    commit: str = "",
    repository: str = "",
    branch: str = "",
    base: str = "",
) -> GateOutcome:
    """Run the gate as the local pipeline; returns the comparison, with results gathered in config.out.

    Without `commit` the tasks benchmark the code importable here; with it (a full SHA of `repository`)
    each task fetches that commit first, exactly as on a cluster. `base` is any git ref of the local
    repository: resolved once to a SHA, it is the A side of an A/B decision wherever the screen does
    not PASS or there is no stored baseline (the candidate is `commit`, or else the working tree).
    Without `base`, the baseline run's commit is the A side where this repository has it. `reporter`
    is told of each stage as it starts and ends.

    Bad input is a BadInputError (exit 2), refused before the previous results in config.out are
    cleared; a failed benchmark is a RunFailedError (exit 3); a task's error comes back as the
    BenchgateError it raised. A verdict is no error: the exit code the CLI gives is
    `outcome.comparison.exit_code` (0 PASS or WARN, 1 FAIL, 4 UNKNOWN unless gate.on_unknown is
    "neutral"). For example::

        from benchgate import load_config, run_gate

        outcome = run_gate(load_config(overrides={"bench.steps": 20, "out": "benchgate-out"}))
        print(outcome.comparison.verdict, outcome.out_dir)
    """
    # Bad input is rejected before the previous run's results are cleared.
    if commit:
        validate_commit(commit, "--commit")
        validate_repository(repository, "--repository")
    if branch:
        validate_branch(branch, "--branch")
    if config.tracking.enabled and not config.tracking.uri:
        environment_uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        refuse_credentials(environment_uri, "MLFLOW_TRACKING_URI", MLFLOW_INSTEAD)
    base_commit = ""
    if base:
        base_commit, here = resolve_local_ref(base, Path.cwd())
        repository = repository or here
    elif not commit and not repository:
        # The repository the working tree belongs to: where the baseline run's commit is looked for, the
        # A/B base by default (ab/stage.ab_base_commit), so a changed tree is decided, not UNKNOWN.
        repository = local_repository(Path.cwd())
    arguments = pipeline_arguments(config)
    timed = _TimedReporter(reporter or SilentReporter())
    out_path = Path(config.out).resolve()
    try:
        with outdir.claimed(out_path) as out:
            out.clear()
            out.will_write([PIPELINE_DIR, "logs"])
            return _run_pipeline(config, out, arguments, timed, commit, repository, branch, base_commit)
    except OSError as e:
        # Disk full, read-only or not permitted in --out: name the path, not a traceback (exit 3).
        raise RunFailedError(f"out: cannot write {e.filename or out_path}: {e.strerror or e}") from None
    except RunFailedError as e:
        # A task that failed without a report may have hit the same wall: say so if --out is unwritable.
        if problem := _unwritable(out_path):
            raise RunFailedError(f"out: cannot write in {out_path}: {problem}") from e
        raise


def _run_pipeline(
    config: RunConfig,
    out: outdir.ResultsDir,
    arguments: dict[str, Any],
    timed: _TimedReporter,
    commit: str,
    repository: str,
    branch: str,
    base_commit: str,
) -> GateOutcome:
    from kfp import local

    from benchgate.kfp.pipeline import local_pipeline

    out_dir = out.path
    pipeline_root = out_dir / PIPELINE_DIR
    log_path = out_dir / "logs" / "pipeline.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(pipeline_root), raise_on_error=False
    )
    started = time.perf_counter()
    with (
        open(log_path, "w", encoding="utf-8", buffering=1) as log,  # line-buffered: followable live
        contextlib.redirect_stdout(_Relay(log, MarkerRelay(timed))),
        warnings.catch_warnings(),
        _tasks_tied_to_this_process(),
        _environment(LOCAL_OUT_VARIABLE, str(out_dir)),
    ):
        # The components name the bench image, which kfp.local cannot use and warns about per task;
        # running them in this environment is the point.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")
        local_pipeline()(
            **arguments, commit=commit, repository=repository, branch=branch, base_commit=base_commit
        )
    timed.seconds["pipeline"] = time.perf_counter() - started
    run_dir = _run_directory(pipeline_root, log_path)
    _raise_task_error(run_dir)
    results, summary = _final_results(run_dir, log_path)
    out.will_write(p.name for p in results.iterdir())
    # The judged bundle (the compare task gathered eval and the trace into it), in the familiar layout.
    try:
        _gather(results, out_dir)
    except OSError as e:
        raise RunFailedError(
            f"out: cannot write {e.filename}: {e.strerror}; the run finished and its results are complete "
            f"in {results}"
        ) from None
    comparison = load_comparison(out_dir / "compare.json")
    with contextlib.suppress(OSError), open(log_path, "a", encoding="utf-8") as log:  # a note, not results
        log.writelines(f"benchgate run: {line}\n" for line in verdict_lines(comparison, out_dir))
    written = summary.get("baseline_written")
    tracking_file = out_dir / TRACKING_FILE
    return GateOutcome(
        comparison,
        out_dir,
        Path(written) if written else None,
        run_dir,
        timed.seconds,
        published={k: v for k, v in summary.items() if k not in ("verdict", "exit_code")},
        tracking=read_json(tracking_file) if tracking_file.exists() else {},
    )


def _tasks_tied_to_this_process() -> contextlib.AbstractContextManager[None]:
    """The pipeline's tasks end with this process, even when it is killed outright (kit/lifeline.py)."""
    return _environment(lifeline.PARENT_PID_VARIABLE, str(os.getpid()))


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` for the tasks started meanwhile (they inherit this environment)."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def _gather(results: Path, out_dir: Path) -> None:
    """Copy the judged bundle into --out file by file, each complete or absent (a full disk leaves no
    empty or half file; the pipeline root keeps every original). The trace is linked: one copy."""
    for source in sorted(p for p in results.rglob("*") if p.is_file()):
        dest = out_dir / source.relative_to(results)
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(f".{dest.name}.partial")
        try:
            link_trace_or_copy(str(source), str(partial))
            os.replace(partial, dest)
        except OSError as e:
            partial.unlink(missing_ok=True)
            raise OSError(e.errno, e.strerror, str(dest)) from None


def _unwritable(directory: Path) -> str | None:
    """Why a file cannot be written in `directory` (disk full, read-only, not permitted), or None."""
    probe = directory / f".benchgate-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * 65536)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return e.strerror or str(e)
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def _run_directory(pipeline_root: Path, log_path: Path) -> Path:
    runs = sorted(p for p in pipeline_root.glob("*") if p.is_dir()) if pipeline_root.is_dir() else []
    if not runs:
        raise RunFailedError(f"the local pipeline produced no run directory; log: {log_path}")
    return runs[-1]


def _raise_task_error(run_dir: Path) -> None:
    """Re-raise the first error a task reported (tasks run in order, so the earliest file is the cause)."""
    reports = sorted(run_dir.glob(f"*/{ERROR_FILE}"), key=lambda p: p.stat().st_mtime)
    if not reports:
        return
    report = read_json(reports[0])
    cls = getattr(errors, str(report.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, BenchgateError)):
        cls = errors.BadInputError if report.get("exit_code") == errors.EXIT_BAD_INPUT else RunFailedError
    raise cls(str(report["message"]))


def _final_results(run_dir: Path, log_path: Path) -> tuple[Path, dict[str, Any]]:
    """The results directory the gate judged (publish's after an A/B, else compare's) and the gate's
    summary."""
    summaries = list(run_dir.glob("gate*/summary"))
    if not summaries:
        raise RunFailedError(f"the local pipeline failed before its gate task; log: {log_path}")
    decided = run_dir / "publish" / "results"
    results = decided if decided.is_dir() else run_dir / "compare" / "results"
    return results, read_json(summaries[0])
