"""The `benchgate-bisect` pipeline: a whole bisection as one task on one GPU node, and its submission
(`benchgate bisect --submit`).

    bisect (one pod: full clone, `benchgate bisect` on it) ─► results: bisect.json, each step's ab.json
        ─► log bisection (benchgate's code only: bisect.json to MLflow)

Why one task: every decision of a bisection is an interleaved A/B of two commits, and the steps'
decisions are compared with one another (each against good, with the rounds sized by one probe of
good's step time), so all of them must run on the same machine, as a local bisect does. One pod
running the local bisect (kfp/bisect/task.py) gives exactly that; a task per step could land each on
another node. The task asks for `world_size` GPUs on the GPU pool with the gate pipeline's settings
(accelerator type, node selector, tolerations, CPU and memory requests, a memory /dev/shm) and is
never cached. It runs the commits' code, so it holds no MLflow credential: the `log bisection` task
after it (CPU, benchgate's code only, the optional MLflow credentials secret) logs the bisection to
MLflow (kind bisect) tagged with this pipeline run's id.

Submission follows `benchgate submit` (kfp/submit.py): the run's name is fixed by its arguments, so
a second identical submit attaches to the run the first started instead of bisecting again.
"""

import hashlib
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kfp import dsl, kubernetes
from kfp.dsl import Artifact, Input, Output

from benchgate.config import DEFAULT_WORKLOAD
from benchgate.errors import EXIT_RUN_FAILED, ConfigError
from benchgate.kfp.api import Connection, KfpApi, preflight
from benchgate.kfp.components import component
from benchgate.kfp.params import GPU_CPU_REQUEST, GPU_MEMORY_REQUEST, workload_args_parameter
from benchgate.kfp.pipeline import (
    GPU_TOLERATION,
    LIGHT_CPU_REQUEST,
    LIGHT_MEMORY_REQUEST,
    MLFLOW_SECRET_KEYS,
    on_gpu_pool,
)
from benchgate.kfp.submit import SubmitOutcome, ensure_run, follow, load_package
from benchgate.kit.git_auth import GIT_SECRET_DIR
from benchgate.measure.source import validate_commit, validate_repository
from benchgate.tracking.client import local_store_path

PIPELINE_NAME = "benchgate-bisect"
BISECT_PIPELINE_FILE = Path("pipelines/bisect.yaml")
TASK_NAME = "bisect"
LOG_TASK_NAME = "log bisection"


@component
def bisect(
    good: str,
    bad: str,
    repository: str,
    workload: str,
    workload_args: str,
    world_size: int,
    config: str,
    kfp_run_id: str,
    results: Output[Artifact],
) -> str:
    """Bisect good..bad of the repository on this node by interleaved A/B (`benchgate bisect`);
    bisect.json and each step's A/B in `results`. Returns CULPRIT, NO_REGRESSION or UNKNOWN."""
    from benchgate.kfp.bisect.task import bisect_task

    return bisect_task(
        good,
        bad,
        repository,
        workload,
        workload_args,
        world_size,
        config,
        kfp_run_id,
        results.path,
    )


@component
def log_bisection(results: Input[Artifact], config: str, mlflow_tracking_uri: str, kfp_run_id: str) -> str:
    """Log the bisect task's bisect.json to MLflow (kind bisect, tagged with the KFP run id): benchgate's
    code only, the one task of this pipeline that holds the tracking credential. Returns the run id."""
    from benchgate.kfp.bisect.task import log_bisection_task

    return log_bisection_task(results.path, config, mlflow_tracking_uri, kfp_run_id)


@dsl.pipeline(
    name=PIPELINE_NAME,
    description="Find the first commit between good and bad whose training throughput is slower than "
    "good's beyond tolerance, by interleaved A/B on one GPU node.",
)
def bisect_pipeline(
    good: str = "",
    bad: str = "",
    repository: str = "",
    workload: str = DEFAULT_WORKLOAD,
    workload_args: str = "{}",
    world_size: int = 1,
    config: str = "",
    mlflow_tracking_uri: str = "",
    accelerator_type: str = "nvidia.com/gpu",
    # KFP reads a parameter's type from a bare dict or list, and its default as a literal.
    gpu_node_selector: dict = {},  # noqa: B006
    gpu_tolerations: list = [GPU_TOLERATION],  # noqa: B006
    gpu_cpu_request: str = GPU_CPU_REQUEST,
    gpu_memory_request: str = GPU_MEMORY_REQUEST,
    mlflow_secret: str = "benchgate-mlflow",
    git_secret: str = "benchgate-git",
) -> None:
    """A bisection of good..bad in one task.

    Args:
        good: Full SHA of the older commit, whose speed is the one to keep.
        bad: Full SHA of a newer, slower commit; good must be one of its ancestors.
        repository: Git URL of both, cloned in full (the bisect walks the history between them).
        workload: Workload factory as 'module:function'.
        workload_args: The workload factory's keyword arguments as a JSON object, e.g. {"hidden": 512}.
        world_size: GPUs of every A/B (and of the task).
        config: The TOML text `benchgate bisect --config` reads: [gate.ab] (rounds, budget),
            [gate.tolerances] throughput_drop_pct, [bench] device, [tracking] experiment.
        mlflow_tracking_uri: Where the bisection is logged (empty: the cluster's MLFLOW_TRACKING_URI).
        gpu_cpu_request: CPU request of the task's pod, a Kubernetes quantity ("8", "7500m").
        gpu_memory_request: Memory request of the task's pod ("32Gi"); its /dev/shm counts against it.
        git_secret: The Secret with git's credentials for a private repository, mounted on the bisect
            task, which clones it (docs/kubernetes.md, "Private repositories"); optional.
    """
    task = bisect(
        good=good,
        bad=bad,
        repository=repository,
        workload=workload,
        workload_args=workload_args,
        world_size=world_size,
        config=config,
        # bisect.json's record of the run: resolved by KFP (and kfp.local) to this run's id.
        kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    task.set_display_name(TASK_NAME).set_caching_options(False)
    on_gpu_pool(
        task,
        world_size,
        accelerator_type=accelerator_type,
        node_selector=gpu_node_selector,
        tolerations=gpu_tolerations,
        cpu_request=gpu_cpu_request,
        memory_request=gpu_memory_request,
    )
    # The clone of a private repository: git's read credential as files (kit/git_auth.py).
    kubernetes.use_secret_as_volume(task, git_secret, mount_path=str(GIT_SECRET_DIR), optional=True)
    # The bisect task runs the commits' code: no tracking credential. This one runs benchgate's only.
    logged = log_bisection(
        results=task.outputs["results"],
        config=config,
        mlflow_tracking_uri=mlflow_tracking_uri,
        # The tag the bisection's MLflow run carries (`bisect --submit --wait` finds it by it).
        kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    logged.set_display_name(LOG_TASK_NAME).set_caching_options(False)
    logged.set_cpu_request(LIGHT_CPU_REQUEST).set_memory_request(LIGHT_MEMORY_REQUEST)
    logged.set_env_variable("NVIDIA_VISIBLE_DEVICES", "void")  # no GPU: see pipeline.py's on_cpu
    kubernetes.use_secret_as_env(logged, mlflow_secret, MLFLOW_SECRET_KEYS, optional=True)


def bisect_arguments(
    good: str,
    bad: str,
    repository: str,
    workload: str,
    workload_args: dict[str, Any],
    world_size: int,
    config_text: str,
    mlflow_tracking_uri: str,
) -> dict[str, Any]:
    """The pipeline's arguments, checked: full SHAs, a git URL without credentials, a tracking URI the
    cluster can reach (not a store on this machine's disk)."""
    arguments: dict[str, Any] = {
        "good": validate_commit(good, "--good"),
        "bad": validate_commit(bad, "--bad"),
        "repository": validate_repository(repository, "--repository"),
        "workload": workload,
        "workload_args": workload_args_parameter(workload_args),
        "world_size": world_size,
        "config": config_text,
    }
    if local_store_path(mlflow_tracking_uri) is not None:
        raise ConfigError(
            f"tracking.uri: got {mlflow_tracking_uri!r}, a store on this machine's disk that the cluster "
            "cannot log to (an MLflow server's URL, or none for the cluster's MLFLOW_TRACKING_URI)"
        )
    if mlflow_tracking_uri:
        arguments["mlflow_tracking_uri"] = mlflow_tracking_uri
    return arguments


def bisect_run_name(arguments: dict[str, Any]) -> str:
    """Fixed by the arguments: the same bisection submitted again has the same name, and attaches."""
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:10]
    return f"{PIPELINE_NAME}-{arguments['good'][:8]}-{arguments['bad'][:8]}-{digest}"


def compiled_spec() -> dict[str, Any]:
    """This version's bisect pipeline, as the API takes it (compiled now, as `benchgate submit` does)."""
    from benchgate.kfp.compile import compile_to

    with tempfile.TemporaryDirectory() as tmp:
        return load_package(compile_to(bisect_pipeline, Path(tmp) / BISECT_PIPELINE_FILE.name))


def submit_bisect(
    arguments: dict[str, Any],
    conn: Connection,
    experiment: str,
    wait: bool,
    timeout_s: float,
    poll_s: float,
    say: Callable[[str], None] = print,
) -> SubmitOutcome:
    """Start the bisection's run, or attach to the one of the same name; with `wait`, follow it until it
    ends. The outcome's exit code is 3 where it did not succeed (or the wait timed out); where it
    succeeded, the bisection's own result is in MLflow and the run's artifact."""
    multi_user = preflight(conn)
    api = KfpApi(conn)
    name = bisect_run_name(arguments)
    experiment_id = api.experiment_id(experiment, api.own_namespace(multi_user))
    run_id, reused = ensure_run(api, experiment_id, name, arguments, compiled_spec)
    outcome = SubmitOutcome(run_id, name, conn.run_url(run_id), reused)
    say(f"{'attached to existing' if reused else 'submitted'} run {name}: {outcome.url}")
    if not wait:
        return outcome
    ended = follow(api, outcome, timeout_s, poll_s)
    if ended is None:
        return outcome
    state, tasks = ended
    if state != "SUCCEEDED":
        failed = [task for task, task_state in tasks if task_state == "FAILED"]
        where = f" (failed: {', '.join(failed)})" if failed else ""
        outcome.exit_code = EXIT_RUN_FAILED
        outcome.message = f"the run ended {state}{where}; its task's log says why"
    return outcome
