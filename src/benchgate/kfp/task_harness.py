"""What every pipeline task body in `benchgate.kfp.tasks` runs inside: its error reporting, its
progress markers, and the run's setup (config.json, env.json, the code under test) it starts from.

Errors: a BenchgateError is printed as one line, written to `error.json` beside the task's outputs (the
local runner reads it back to exit with the right code) and ends the task with its exit code, so the
task shows red in the KFP UI with the message at the end of its log.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from benchgate.config import RunConfig, parse_config
from benchgate.errors import BenchgateError
from benchgate.kit import lifeline
from benchgate.kit.diskfaults import disk_error, is_disk_error
from benchgate.kit.files import read_json, write_json
from benchgate.kit.progress import MarkerReporter

ERROR_FILE = "error.json"


class MetricsSink(Protocol):
    """What a task needs of KFP's Output[Metrics] artifact."""

    def log_metric(self, metric: str, value: float) -> None: ...


@contextlib.contextmanager
def reporting_errors(task: str, output_path: str) -> Iterator[None]:
    """Turn a BenchgateError, or a disk's refusal, raised by the task into error.json beside
    `output_path` and the task's exit code; any other exception stays a traceback (a bug)."""
    lifeline.tie_task_to_run()  # under `benchgate run`: a killed run takes this task and its children
    try:
        yield
    except (BenchgateError, OSError) as raised:
        if isinstance(raised, OSError) and not is_disk_error(raised):
            raise
        # A disk that refused a write anywhere in the task: exit 3 naming the path, not a traceback.
        exc: BenchgateError = (
            raised
            if isinstance(raised, BenchgateError)
            else disk_error(raised, f"the {task} output", Path(output_path).parent)
        )
        print(f"benchgate {task}: error: {exc}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            write_json(
                Path(output_path).parent / ERROR_FILE,
                {"task": task, "type": type(exc).__name__, "exit_code": exc.exit_code, "message": str(exc)},
            )
        raise SystemExit(exc.exit_code) from None


@contextlib.contextmanager
def stage(name: str, total: int | None = None) -> Iterator[MarkerReporter]:
    """Mark a stage's start, progress and end in the task's log, which `benchgate run` relays."""
    reporter = MarkerReporter()
    reporter.stage_started(name, total)
    started = time.perf_counter()
    yield reporter
    reporter.stage_finished(name, time.perf_counter() - started)


def load_setup(setup_dir: str) -> tuple[RunConfig, dict[str, Any]]:
    """The run's config and env, as the env task wrote them."""
    setup = Path(setup_dir)
    return parse_config(read_json(setup / "config.json")), read_json(setup / "env.json")


def start_task(setup_dir: str, output_dir: str) -> tuple[RunConfig, dict[str, Any], Path]:
    """The run's config and env, and the task's output directory, created."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    return *load_setup(setup_dir), out


def skipped(section: str, enabled: bool) -> bool:
    """Whether the config turned this optional task off; the log says so rather than staying silent."""
    if not enabled:
        print(f"benchgate {section}: {section}.enabled is false; skipped", flush=True)
    return not enabled


def fetch_code_under_test(env: dict[str, Any], workspace: Path) -> None:
    """Fetch the commit under test that the env task recorded (nothing when it recorded none)."""
    from benchgate.measure.source import use_source

    source = env.get("source") or {}
    use_source(source.get("repository", ""), source.get("commit", ""), workspace)
