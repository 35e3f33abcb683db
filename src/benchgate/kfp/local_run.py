"""`benchgate run`: the `benchgate` pipeline run on this machine through kfp.local.

There is one code path: the same pipeline function that compiles to pipelines/benchgate.yaml runs here
under `kfp.local.SubprocessRunner(use_venv=False)`, each task a subprocess of this Python environment.
Platform settings (GPUs, node selectors) are ignored locally, and no volume is asked for (`baseline_pvc`
is empty): the baseline store, the spool and MLflow's embedded store are the configured directories
(`gate.baseline_dir`, `tracking.spool_dir`, `tracking.local_dir`), on this disk, so they persist.

This module only adds what a terminal user needs around it: fail-fast checks before minutes of work,
the tasks' stage markers turned into progress bars (kfp.local's own log goes to logs/pipeline.log), and
the results gathered from the pipeline root into `config.out` in the familiar layout (with report.html),
and what became of the run in MLflow. A task's error comes back as the same BenchgateError (and exit
code) it raised.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from benchgate import errors
from benchgate.compare import Comparison
from benchgate.config import RunConfig
from benchgate.errors import BenchgateError, RunFailedError
from benchgate.files import read_json
from benchgate.kfp.params import parameters_from_config
from benchgate.kfp.tasks import ERROR_FILE
from benchgate.launch import default_world_sizes, visible_gpus
from benchgate.progress import MarkerRelay, Reporter, SilentReporter
from benchgate.publish import TRACKING_FILE
from benchgate.source import resolve_local_ref, validate_branch, validate_commit, validate_repository

PIPELINE_DIR = "pipeline"
# Results of an earlier run in the same directory that this run would otherwise leave mixed in.
STALE = (
    "metrics-ws*.json",
    "eval.json",
    "trace.json",
    "compare.json",
    "compare.md",
    "env.json",
    "config.json",
    "run.json",
    "report.html",
    "tracking.json",
    "published.json",
)
STALE_DIRS = ("ab", "trace", "spool", PIPELINE_DIR)


@dataclass
class GateOutcome:
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

    def stage_progress(self, done: int, total: int) -> None:
        self.inner.stage_progress(done, total)

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


def _clean(out_dir: Path) -> None:
    for pattern in STALE:
        for stale in out_dir.glob(pattern):
            stale.unlink()
    for directory in STALE_DIRS:
        shutil.rmtree(out_dir / directory, ignore_errors=True)


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
    commit: str = "",
    repository: str = "",
    branch: str = "",
    base: str = "",
) -> GateOutcome:
    """Run the gate as the local pipeline; returns the comparison, with results gathered in config.out.

    Without `commit` the tasks benchmark the code importable here; with it (a full SHA of `repository`)
    each task fetches that commit first, exactly as on a cluster. `base` is any git ref of the local
    repository: resolved once to a SHA, it is the A side of an A/B decision wherever the screen does
    not PASS (the candidate is `commit`, or else the working tree).
    """
    from kfp import local

    from benchgate.kfp.pipeline import benchgate_pipeline

    # Bad input is rejected before the previous run's results are cleared.
    if commit:
        validate_commit(commit, "--commit")
        validate_repository(repository, "--repository")
    if branch:
        validate_branch(branch, "--branch")
    base_commit = ""
    if base:
        base_commit, local_repository = resolve_local_ref(base, Path.cwd())
        repository = repository or local_repository
    arguments = pipeline_arguments(config)
    timed = _TimedReporter(reporter or SilentReporter())
    out_dir = Path(config.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    _clean(out_dir)
    pipeline_root = out_dir / PIPELINE_DIR
    log_path = out_dir / "logs" / "pipeline.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(pipeline_root), raise_on_error=False
    )
    started = time.perf_counter()
    with (
        open(log_path, "w", encoding="utf-8") as log,
        contextlib.redirect_stdout(_Relay(log, MarkerRelay(timed))),
        warnings.catch_warnings(),
    ):
        # The components name the bench image, which kfp.local cannot use and warns about per task;
        # running them in this environment is the point.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")
        benchgate_pipeline(
            **arguments, commit=commit, repository=repository, branch=branch, base_commit=base_commit
        )
    timed.seconds["pipeline"] = time.perf_counter() - started
    run_dir = _run_directory(pipeline_root, log_path)
    _raise_task_error(run_dir)
    results, summary = _final_results(run_dir, log_path)
    # The judged bundle (the compare task gathered eval and the trace into it), in the familiar layout.
    shutil.copytree(results, out_dir, dirs_exist_ok=True)
    comparison = Comparison.from_dict(read_json(out_dir / "compare.json"))
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
    """The results directory the gate judged (after A/B, if it ran) and the gate's summary."""
    summaries = list(run_dir.glob("gate*/summary"))
    if not summaries:
        raise RunFailedError(f"the local pipeline failed before its gate task; log: {log_path}")
    decided = run_dir / "ab" / "results"
    results = decided if decided.is_dir() else run_dir / "compare" / "results"
    return results, read_json(summaries[0])
