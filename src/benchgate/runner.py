"""The gate, stage by stage: env -> bench ws=1 -> bench ws=N -> eval -> trace -> compare [-> confirm].

Every stage is a function from files to files in one output directory, so each can run on its own (a
pipeline task, a retry) and a crash leaves the finished stages' results on disk. The runner only chains
them and reports progress through a `Reporter`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchgate.baseline import find_baseline, save_baseline
from benchgate.compare import Comparison, compare, merge_confirmation, timing_failures
from benchgate.config import RunConfig
from benchgate.env import capture_environment
from benchgate.evaluate import run_eval
from benchgate.files import write_json
from benchgate.launch import check_world_size, default_world_sizes, run_bench
from benchgate.results import Bundle, load_bundle
from benchgate.trace import run_trace
from benchgate.workloads.base import load_workload


class Reporter(Protocol):
    def stage_started(self, name: str, total: int | None = None) -> None: ...
    def stage_progress(self, done: int, total: int) -> None: ...
    def stage_finished(self, name: str, seconds: float) -> None: ...


class SilentReporter:
    def stage_started(self, name: str, total: int | None = None) -> None:
        pass

    def stage_progress(self, done: int, total: int) -> None:
        pass

    def stage_finished(self, name: str, seconds: float) -> None:
        pass


@dataclass
class GateOutcome:
    comparison: Comparison
    out_dir: Path
    baseline_written: Path | None
    stage_seconds: dict[str, float]


STALE_RESULTS = ("metrics-ws*.json", "eval.json", "trace.json", "compare.json", "env.json")
STALE_DIRS = ("confirm",)


def stage_env(out_dir: Path) -> dict[str, Any]:
    env = capture_environment()
    write_json(out_dir / "env.json", env)
    return env


def stage_compare(config: RunConfig, out_dir: Path) -> tuple[Comparison, Bundle, Bundle | None]:
    """Compare the run in `out_dir` with its baseline; writes compare.json."""
    current = load_bundle(out_dir)
    workload = current.workload
    assert workload is not None
    baseline = find_baseline(config.gate.baseline_dir, current.machine_profile, workload)
    comparison = compare(baseline, current, config.gate.tolerances)
    write_json(out_dir / "compare.json", comparison.to_dict())
    return comparison, current, baseline


def stage_confirm(
    config: RunConfig, out_dir: Path, comparison: Comparison, baseline: Bundle, reporter: Reporter
) -> Comparison:
    """Re-run each world size with a timing FAIL into out_dir/confirm; rewrites compare.json."""
    confirm_dir = out_dir / "confirm"
    shutil.rmtree(confirm_dir, ignore_errors=True)
    confirm_dir.mkdir(parents=True)
    shutil.copy2(out_dir / "env.json", confirm_dir / "env.json")
    for ws in timing_failures(comparison):
        run_bench(config, ws, confirm_dir, reporter.stage_progress)
    second = compare(baseline, load_bundle(confirm_dir), config.gate.tolerances)
    confirmed = merge_confirmation(comparison, second)
    write_json(out_dir / "compare.json", confirmed.to_dict())
    return confirmed


def should_update_baseline(config: RunConfig, branch: str | None, verdict: str) -> str | None:
    """The reason to write this run as the baseline, or None. On main a FAIL is not promoted."""
    policy = config.gate.update_baseline
    if policy == "always":
        return "--update-baseline"
    if policy == "auto" and branch == "main" and verdict != "FAIL":
        return "branch main"
    return None


def run_gate(config: RunConfig, reporter: Reporter | None = None) -> GateOutcome:
    reporter = reporter or SilentReporter()
    out_dir = Path(config.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for pattern in STALE_RESULTS:
        for stale in out_dir.glob(pattern):
            stale.unlink()
    for directory in STALE_DIRS:
        shutil.rmtree(out_dir / directory, ignore_errors=True)
    # Fail fast on bad input, before minutes of benchmarking.
    load_workload(config.bench.workload, dict(config.bench.workload_args))
    world_sizes = config.bench.world_sizes or default_world_sizes(config.bench.device)
    for ws in world_sizes:
        check_world_size(ws, config.bench.device)
    seconds: dict[str, float] = {}

    @contextmanager
    def stage(name: str, total: int | None = None) -> Iterator[None]:
        reporter.stage_started(name, total)
        started = time.perf_counter()
        yield
        seconds[name] = time.perf_counter() - started
        reporter.stage_finished(name, seconds[name])

    with stage("env"):
        env = stage_env(out_dir)
    for ws in world_sizes:
        with stage(f"bench ws={ws}", config.bench.steps):
            run_bench(config, ws, out_dir, reporter.stage_progress)
    if config.eval.enabled:
        with stage("eval"):
            run_eval(config, out_dir / "eval.json")
    if config.trace.enabled:
        with stage("trace"):
            run_trace(config, out_dir / "trace")
    with stage("compare"):
        comparison, current, baseline = stage_compare(config, out_dir)
    if config.gate.confirm_failures and baseline is not None and timing_failures(comparison):
        with stage("confirm: re-run the failing world sizes", config.bench.steps):
            comparison = stage_confirm(config, out_dir, comparison, baseline, reporter)
    written = None
    reason = should_update_baseline(config, env["git"]["branch"], comparison.verdict)
    if reason:
        written = save_baseline(current, config.gate.baseline_dir, reason)
    return GateOutcome(comparison, out_dir, written, seconds)
