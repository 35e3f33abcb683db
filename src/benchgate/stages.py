"""The gate's stages that are not a launch of their own: env, compare, confirm, baseline update.

Each is a function from files to files in one result directory, so a pipeline task can call exactly one
of them and a crash leaves the finished stages' results on disk. (bench, eval and trace live in
`launch`, `evaluate` and `trace`.) The pipeline in `benchgate.kfp` chains them; nothing here knows
about it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from benchgate.baseline import find_baseline, save_baseline
from benchgate.compare import Comparison, compare, merge_confirmation, timing_failures
from benchgate.config import RunConfig
from benchgate.env import capture_environment
from benchgate.files import read_json, write_json
from benchgate.launch import ProgressCallback, run_bench
from benchgate.report import markdown
from benchgate.results import Bundle, load_bundle


def stage_env(out_dir: Path, cwd: Path | None = None, branch: str | None = None) -> dict[str, Any]:
    env = capture_environment(cwd, branch)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "env.json", env)
    return env


def write_comparison(run_dir: Path, comparison: Comparison) -> None:
    write_json(run_dir / "compare.json", comparison.to_dict())
    (run_dir / "compare.md").write_text(markdown(comparison), encoding="utf-8")


def stage_compare(config: RunConfig, run_dir: Path) -> tuple[Comparison, Bundle, Bundle | None]:
    """Compare the run in `run_dir` with its baseline; writes compare.json and compare.md."""
    current = load_bundle(run_dir)
    workload = current.workload
    assert workload is not None
    baseline = find_baseline(config.gate.baseline_dir, current.machine_profile, workload)
    comparison = compare(baseline, current, config.gate.tolerances)
    write_comparison(run_dir, comparison)
    return comparison, current, baseline


def worlds_to_confirm(config: RunConfig, comparison: Comparison, baseline: Bundle | None) -> list[int]:
    """World sizes whose timing FAIL must be repeated before it counts (empty: the verdict is final)."""
    if not config.gate.confirm_failures or baseline is None:
        return []
    return timing_failures(comparison)


def stage_confirm(
    config: RunConfig, run_dir: Path, world_sizes: list[int], on_progress: ProgressCallback | None = None
) -> Comparison:
    """Re-run `world_sizes` into run_dir/confirm and keep a timing FAIL only where it repeats.

    Rewrites compare.json and compare.md in `run_dir`.
    """
    first = Comparison.from_dict(read_json(run_dir / "compare.json"))
    current = load_bundle(run_dir)
    assert current.workload is not None
    baseline = find_baseline(config.gate.baseline_dir, current.machine_profile, current.workload)
    if baseline is None:
        return first
    confirm_dir = run_dir / "confirm"
    shutil.rmtree(confirm_dir, ignore_errors=True)
    confirm_dir.mkdir(parents=True)
    shutil.copy2(run_dir / "env.json", confirm_dir / "env.json")
    # The device count the run was captured with (as the bench tasks use), not a second probe.
    gpus = current.env.get("gpu", {}).get("count")
    for ws in world_sizes:
        run_bench(config, ws, confirm_dir, on_progress, gpus=gpus)
    second = compare(baseline, load_bundle(confirm_dir), config.gate.tolerances)
    confirmed = merge_confirmation(first, second)
    write_comparison(run_dir, confirmed)
    return confirmed


def should_update_baseline(config: RunConfig, branch: str | None, verdict: str) -> str | None:
    """The reason to write this run as the baseline, or None. On main a FAIL is not promoted."""
    policy = config.gate.update_baseline
    if policy == "always":
        return "--update-baseline"
    if policy == "auto" and branch == "main" and verdict != "FAIL":
        return "branch main"
    return None


def stage_update_baseline(config: RunConfig, run_dir: Path, verdict: str) -> Path | None:
    """Write the run in `run_dir` as its profile's baseline when the policy says so; returns where."""
    current = load_bundle(run_dir)
    reason = should_update_baseline(config, current.env.get("git", {}).get("branch"), verdict)
    if reason is None:
        return None
    return save_baseline(current, config.gate.baseline_dir, reason)
