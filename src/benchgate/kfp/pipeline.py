"""The `benchgate` pipeline: the gate as KFP tasks. `benchgate run` runs this same definition locally.

    capture-env ─► bench ws=1 ─► bench ws=N ─┬─► evaluate ─┐
                                             └─► trace     ├─► compare ─┬─ verdict final ───────────► gate
                                                           │            └─ timing undecided ─► A/B ─┐
                                                                                                    │
                                                                                  gate ◄─ publish ◄─┘
    capture-env ─► baseline ─► evaluate (the stored baseline's eval, read from MLflow, or from the
    baseline volume where MLflow is unreachable or unused, by a trusted task)

    Trust: capture-env, the benches, evaluate, trace and A/B run the code under test
    (components.USER_CODE_COMPONENTS) and get neither the MLflow secret nor the baseline volume;
    baseline, compare, publish and gate run benchgate's code only, hold the secret, and read the others'
    artifacts as untrusted input (kfp/trusted.py). baseline caches MLflow's baseline for evaluate, whose
    seed band needs its eval (measure/seeds.py).

Why this shape:
- The benches run one after the other, and eval and trace after them: tasks sharing a GPU node while
  one of them is timed would make the timing measure the neighbour.
- capture-env asks for N GPUs on the GPU pool, so the machine profile it records (GPU model *and count*,
  driver, CUDA, NCCL) is that of the machine the ws=N bench runs on, not of some CPU node.
- compare screens the run against the stored baseline. Where the screen does not PASS a world size's
  timing and the base code can be checked out (`base_commit`, by default the commit of the profile's
  baseline run in MLflow), the `ab` task benchmarks base and candidate side by side, steps alternating,
  on one node, and its decision replaces the screen's. A trusted task publishes the final verdict
  (compare, or `publish` after the A/B, which runs user code and so publishes nothing): HTML report,
  baseline policy, and the MLflow parent and child runs.
  Both branches end in `gate`, which fails the run on FAIL or UNKNOWN so the KFP UI shows it red after
  all of that is done.
- MLflow is the source of baselines and history: compare takes the newest run marked baseline for this
  machine profile and caches it in the directory store. The store and the spool of runs not yet logged
  need no shared disk. By default (`baseline_pvc` empty) no volume is mounted and compare and publish keep
  them in pod-local directories, so any number of runs go at once on any nodes. A run MLflow did not
  take is kept in the publishing task's `results` artifact under `spool/`, in the pipeline root's
  object store, for `benchgate sync --from`. With `baseline_pvc` set, compare and publish mount that
  PersistentVolumeClaim at /mnt/benchgate and keep the stores there: a cache that outlives the pod and
  the fallback while MLflow is unreachable (ReadWriteMany, or one node at a time with ReadWriteOnce).
  The choice is a `dsl.If` on the parameter around the compare -> (A/B) -> gate tail.
- Nothing is cached: a cached bench would report an old commit's timings.
- A world size across nodes (`multi_node`, docs/multinode.md): the ws=N bench is then a CPU-only
  launcher task, `bench ws=N (TrainJob)`, which runs it as a Kubeflow Trainer TrainJob of
  world_size_n / gpus_per_node nodes and writes the same metrics-ws<N>.json. The condition is a
  `dsl.If` on the parameter around the whole run, the single-node branch first: the env task's GPU count
  differs (one node's, gpus_per_node), and kfp.local (2.17) cannot merge the artifacts of exclusive
  branches (`dsl.OneOf` of artifacts), so each branch holds its own downstream tasks. A/B stays on one
  node: across nodes it decides ws=1 only. `benchgate run` runs `local_pipeline`, built without that
  branch (it cannot be taken without a cluster), so a local run compiles half of the cluster's graph.

Platform settings come from parameters (kfp-kubernetes): the accelerator resource and count, the GPU
pool's node selector and tolerations, the GPU pods' CPU and memory requests, the MLflow credentials
secret (optional: the run starts without it) and, optionally, the PersistentVolumeClaim for the baseline
cache and spool.

Pod resources: a pod with no CPU or memory request is BestEffort, the first evicted under memory
pressure and the last served CPU while it is being timed, so every task asks for some. The GPU tasks
ask for `gpu_cpu_request` and `gpu_memory_request` (defaults in kfp/params.py, sized for the default
ws=8 on an 8-GPU node), compare and gate for LIGHT_CPU_REQUEST and LIGHT_MEMORY_REQUEST. No memory
limit is set: a training run that outgrows one is OOM-killed mid-measurement, and KFP's driver cannot
leave out a limit given as an empty parameter. Each GPU task mounts a memory-backed emptyDir at /dev/shm
(the container runtime's own is 64 MiB): NCCL between the ranks of one pod and DataLoader workers pass
data through it. Its pages count as the pod's memory, against `gpu_memory_request`; SHM_SIZE_LIMIT caps
it (kfp-kubernetes takes the size at compile time only, so it is no parameter).
"""

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from kfp import dsl, kubernetes
from kfp.dsl.graph_component import GraphComponent

from benchgate.config import DEFAULT_WORKLOAD, RunConfig
from benchgate.kfp import components as c
from benchgate.kfp.params import (
    CLUSTER_BASELINE_DIR,
    CLUSTER_BASELINE_MOUNT,
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_TRAINER_RUNTIME,
    DEFAULT_WORLD_SIZE_N,
    GPU_CPU_REQUEST,
    GPU_MEMORY_REQUEST,
    SHM_SIZE_LIMIT,
    config_from_parameters,
)
from benchgate.kfp.suite_entry import apply_entry, read_entry
from benchgate.kfp.trainjob.placement import POD_NAME_VARIABLE, POD_UID_VARIABLE
from benchgate.kit.git_auth import GIT_SECRET_DIR

PIPELINE_NAME = "benchgate"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SHM_VOLUME = "dshm"
# compare and gate: MLflow, a report, a verdict; a small request keeps them out of BestEffort too.
LIGHT_CPU_REQUEST = "500m"
LIGHT_MEMORY_REQUEST = "1Gi"
MLFLOW_SECRET_KEYS = {
    "username": "MLFLOW_TRACKING_USERNAME",
    "password": "MLFLOW_TRACKING_PASSWORD",
    "token": "MLFLOW_TRACKING_TOKEN",
}


def on_gpu_pool(
    task: dsl.PipelineTask,
    count: Any,
    *,
    accelerator_type: Any,
    node_selector: Any,
    tolerations: Any,
    cpu_request: Any,
    memory_request: Any,
) -> dsl.PipelineTask:
    """`task`'s pod on the GPU pool (each setting a pipeline parameter's channel): `count` GPUs, CPU and
    memory requests (not BestEffort), a memory-backed /dev/shm of up to SHM_SIZE_LIMIT."""
    task.set_accelerator_type(accelerator_type).set_accelerator_limit(count)
    task.set_cpu_request(cpu_request).set_memory_request(memory_request)
    kubernetes.empty_dir_mount(
        task, volume_name=SHM_VOLUME, mount_path="/dev/shm", medium="Memory", size_limit=SHM_SIZE_LIMIT
    )
    kubernetes.add_node_selector_json(task, node_selector)
    kubernetes.add_toleration_json(task, tolerations)
    return task


DESCRIPTION = (
    "Benchmark PyTorch training at ws=1 and ws=N, evaluate, trace, and gate regressions against the "
    "baseline of the same machine profile."
)


def _define(one_node_only: bool) -> Callable[..., None]:
    """The pipeline function, to be decorated by `dsl.pipeline` (which builds the graph by running it).

    `one_node_only` leaves out the multi-node branch: a local run can never take it (no cluster, no
    TrainJob), and each branch holds the whole run, so building it would double what every local run
    compiles. The parameters are the same either way."""

    def benchgate(
        commit: str = "",
        repository: str = "",
        branch: str = "",
        base_commit: str = "",
        workload: str = DEFAULT_WORKLOAD,
        workload_args: str = "{}",
        world_size_n: int = DEFAULT_WORLD_SIZE_N,
        steps: int = 60,
        warmup: int = 10,
        tolerances: dict = {},  # noqa: B006 - KFP reads parameter defaults as literals
        update_baseline: str = "auto",
        baseline_dir: str = CLUSTER_BASELINE_DIR,
        baseline_pvc: str = "",
        accelerator_type: str = "nvidia.com/gpu",
        gpu_node_selector: dict = {},  # noqa: B006
        gpu_tolerations: list = [GPU_TOLERATION],  # noqa: B006
        gpu_cpu_request: str = GPU_CPU_REQUEST,
        gpu_memory_request: str = GPU_MEMORY_REQUEST,
        mlflow_tracking_uri: str = "",
        mlflow_secret: str = "benchgate-mlflow",
        multi_node: bool = False,
        gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
        trainer_runtime: str = DEFAULT_TRAINER_RUNTIME,
        config: dict = {},  # noqa: B006
        suite_entry: str = "",
        queue_name: str = "",
        git_secret: str = "benchgate-git",
    ) -> None:
        """The benchgate gate on one commit.

        Args:
            commit: Full SHA of `repository` to benchmark (empty: the code in the image).
            repository: Git URL of the code under test.
            branch: The commit's branch (baselines update on main).
            base_commit: Full SHA of the base for A/B timing (empty: the profile's baseline run's commit).
            workload: Workload factory as 'module:function'.
            workload_args: The workload factory's keyword arguments as a JSON object, e.g.
                {"hidden": 512, "size": "tiny"}. Each keeps its JSON type: 512 is an int, 512.0 a float,
                "512" a string, true a boolean.
            world_size_n: GPUs of the ws=N task (1: ws=1 only).
            steps: Measured training steps per world size (at least 3).
            warmup: Steps run before measuring.
            tolerances: What counts as a regression, as benchgate's gate.tolerances, e.g.
                {"throughput_drop_pct": 5}.
            update_baseline: auto (on main, when the timing passes), always or never.
            gpu_cpu_request: CPU request of each GPU task's pod, a Kubernetes quantity ("8", "7500m").
            gpu_memory_request: Memory request of each GPU task's pod, a Kubernetes quantity ("32Gi"); the
                task's /dev/shm (up to 16Gi) counts against it.
            multi_node: Run ws=N across nodes as a Kubeflow Trainer TrainJob (docs/multinode.md); true
                only with world_size_n larger than, and a multiple of, gpus_per_node. `benchgate submit`
                sets it when gpus_per_node is given and world_size_n is larger.
            gpus_per_node: GPUs of one node, each multi-node pod's (and the env task's) GPU count.
            trainer_runtime: The ClusterTrainingRuntime of the TrainJob (torch framework).
            config: Any other benchgate setting, shaped like the TOML file, e.g. {"eval": {"enabled":
                false}}; the named parameters win, and workload arguments go in workload_args.
            suite_entry: One entry of a suite as a JSON object (kfp/suite_entry.py), set by the
                benchgate-suite pipeline: its workload, arguments and config replace these, its results
                are stored under its name, and the gate records its verdict without failing the run.
                Empty outside a suite.
            queue_name: The Kueue LocalQueue that admits the multi-node TrainJob (docs/kubernetes.md,
                "Clusters that queue GPUs"); empty: none.
            git_secret: The Secret with git's credentials for a private repository (an ssh key and
                known_hosts, or an https token), mounted where benchgate's git looks (optional).
        """

        def on_gpus(task: dsl.PipelineTask, count: object) -> dsl.PipelineTask:
            return on_gpu_pool(
                task,
                count,
                accelerator_type=accelerator_type,
                node_selector=gpu_node_selector,
                tolerations=gpu_tolerations,
                cpu_request=gpu_cpu_request,
                memory_request=gpu_memory_request,
            )

        def on_cpu(task: dsl.PipelineTask) -> dsl.PipelineTask:
            task.set_cpu_request(LIGHT_CPU_REQUEST).set_memory_request(LIGHT_MEMORY_REQUEST)
            # The bench image says NVIDIA_VISIBLE_DEVICES=all (the NVIDIA container convention): on a node
            # whose default runtime is NVIDIA's, a pod that asked for no GPU would be given all of them.
            return task.set_env_variable("NVIDIA_VISIBLE_DEVICES", "void")

        def common(task: dsl.PipelineTask, name: str) -> dsl.PipelineTask:
            # No tracking credential here: user-code tasks go through this alone (see "Who holds the
            # tracking credential" in docs/kubernetes.md); the trusted ones add `trusted`. Every task
            # may fetch the commit under test, so each mounts git's read credential for a private
            # repository (docs/kubernetes.md, "Private repositories": a read-only deploy key).
            kubernetes.use_secret_as_volume(task, git_secret, mount_path=str(GIT_SECRET_DIR), optional=True)
            return task.set_display_name(name).set_caching_options(False)

        def trusted(task: dsl.PipelineTask) -> dsl.PipelineTask:
            """A task that runs benchgate's code only (none of components.USER_CODE_COMPONENTS): it may
            hold the MLflow credential."""
            kubernetes.use_secret_as_env(task, mlflow_secret, MLFLOW_SECRET_KEYS, optional=True)
            return task

        def gate_run(across_nodes: bool) -> None:
            """The whole run; with `across_nodes` the ws=N bench is a TrainJob, and every GPU pod here asks
            for one node's GPUs (gpus_per_node) or fewer, never world_size_n."""
            node_gpus = gpus_per_node if across_nodes else world_size_n
            env = c.capture_env(
                config=config,
                workload=workload,
                workload_args=workload_args,
                world_size_n=world_size_n,
                steps=steps,
                warmup=warmup,
                tolerances=tolerances,
                update_baseline=update_baseline,
                baseline_dir=baseline_dir,
                mlflow_tracking_uri=mlflow_tracking_uri,
                repository=repository,
                commit=commit,
                branch=branch,
                base_commit=base_commit,
                # The run's key in MLflow: resolved by KFP (and kfp.local) to this pipeline run's id.
                kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                kfp_run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
                multi_node=across_nodes,
                gpus_per_node=gpus_per_node,
                suite_entry=suite_entry,
            )
            on_gpus(common(env, "env"), node_gpus)
            setup = env.outputs["setup"]

            bench_1 = on_gpus(common(c.bench(setup=setup, world_size=1, skip_if_one=False), "bench ws=1"), 1)
            if across_nodes:
                # A launcher: the nodes' pods are the TrainJob's, this one only creates and follows it.
                launcher = c.bench_multinode(
                    setup=setup,
                    world_size=world_size_n,
                    gpus_per_node=gpus_per_node,
                    trainer_runtime=trainer_runtime,
                    image=c.BENCH_IMAGE,
                    accelerator_type=accelerator_type,
                    gpu_node_selector=gpu_node_selector,
                    gpu_tolerations=gpu_tolerations,
                    gpu_cpu_request=gpu_cpu_request,
                    gpu_memory_request=gpu_memory_request,
                    queue_name=queue_name,
                    git_secret=git_secret,
                )
                # The launcher pod owns its TrainJob (an evicted launcher does not orphan GPU nodes).
                kubernetes.use_field_path_as_env(launcher, POD_NAME_VARIABLE, "metadata.name")
                kubernetes.use_field_path_as_env(launcher, POD_UID_VARIABLE, "metadata.uid")
                bench_n = on_cpu(common(launcher, "bench ws=N (TrainJob)")).after(bench_1)
            else:
                bench_n = on_gpus(
                    common(c.bench(setup=setup, world_size=world_size_n, skip_if_one=True), "bench ws=N"),
                    world_size_n,
                ).after(bench_1)
            profile = on_gpus(common(c.trace(setup=setup), "trace"), 1).after(bench_n)

            def judged(volume: bool) -> None:
                """baseline -> eval, compare -> (A/B -> publish) -> gate; with `volume`, the trusted
                baseline, compare and publish mount the baseline_pvc volume (eval and A/B run user
                code: never)."""

                def stores(task: dsl.PipelineTask) -> dsl.PipelineTask:
                    if volume:
                        kubernetes.mount_pvc(task, baseline_pvc, CLUSTER_BASELINE_MOUNT)
                    return task

                # Trusted: reads the stored baseline's eval (MLflow's, or the volume's store where MLflow
                # is unreachable or not used), which eval (user code) may not reach; eval reads its copy.
                cached = c.baseline(setup=setup, baseline_pvc=baseline_pvc)
                cached = stores(trusted(on_cpu(common(cached, "baseline"))))
                evaluation = on_gpus(
                    common(c.evaluate(setup=setup, baseline=cached.outputs["store"]), "eval"), 1
                ).after(bench_n)
                screened = c.compare(
                    setup=setup,
                    bench_1=bench_1.outputs["results"],
                    bench_n=bench_n.outputs["results"],
                    evaluation=evaluation.outputs["results"],
                    trace=profile.outputs["trace"],
                    # The task keeps its stores under the volume's mount, or pod-local without one.
                    baseline_pvc=baseline_pvc,
                    multi_node=across_nodes,
                    # The parameters again, as env had them: compare checks the setup against them.
                    config=config,
                    workload=workload,
                    workload_args=workload_args,
                    world_size_n=world_size_n,
                    steps=steps,
                    warmup=warmup,
                    tolerances=tolerances,
                    update_baseline=update_baseline,
                    baseline_dir=baseline_dir,
                    mlflow_tracking_uri=mlflow_tracking_uri,
                    suite_entry=suite_entry,
                )
                compared = stores(trusted(on_cpu(common(screened, "compare"))))
                with dsl.If(compared.outputs["ab_world_sizes"] == "", name="verdict final"):
                    trusted(on_cpu(common(c.gate(results=compared.outputs["results"]), "gate")))
                with dsl.Else(name="timing undecided: A/B"):
                    # Across nodes, A/B decides ws=1 only (compare hands it no other): one GPU is enough.
                    ab_gpus = 1 if across_nodes else world_size_n
                    decided = on_gpus(
                        common(
                            c.ab(
                                setup=setup,
                                compared=compared.outputs["results"],
                                world_sizes=compared.outputs["ab_world_sizes"],
                                base_commit=compared.outputs["base_commit"],
                                # KFP 2.17 threads a pipeline parameter into a condition's sub-DAG only
                                # when a component input uses it; the pod settings of on_gpus need these.
                                gpus=ab_gpus,
                                accelerator_type=accelerator_type,
                                gpu_cpu_request=gpu_cpu_request,
                                gpu_memory_request=gpu_memory_request,
                            ),
                            "A/B",
                        ),
                        ab_gpus,
                    )
                    published = c.publish(
                        setup=setup,
                        compared=compared.outputs["results"],
                        decided=decided.outputs["results"],
                        baseline_pvc=baseline_pvc,
                    )
                    published = stores(trusted(on_cpu(common(published, "publish"))))
                    trusted(on_cpu(common(c.gate(results=published.outputs["results"]), "gate (A/B)")))

            # The baseline volume is optional: MLflow holds baselines and history, the stores are its cache.
            # The branch without one comes first, so its tasks keep the plain names (compare, ab, gate) that
            # a local run's task directories have always had.
            with dsl.If(baseline_pvc == "", name="no volume: pod-local stores"):
                judged(volume=False)
            with dsl.Else(name="baseline volume"):
                judged(volume=True)

        if one_node_only:
            gate_run(across_nodes=False)
            return
        # One node first, for the same reason: its tasks keep the plain names of a local run's.
        # Each branch is the whole run: the env task's GPU count differs (the pod must be one the ws=N bench
        # could run on), and kfp.local cannot merge artifacts of exclusive branches (dsl.OneOf), so nothing
        # downstream of the bench reads across a condition.
        with dsl.If(multi_node == False, name="one node"):  # noqa: E712 - a KFP condition, not a Python test
            gate_run(across_nodes=False)
        with dsl.Else(name="across nodes: TrainJob"):
            gate_run(across_nodes=True)

    return benchgate


# Built on first use, not at import: `dsl.pipeline` runs the function to build the graph (about 1 s for
# the cluster pipeline), which a light task or the controller's start need not pay.
@functools.cache
def cluster_pipeline() -> GraphComponent:
    """The pipeline `benchgate compile`, `benchgate submit` and the controller send to KFP."""
    return dsl.pipeline(name=PIPELINE_NAME, description=DESCRIPTION)(_define(one_node_only=False))


@functools.cache
def local_pipeline() -> GraphComponent:
    """The same pipeline without the multi-node branch, which `benchgate run` runs through kfp.local."""
    return dsl.pipeline(name=PIPELINE_NAME, description=DESCRIPTION)(_define(one_node_only=True))


def parameter_names() -> set[str]:
    """The pipeline's parameters (without building it)."""
    return set(inspect.signature(_define(one_node_only=False)).parameters)


def validate_pipeline_arguments(arguments: Mapping[str, Any]) -> RunConfig:
    """The config a pipeline run with `arguments` gets (the pipeline's defaults for the rest).

    This is the env task's first check, made before submitting, so that a bad `--param` is refused
    with exit 2 on the command line instead of failing the run on the cluster.
    """
    declared = inspect.signature(_define(one_node_only=False)).parameters
    merged = {name: p.default for name, p in declared.items()} | dict(arguments)
    wanted = inspect.signature(config_from_parameters).parameters
    parameters = {name: merged[name] for name in wanted}
    if merged["suite_entry"]:
        parameters = apply_entry(parameters, read_entry(merged["suite_entry"]))
    return config_from_parameters(**parameters)
