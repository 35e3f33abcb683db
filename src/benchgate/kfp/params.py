"""Pipeline parameters <-> RunConfig: the one place that maps what a KFP user fills in onto the config.

The pipeline exposes the settings people change per run as parameters of their own (commit, workload,
N, steps, tolerances, ...) and takes everything else as `config`, a dict shaped like the TOML file.
The named parameters win over `config`. `benchgate run` goes the other way: it turns a validated
RunConfig into arguments, so a local run and a cluster run are described by the same values.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig, parse_config
from benchgate.errors import ConfigError

# Where a cluster run keeps the baseline store (a cache of MLflow's baselines), the spool and, without a
# tracking URI, MLflow's embedded store. With `baseline_pvc` a PersistentVolumeClaim is mounted here (see
# pipeline.py) and they outlive the pod; without it the task moves them to a pod-local directory
# (`task_stores`), a cache that lives as long as the pod.
CLUSTER_BASELINE_MOUNT = "/mnt/benchgate"
CLUSTER_BASELINE_DIR = f"{CLUSTER_BASELINE_MOUNT}/baselines"
CLUSTER_TRACKING_DIRS = {
    "spool_dir": f"{CLUSTER_BASELINE_MOUNT}/spool",
    "local_dir": f"{CLUSTER_BASELINE_MOUNT}/mlflow",
}
# The pod-local directory that stands in for the mount point when no volume is mounted.
POD_LOCAL_DIR = Path(tempfile.gettempdir()) / "benchgate"


def world_sizes_for(n: int) -> list[int]:
    return [1] if n == 1 else [1, n]


def config_from_parameters(
    config: dict[str, Any],
    *,
    workload: str,
    workload_args: dict[str, Any],
    world_size_n: int,
    steps: int,
    warmup: int,
    tolerances: dict[str, Any],
    update_baseline: str,
    baseline_dir: str,
    mlflow_tracking_uri: str,
) -> RunConfig:
    """Merge the named pipeline parameters over `config` and validate the result once."""
    data = copy.deepcopy(config)
    bench = data.setdefault("bench", {})
    gate = data.setdefault("gate", {})
    if world_size_n < 1:
        raise ConfigError(f"world_size_n: got {world_size_n} (must be >= 1)")
    bench.update(
        workload=workload,
        workload_args=workload_args,
        world_sizes=world_sizes_for(int(world_size_n)),
        steps=steps,
        warmup=warmup,
    )
    gate["tolerances"] = {**gate.get("tolerances", {}), **tolerances}
    gate.update(update_baseline=update_baseline, baseline_dir=baseline_dir)
    tracking = data.setdefault("tracking", {})
    if mlflow_tracking_uri:
        tracking["uri"] = mlflow_tracking_uri
    for key, cluster_default in CLUSTER_TRACKING_DIRS.items():
        tracking.setdefault(key, cluster_default)
    return parse_config(data)


def parameters_from_config(config: RunConfig, world_sizes: list[int]) -> dict[str, Any]:
    """Pipeline arguments that describe `config` (world sizes already resolved for this machine)."""
    if world_sizes not in ([1], [1, max(world_sizes)]):
        raise ConfigError(
            f"bench.world_sizes: got {world_sizes} (the pipeline runs ws=1 and one larger ws=N: "
            "use [1] or [1, N])"
        )
    # KFP parameters cannot hold null; a None field means "the default", so dropping it changes nothing.
    dumped = config.model_dump(mode="json", exclude_none=True)
    # Tasks may run in another directory: paths go in absolute, as baseline_dir does below.
    for key in CLUSTER_TRACKING_DIRS:
        dumped["tracking"][key] = str(Path(getattr(config.tracking, key)).resolve())
    return {
        "config": dumped,
        "workload": config.bench.workload,
        "workload_args": dict(config.bench.workload_args),
        "world_size_n": max(world_sizes),
        "steps": config.bench.steps,
        "warmup": config.bench.warmup,
        "tolerances": dumped["gate"]["tolerances"],
        "update_baseline": config.gate.update_baseline,
        "baseline_dir": str(config.gate.baseline_dir.resolve()),
        "mlflow_tracking_uri": config.tracking.uri,
    }


def task_stores(config: RunConfig, baseline_pvc: str, pod_local: Path | None = None) -> RunConfig:
    """`config` with the stores where this task can keep them: the baseline store, spool and local_dir.

    With `baseline_pvc` the volume is mounted at CLUSTER_BASELINE_MOUNT and every path stays as it is.
    Without it nothing is mounted there, so a path under the mount point (the cluster defaults) moves to
    `pod_local` (default POD_LOCAL_DIR), a cache that goes with the pod. A path elsewhere stays: a local
    run's .benchgate/... directories are on the user's disk and persist.
    """
    if baseline_pvc:
        return config
    mount, scratch = Path(CLUSTER_BASELINE_MOUNT), pod_local or POD_LOCAL_DIR

    def moved(path: Path) -> Path:
        return scratch / path.relative_to(mount) if path.is_relative_to(mount) else path

    return config.model_copy(
        update={
            "gate": config.gate.model_copy(update={"baseline_dir": moved(config.gate.baseline_dir)}),
            "tracking": config.tracking.model_copy(
                update={key: moved(getattr(config.tracking, key)) for key in CLUSTER_TRACKING_DIRS}
            ),
        }
    )
