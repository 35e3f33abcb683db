"""The gate's KFP components: lightweight Python components, each a two-line body over one task function.

KFP ships a component's function source to the pod and runs it there, so a body must be self-contained:
it imports benchgate inside (the bench image has it installed, and kfp.local runs it in this
environment) and hands its artifact paths to `benchgate.kfp.tasks`. Every figure and decision lives
there and in the core; nothing here needs a test of its own beyond the pipeline's.

The image is benchgate's bench image at this version (images/bench/Dockerfile), so a compiled pipeline
always runs the benchgate it was compiled from. `install_kfp_package=False`: the image carries the
pinned kfp, and a pod needs no network to start.
"""

import os
import re
from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Metrics, Output

from benchgate._version import __version__

BENCH_IMAGE_REPOSITORY = os.environ.get("BENCHGATE_IMAGE_REPOSITORY", "ghcr.io/benchgate/bench")
# A digest (sha256:...) pins the compiled pipeline's image to those exact bytes: a tag can be pushed over.
BENCH_IMAGE_DIGEST = os.environ.get("BENCHGATE_IMAGE_DIGEST", "")


def bench_image(repository: str, digest: str) -> str:
    """The bench image the components name: `repository@digest` when a digest is given, else the tag of
    this version. A digest that is not `sha256:` and 64 hex digits is a ConfigError naming it."""
    if not digest:
        return f"{repository}:{__version__}"
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        from benchgate.errors import ConfigError

        raise ConfigError(
            f"BENCHGATE_IMAGE_DIGEST: got {digest!r}, expected sha256: and 64 lowercase hex digits"
        )
    return f"{repository}@{digest}"


BENCH_IMAGE = bench_image(BENCH_IMAGE_REPOSITORY, BENCH_IMAGE_DIGEST)

component = dsl.component(base_image=BENCH_IMAGE, install_kfp_package=False)


@component
def capture_env(
    config: dict,
    workload: str,
    workload_args: str,
    world_size_n: int,
    steps: int,
    warmup: int,
    tolerances: dict,
    update_baseline: str,
    baseline_dir: str,
    mlflow_tracking_uri: str,
    repository: str,
    commit: str,
    branch: str,
    base_commit: str,
    kfp_run_id: str,
    kfp_run_name: str,
    setup: Output[Artifact],
    multi_node: bool = False,
    gpus_per_node: int = 8,
    suite_entry: str = "",
) -> None:
    """Validate the run's parameters into config.json and capture env.json and the machine profile.
    workload_args: a JSON object (a string, so that its integers stay integers). multi_node: ws=N runs
    across nodes of gpus_per_node GPUs (this pod then has one node's GPUs, not N). suite_entry: one
    entry of a suite (JSON), whose workload, arguments and config replace the run's."""
    from benchgate.kfp.tasks import env_task

    parameters = {
        "config": config,
        "workload": workload,
        "workload_args": workload_args,
        "world_size_n": world_size_n,
        "steps": steps,
        "warmup": warmup,
        "tolerances": tolerances,
        "update_baseline": update_baseline,
        "baseline_dir": baseline_dir,
        "mlflow_tracking_uri": mlflow_tracking_uri,
    }
    env_task(
        parameters,
        repository,
        commit,
        branch,
        base_commit,
        kfp_run_id,
        kfp_run_name,
        setup.path,
        multi_node=multi_node,
        gpus_per_node=gpus_per_node,
        suite_entry=suite_entry,
    )


@component
def bench(
    setup: Input[Artifact],
    world_size: int,
    skip_if_one: bool,
    results: Output[Artifact],
    figures: Output[Metrics],
) -> None:
    """Benchmark training at one world size under torchrun (per-step samples, p50/p90, MFU, memory)."""
    from benchgate.kfp.tasks import bench_task

    bench_task(setup.path, world_size, skip_if_one, results.path, figures)


@component
def bench_multinode(
    setup: Input[Artifact],
    world_size: int,
    gpus_per_node: int,
    trainer_runtime: str,
    image: str,
    accelerator_type: str,
    gpu_node_selector: dict,
    gpu_tolerations: list,
    gpu_cpu_request: str,
    gpu_memory_request: str,
    results: Output[Artifact],
    figures: Output[Metrics],
    queue_name: str = "",
    git_secret: str = "",
) -> None:
    """Benchmark training at a world size across nodes: a Kubeflow Trainer TrainJob of world_size /
    gpus_per_node nodes, created and followed from this CPU-only pod, which writes rank 0's metrics file
    as the single-node bench does. The gpu_* settings are the nodes' pods' (not cpu_request or
    memory_request, the names KFP gives a task's own resource inputs)."""
    from benchgate.kfp.trainjob.task import bench_multinode_task

    bench_multinode_task(
        setup.path,
        world_size,
        gpus_per_node,
        trainer_runtime,
        image,
        accelerator_type,
        gpu_node_selector,
        gpu_tolerations,
        gpu_cpu_request,
        gpu_memory_request,
        results.path,
        figures,
        queue_name=queue_name,
        git_secret=git_secret,
    )


@component
def baseline(setup: Input[Artifact], baseline_pvc: str, store: Output[Artifact]) -> None:
    """Cache the profile's newest baseline from MLflow into `store`, for the eval task (which holds no
    tracking credential): benchgate's code only. baseline_pvc: the volume of the baseline cache ("":
    pod-local)."""
    from benchgate.kfp.baseline_task import baseline_task

    baseline_task(setup.path, baseline_pvc, store.path)


@component
def evaluate(
    setup: Input[Artifact], baseline: Input[Artifact], results: Output[Artifact], figures: Output[Metrics]
) -> None:
    """Deterministic eval on the bundled shard: perplexity and task probes. baseline: the baseline
    task's store, where the stored baseline's eval band is read (never MLflow)."""
    from benchgate.kfp.tasks import eval_task

    eval_task(setup.path, results.path, figures, baseline_dir=baseline.path)


@component
def trace(setup: Input[Artifact], trace: Output[Artifact]) -> None:
    """A torch.profiler trace of a few steps, for TensorBoard (torch-tb-profiler)."""
    from benchgate.kfp.tasks import trace_task

    trace_task(setup.path, trace.path)


@component
def compare(
    setup: Input[Artifact],
    bench_1: Input[Artifact],
    bench_n: Input[Artifact],
    evaluation: Input[Artifact],
    trace: Input[Artifact],
    baseline_pvc: str,
    config: dict,
    workload: str,
    workload_args: str,
    world_size_n: int,
    steps: int,
    warmup: int,
    tolerances: dict,
    update_baseline: str,
    baseline_dir: str,
    mlflow_tracking_uri: str,
    results: Output[Artifact],
    verdict: Output[Markdown],
    figures: Output[Metrics],
    multi_node: bool = False,
    suite_entry: str = "",
) -> NamedTuple("CompareOutputs", [("verdict", str), ("ab_world_sizes", str), ("base_commit", str)]):  # type: ignore[valid-type]
    """Screen the run against its profile's baseline (from MLflow): PASS / WARN / UNKNOWN / FAIL per
    check; publish a final verdict (report, baseline, MLflow), or hand undecided timing to A/B.
    baseline_pvc: the volume mounted for the baseline cache and spool ("": pod-local directories).
    config ... mlflow_tracking_uri, suite_entry: the run's parameters, as capture_env takes them: the
    setup's config.json must be what they make (the env task ran the code under test).
    multi_node: ws=N ran across nodes, so A/B (one node) decides ws=1 only."""
    from collections import namedtuple

    from benchgate.kfp.tasks import compare_task

    parameters = {
        "config": config,
        "workload": workload,
        "workload_args": workload_args,
        "world_size_n": world_size_n,
        "steps": steps,
        "warmup": warmup,
        "tolerances": tolerances,
        "update_baseline": update_baseline,
        "baseline_dir": baseline_dir,
        "mlflow_tracking_uri": mlflow_tracking_uri,
    }
    outcome, worlds, base_commit = compare_task(
        setup.path,
        [bench_1.path, bench_n.path, evaluation.path, trace.path],
        baseline_pvc,
        results.path,
        verdict.path,
        figures,
        multi_node=multi_node,
        parameters=parameters,
        suite_entry=suite_entry,
    )
    CompareOutputs = namedtuple("CompareOutputs", ["verdict", "ab_world_sizes", "base_commit"])
    return CompareOutputs(outcome, worlds, base_commit)


@component
def ab(
    setup: Input[Artifact],
    compared: Input[Artifact],
    world_sizes: str,
    base_commit: str,
    gpus: int,
    accelerator_type: str,
    gpu_cpu_request: str,
    gpu_memory_request: str,
    results: Output[Artifact],
    verdict: Output[Markdown],
    figures: Output[Metrics],
) -> str:
    """Interleaved A/B of the base commit and the candidate on this node, round by round, for the world
    sizes the screen could not PASS; the A/B decision replaces the screen's. User code: it publishes
    nothing, the `publish` task after it does.
    gpus, accelerator_type, gpu_cpu_request, gpu_memory_request: what the pod asked for (for its log;
    not cpu_request or memory_request, the names KFP gives a task's own resource inputs)."""
    from benchgate.kfp.ab_task import ab_task

    return ab_task(
        setup.path,
        compared.path,
        world_sizes,
        base_commit,
        gpus,
        accelerator_type,
        gpu_cpu_request,
        gpu_memory_request,
        results.path,
        verdict.path,
        figures,
    )


@component
def publish(
    setup: Input[Artifact],
    compared: Input[Artifact],
    decided: Input[Artifact],
    baseline_pvc: str,
    results: Output[Artifact],
) -> None:
    """Publish the A/B task's verdict (report, baseline policy, MLflow): benchgate's code only, holding
    the tracking credential the A/B task (user code) never gets; `decided` is read as untrusted input.
    baseline_pvc: the volume mounted for the baseline store and spool ("": pod-local directories)."""
    from benchgate.kfp.trusted import publish_task

    publish_task(setup.path, compared.path, decided.path, baseline_pvc, results.path)


@component
def gate(results: Input[Artifact], summary: Output[Artifact]) -> None:
    """Fail the run on a FAIL (exit 1) or UNKNOWN (exit 4) verdict (the verdict is already published)."""
    from benchgate.kfp.tasks import gate_task

    gate_task(results.path, summary.path)


ALL = (capture_env, baseline, bench, bench_multinode, evaluate, trace, compare, ab, publish, gate)

# The components that run the code under test: they import the workload or run the checked-out
# repository (capture_env checks the workload's contract with one training step; bench_multinode's
# TrainJob pods run it). Their pods get no MLflow credential and no baseline volume (docs/kubernetes.md,
# "Who holds the tracking credential"); what they write is untrusted input to the others.
# tests/pipeline/test_task_trust.py holds every compiled pipeline to it.
USER_CODE_COMPONENTS = frozenset(
    {"capture-env", "bench", "bench-multinode", "evaluate", "trace", "ab", "bisect"}
)
