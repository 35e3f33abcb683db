"""Pipeline parameters <-> RunConfig: the one place that maps what a KFP user fills in onto the config.

The pipeline exposes the settings people change per run as parameters of their own (commit, workload,
N, steps, tolerances, ...) and takes everything else as `config`, a dict shaped like the TOML file.
The named parameters win over `config`. `benchgate run` goes the other way: it turns a validated
RunConfig into arguments, so a local run and a cluster run are described by the same values.

Types: KFP carries a dict parameter as a protobuf Struct, in which every number is a double, so 512 in
`config` arrives as 512.0. For the config's own fields that is undone here (an integral double goes
back to an int, which every float field takes too). A workload argument cannot be undone that way (the
factory may want 512.0), so the workload's arguments travel as `workload_args`, a JSON object in a
string parameter, decoded here with every type intact; `config` may not carry them.
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig, parse_config, shown
from benchgate.config_types import MAX_INT, check_world_sizes
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

# The GPU tasks' pod requests, pipeline parameters (kfp/pipeline.py applies them; the BenchmarkRun's
# cpuRequest and memoryRequest carry them). A pod with no request is BestEffort: evicted first under
# memory pressure, served CPU last while it is timed. The defaults suit the default world_size_n=8, 8
# ranks in one pod of an 8-GPU training node (~100 CPUs, 1 TiB and more): a core and 4 GiB per rank is
# a floor any such node holds. A smaller GPU node needs smaller values, or the pods stay Pending.
GPU_CPU_REQUEST = "8"
GPU_MEMORY_REQUEST = "32Gi"
# The cap of each GPU task's memory-backed /dev/shm (fixed at compile time: kfp-kubernetes takes no
# parameter for it). NCCL's buffers between one pod's ranks take some hundreds of MiB (the runtime's
# 64 MiB fails), DataLoader workers' batches more; half the default memory request leaves the rest to
# the processes. A tmpfs takes pages only as they are written: a cap, not a reservation.
SHM_SIZE_LIMIT = "16Gi"
# Kubernetes quantities, as the chart's values.schema.json writes them, above zero (a zero request leaves
# the pod BestEffort), each with the suffixes that make sense for its resource: CPUs ("8", "0.5",
# "500m"), bytes ("32Gi", "64G", "34359738368"). Plain JSON-schema regexes, so the CRD's schema and the
# controller read them alike. Above zero: a nonzero digit before the point, or after it.
_ABOVE_ZERO = r"([0-9]*[1-9][0-9]*(\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*)"
CPU_QUANTITY_PATTERN = rf"^{_ABOVE_ZERO}m?$"
MEMORY_QUANTITY_PATTERN = rf"^{_ABOVE_ZERO}(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
REQUEST_PARAMETERS = {
    "gpu_cpu_request": (CPU_QUANTITY_PATTERN, '"8", "0.5" or "500m"'),
    "gpu_memory_request": (MEMORY_QUANTITY_PATTERN, '"32Gi" or "64G"'),
}


# A world size across nodes (kfp/trainjob/job.py, docs/multinode.md): the pipeline runs the ws=N bench as a
# Kubeflow Trainer TrainJob of world_size_n / gpus_per_node nodes when `multi_node` is true. KFP's
# conditions compare a parameter with a constant, so whoever submits decides: `benchgate submit` and the
# controller set `multi_node` when `gpus_per_node` is given and world_size_n exceeds it.
DEFAULT_WORLD_SIZE_N = 8
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_TRAINER_RUNTIME = "torch-distributed"
MULTI_NODE_PARAMETERS = ("multi_node", "gpus_per_node", "trainer_runtime")


def multi_node_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """`arguments` with the multi-node parameters checked, and `multi_node` set to true where
    `gpus_per_node` is given, `multi_node` is not, and world_size_n is larger than one node's GPUs.

    A world size across nodes must be larger than a node (else it runs on one) and a multiple of
    gpus_per_node (every node runs as many ranks); a ConfigError names the parameter and its value."""
    out = dict(arguments)
    world_size = out.get("world_size_n", DEFAULT_WORLD_SIZE_N)
    gpus = out.get("gpus_per_node", DEFAULT_GPUS_PER_NODE)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(
            f"gpus_per_node: got {shown(gpus)} (expected an integer >= 1, the GPUs of one node)"
        )
    runtime = out.get("trainer_runtime", DEFAULT_TRAINER_RUNTIME)
    if not isinstance(runtime, str) or not runtime:
        raise ConfigError(
            f"trainer_runtime: got {shown(runtime)} (expected the name of a ClusterTrainingRuntime, e.g. "
            f"{DEFAULT_TRAINER_RUNTIME!r})"
        )
    if "multi_node" not in out:
        if "gpus_per_node" not in out or not isinstance(world_size, int) or isinstance(world_size, bool):
            return out
        out["multi_node"] = world_size > gpus
    multi_node = out["multi_node"]
    if not isinstance(multi_node, bool):
        raise ConfigError(f"multi_node: got {shown(multi_node)} (expected true or false)")
    if multi_node:
        check_across_nodes(world_size, gpus)
    return out


def check_across_nodes(world_size: Any, gpus_per_node: int) -> None:
    """That `world_size` can run across nodes of `gpus_per_node` GPUs: more than one node, whole nodes."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size <= gpus_per_node:
        raise ConfigError(
            f"multi_node: got true with world_size_n {shown(world_size)} (a run across nodes needs a world "
            f"size larger than gpus_per_node={gpus_per_node}; a smaller one runs on one node)"
        )
    if world_size % gpus_per_node:
        raise ConfigError(
            f"world_size_n: got {world_size}, not a multiple of gpus_per_node={gpus_per_node} (across nodes, "
            "every node runs the same number of ranks)"
        )


def request_parameter(name: str, value: Any) -> str:
    """The request parameter `name` (one of REQUEST_PARAMETERS) as the pipeline takes it: a quantity
    string above zero. A number (`--param gpu_cpu_request=8` reads as one) becomes its text. Checked
    here because KFP's driver parses it only when the task's pod is made: a bad one would fail the run
    on the cluster, a zero would leave the pod BestEffort."""
    pattern, examples = REQUEST_PARAMETERS[name]
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    if not isinstance(text, str) or re.fullmatch(pattern, text) is None:
        raise ConfigError(
            f"{name}: got {shown(value)} (expected a Kubernetes quantity above zero, e.g. {examples})"
        )
    return text


def world_sizes_for(n: int) -> list[int]:
    return [1] if n == 1 else [1, n]


def workload_args_parameter(args: Mapping[str, Any]) -> str:
    """The `workload_args` pipeline parameter for `args`: a JSON object, which keeps 512 an int."""
    try:
        return json.dumps(dict(args))
    except ValueError as e:  # an int of more than 4300 digits has no decimal text
        raise ConfigError(f"workload_args: got {shown(dict(args))} ({e})") from None


def decode_workload_args(value: Any) -> dict[str, Any]:
    """The workload's keyword arguments from the `workload_args` parameter: a JSON object in a string
    (what the pipeline takes), or the dict itself from a caller in this process."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            # NaN and Infinity decode as floats, which the config then refuses, naming the argument.
            decoded = json.loads(value or "{}")
        except (ValueError, RecursionError) as e:
            raise ConfigError(
                f"workload_args: got {shown(value)} (expected a JSON object, e.g. "
                f'{{"hidden": 512, "size": "tiny"}}: {e})'
            ) from None
        if isinstance(decoded, dict):
            return decoded
    raise ConfigError(
        f"workload_args: got {shown(value)} (expected a JSON object of the workload factory's keyword "
        'arguments, e.g. {"hidden": 512, "size": "tiny"})'
    )


def _ints_restored(value: Any) -> Any:
    """`value` with every integral double that fits a JSON-safe int turned back into an int (a Struct
    parameter made it a double; the config's integer fields want it back, its float fields take either)."""
    if isinstance(value, dict):
        return {k: _ints_restored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints_restored(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT:
        return int(value)
    return value


def config_from_parameters(
    config: dict[str, Any],
    *,
    workload: str,
    workload_args: str | dict[str, Any],
    world_size_n: int,
    steps: int,
    warmup: int,
    tolerances: dict[str, Any],
    update_baseline: str,
    baseline_dir: str,
    mlflow_tracking_uri: str,
) -> RunConfig:
    """Merge the named pipeline parameters over `config` and validate the result once.

    Every parameter arrives as the user typed it (`benchgate submit --param`, the KFP UI, a
    BenchmarkRun), so each is checked for its type before it is used: a ConfigError names it.
    `workload_args` is the JSON object the pipeline takes (or its dict); `config`'s integral doubles are
    read back as ints (see the module's docstring).
    """
    data = _ints_restored(copy.deepcopy(_table(config, "config")))
    bench = _table(data.setdefault("bench", {}), "config.bench")
    if bench.get("workload_args"):
        raise ConfigError(
            f"config.bench.workload_args: got {shown(bench['workload_args'])} (set the workload_args "
            'parameter instead, a JSON object such as {"hidden": 512}: in `config` KFP turns every '
            "number into a float)"
        )
    gate = _table(data.setdefault("gate", {}), "config.gate")
    tracking = _table(data.setdefault("tracking", {}), "config.tracking")
    if isinstance(world_size_n, bool) or not isinstance(world_size_n, int) or world_size_n < 1:
        raise ConfigError(f"world_size_n: got {shown(world_size_n)} (expected an integer >= 1)")
    if bench.get("world_sizes") is not None:
        # world_size_n wins, but a list that no pipeline can run is a mistake worth naming.
        parse_config({"bench": {"world_sizes": bench["world_sizes"]}})
    bench.update(
        workload=workload,
        workload_args=decode_workload_args(workload_args),
        world_sizes=world_sizes_for(world_size_n),
        steps=steps,
        warmup=warmup,
    )
    gate["tolerances"] = {
        **_table(gate.get("tolerances", {}), "config.gate.tolerances"),
        **_table(tolerances, "tolerances"),
    }
    gate.update(update_baseline=update_baseline, baseline_dir=baseline_dir)
    if mlflow_tracking_uri:
        tracking["uri"] = mlflow_tracking_uri
    for key, cluster_default in CLUSTER_TRACKING_DIRS.items():
        tracking.setdefault(key, cluster_default)
    return parse_config(data)


def _table(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: got {shown(value)} (expected a dict shaped like the TOML file's tables)")
    return value


def parameters_from_config(config: RunConfig, world_sizes: list[int]) -> dict[str, Any]:
    """Pipeline arguments that describe `config` (world sizes already resolved for this machine)."""
    try:
        check_world_sizes(world_sizes)
    except ValueError as e:
        raise ConfigError(f"bench.world_sizes: got {world_sizes} ({e})") from None
    # KFP parameters cannot hold null; a None field means "the default", so dropping it changes nothing.
    dumped = config.model_dump(mode="json", exclude_none=True)
    # The workload's arguments go as their own JSON parameter, where their types survive.
    del dumped["bench"]["workload_args"]
    # Tasks may run in another directory: paths go in absolute, as baseline_dir does below.
    for key in CLUSTER_TRACKING_DIRS:
        dumped["tracking"][key] = str(Path(getattr(config.tracking, key)).resolve())
    return {
        "config": dumped,
        "workload": config.bench.workload,
        "workload_args": workload_args_parameter(config.bench.workload_args),
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
