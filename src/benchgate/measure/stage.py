"""The env stage (env.json: machine profile, git, fingerprints) and the workload's contract check.

A stage is a function from files to files in one result directory (see the package docstring). The
other measuring stages are `launch.stage_bench` (bench), `evaluate` (eval) and `trace` (trace).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig
from benchgate.kit.files import write_json
from benchgate.measure import fingerprint
from benchgate.measure.env import capture_environment, launch_gpus
from benchgate.measure.gpu_required import require_visible_gpu


def stage_env(
    out_dir: Path,
    cwd: Path | None = None,
    branch: str | None = None,
    config: RunConfig | None = None,
    *,
    gpus_per_node: int | None = None,
) -> dict[str, Any]:
    """Capture env.json; with the run's `config`, also the fingerprints of what A/B holds fixed.

    With `config` the profile names the GPUs of the run's largest launch on one node (`launch_gpus`;
    `gpus_per_node` where the largest spans nodes), and a GPU that was asked for or given but that torch
    cannot see stops the run here (`require_visible_gpu`, exit 2), before anything is benchmarked.
    """
    per_launch = None
    if config is not None:
        require_visible_gpu(config.bench.device)
        per_launch = launch_gpus(config.bench.world_sizes, gpus_per_node)
    env = capture_environment(cwd, branch, per_launch=per_launch)
    if config is not None:
        env["fingerprints"] = fingerprint.capture_fingerprints(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "env.json", env)
    return env


def stage_check_workload(config: RunConfig) -> dict[str, Any]:
    """Check the workload's contract before any bench: its members, then one real training step on the
    bench's device (CPU without a GPU).

    WorkloadError (exit 2) names the member and its value; see `training.check_training_step`. Returns
    what the step saw, for the task's log.
    """
    from benchgate.workloads.base import load_workload
    from benchgate.workloads.training import (  # torch: only tasks that train
        check_training_step,
        resolve_device,
    )

    bench = config.bench
    started = time.perf_counter()
    workload = load_workload(bench.workload, dict(bench.workload_args))
    eval_seq_len = config.eval.seq_len if config.eval.enabled else None
    where = f"bench.workload: {bench.workload}"
    loss = check_training_step(workload, where, bench.seed, eval_seq_len, resolve_device(bench.device))
    return {"workload": bench.name or workload.name, "loss": loss, "seconds": time.perf_counter() - started}
