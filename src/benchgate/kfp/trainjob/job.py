"""A bench whose world spans nodes, as a Kubeflow Trainer v2 TrainJob: its manifest, its phase, and
`launch`, which a pipeline task calls in place of the single-node bench.

The Trainer API (`trainer.kubeflow.org/v1alpha1`) is alpha and changed shape in 2.2; this module is the
only one that imports its models (`kubeflow_trainer_api`, a contract of `make lint`), so a new version
touches this file alone.

`launch` creates the TrainJob (each pod runs `python -m benchgate.measure.node`), waits for it to finish,
reads rank 0's metrics file from the log of node 0's pod and writes it where the single-node task writes
it (`results_dir/metrics-ws<N>.json`), byte for byte, so compare, A/B and publish read the same file.
It deletes the TrainJob when it ends, however it ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kubeflow_trainer_api import models

from benchgate.config import RunConfig
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.trainjob.client import GROUP, NODE, VERSION, TrainJobs, current_namespace
from benchgate.kfp.trainjob.placement import (
    BENCH_POD,
    exclusive_affinity,
    guaranteed,
    launcher_owner,
    queue_labels,
)
from benchgate.kit import log_payload
from benchgate.kit.files import write_text
from benchgate.kit.git_auth import GIT_SECRET_DIR
from benchgate.measure.launch import metrics_path
from benchgate.measure.node import CONFIG_VARIABLE

DEFAULT_RUNTIME = "torch-distributed"
MANAGER = "benchgate.dev/launcher"  # owns this launcher's runtime patch (node placement, /dev/shm)
RUN_KEY = "benchgate.dev/run-key"  # annotation: the pipeline run that created the TrainJob
WORLD_SIZE = "benchgate.dev/world-size"
GIT_VOLUME = "git-secret"
NODE_DIR = "/tmp/benchgate-node"  # each pod's working directory (the checkout, torchrun's files)
# Pulling a CUDA image onto fresh nodes and fetching the commit comes before the bench's own time limit.
STARTUP_S = 900
# How long a TrainJob may wait in a Kueue queue (Suspended) before the launcher gives up: a queue of GPU
# jobs moves in hours, and the time waiting there counts neither against the bench's timeout nor as stuck.
QUEUE_TIMEOUT_S = 24 * 3600
State = Literal["Running", "Complete", "Failed", "Suspended"]


@dataclass(frozen=True)
class Nodes:
    """The nodes a multi-node bench asks for: each gets `gpus_per_node` ranks, one per GPU."""

    image: str
    gpus_per_node: int
    runtime: str = DEFAULT_RUNTIME  # a ClusterTrainingRuntime of the torch framework
    accelerator: str = "nvidia.com/gpu"  # the GPU's resource name; "" on CPU nodes (tests)
    cpu: str = ""  # requests per node, e.g. "32", so the pods are not BestEffort
    memory: str = ""  # e.g. "256Gi"
    shm: str = "16Gi"  # /dev/shm in memory: NCCL's shared buffers outgrow a container's 64 MiB
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    queue_name: str = ""  # a Kueue LocalQueue: the TrainJob is created suspended, labelled for it
    # One bench per node and Guaranteed QoS (placement.py): on by default, as a node shared with another
    # job while timed measures the neighbour; needs cpu and memory.
    exclusive: bool = True
    git_secret: str = ""  # the git Secret (kit/git_auth.py), mounted on each node for a private repository


@dataclass(frozen=True)
class Phase:
    state: State
    reason: str = ""
    message: str = ""


def trainjob_name(run_key: str, world_size: int) -> str:
    """The TrainJob's name, the same for every attempt of one pipeline run's bench at `world_size`, so a
    retried launcher finds the TrainJob of the attempt before. An RFC 1035 label, and short: the pods'
    host names (`<name>-node-0-0`, rank 0's address) must stay within 63 characters too."""
    if not run_key:
        raise ConfigError("run key: got '' (the TrainJob's name derives from the pipeline run's id)")
    digest = hashlib.sha256(f"{run_key}/{world_size}".encode()).hexdigest()[:12]
    return f"benchgate-ws{world_size}-{digest}"


def trainjob_manifest(
    name: str,
    namespace: str,
    run_key: str,
    world_size: int,
    config: RunConfig,
    source: dict[str, str],
    nodes: Nodes,
    deadline_s: int,
) -> dict[str, Any]:
    """The TrainJob of a bench at `world_size` on `world_size / nodes.gpus_per_node` nodes."""
    if nodes.gpus_per_node < 1:
        raise ConfigError(f"gpus_per_node: got {nodes.gpus_per_node}, expected at least 1")
    if world_size % nodes.gpus_per_node:
        raise ConfigError(
            f"world size: got {world_size}, not a multiple of gpus_per_node={nodes.gpus_per_node} "
            "(every node runs the same number of ranks)"
        )
    cpu_memory, cpu_memory_limits = guaranteed(nodes.cpu, nodes.memory, nodes.exclusive)
    limits = {nodes.accelerator: _quantity(str(nodes.gpus_per_node))} if nodes.accelerator else {}
    limits.update({k: _quantity(v) for k, v in cpu_memory_limits.items()})
    requests = {k: _quantity(v) for k, v in cpu_memory.items()}
    labels = {"app.kubernetes.io/managed-by": "benchgate", WORLD_SIZE: str(world_size)}
    queue = queue_labels(nodes.queue_name)
    args = ["--world-size", str(world_size), "--out-dir", NODE_DIR]
    if source.get("commit"):
        args += ["--repository", source.get("repository", ""), "--commit", source["commit"]]
    mounts = [models.IoK8sApiCoreV1VolumeMount(name="dshm", mountPath="/dev/shm")]
    git_volumes = []
    if nodes.git_secret:  # optional, as on the pipeline's own tasks: a public repository needs none
        git_volumes.append(
            models.IoK8sApiCoreV1Volume(
                name=GIT_VOLUME,
                secret=models.IoK8sApiCoreV1SecretVolumeSource(secretName=nodes.git_secret, optional=True),
            )
        )
        mounts.append(models.IoK8sApiCoreV1VolumeMount(name=GIT_VOLUME, mountPath=str(GIT_SECRET_DIR)))
    pod = models.TrainerV1alpha1PodSpecPatch(
        affinity=models.IoK8sApiCoreV1Affinity.from_dict(exclusive_affinity()) if nodes.exclusive else None,
        nodeSelector=nodes.node_selector or None,
        tolerations=[models.IoK8sApiCoreV1Toleration.from_dict(t) for t in nodes.tolerations] or None,
        volumes=[
            models.IoK8sApiCoreV1Volume(
                name="dshm",
                emptyDir=models.IoK8sApiCoreV1EmptyDirVolumeSource(
                    medium="Memory", sizeLimit=_quantity(nodes.shm)
                ),
            ),
            *git_volumes,
        ],
        containers=[models.TrainerV1alpha1ContainerPatch(name=NODE, volumeMounts=mounts)],
    )
    patch = models.TrainerV1alpha1RuntimePatch(
        manager=MANAGER,
        trainingRuntimeSpec=models.TrainerV1alpha1TrainingRuntimeSpecPatch(
            template=models.TrainerV1alpha1JobSetTemplatePatch(
                spec=models.TrainerV1alpha1JobSetSpecPatch(
                    replicatedJobs=[
                        models.TrainerV1alpha1ReplicatedJobPatch(
                            name=NODE,
                            template=models.TrainerV1alpha1JobTemplatePatch(
                                spec=models.TrainerV1alpha1JobSpecPatch(
                                    template=models.TrainerV1alpha1PodTemplatePatch(
                                        metadata=models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
                                            labels={BENCH_POD: name}
                                        ),
                                        spec=pod,
                                    )
                                )
                            ),
                        )
                    ]
                )
            )
        ),
    )
    trainjob = models.TrainerV1alpha1TrainJob(
        apiVersion=f"{GROUP}/{VERSION}",
        kind="TrainJob",
        metadata=models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
            name=name,
            namespace=namespace,
            labels={**labels, **queue},
            annotations={RUN_KEY: run_key},
            ownerReferences=[
                models.IoK8sApimachineryPkgApisMetaV1OwnerReference.from_dict(o) for o in launcher_owner()
            ]
            or None,
        ),
        spec=models.TrainerV1alpha1TrainJobSpec(
            runtimeRef=models.TrainerV1alpha1RuntimeRef(name=nodes.runtime),
            # Kueue unsuspends it on admission; created suspended, no pod starts before that.
            suspend=True if queue else None,
            activeDeadlineSeconds=deadline_s,
            runtimePatches=[patch],
            trainer=models.TrainerV1alpha1Trainer(
                image=nodes.image,
                command=["python", "-m", "benchgate.measure.node"],
                args=args,
                env=[
                    models.IoK8sApiCoreV1EnvVar(
                        name=CONFIG_VARIABLE, value=json.dumps(config.model_dump(mode="json"), sort_keys=True)
                    ),
                    models.IoK8sApiCoreV1EnvVar(name="PYTHONUNBUFFERED", value="1"),
                ],
                numNodes=world_size // nodes.gpus_per_node,
                numProcPerNode=nodes.gpus_per_node,
                resourcesPerNode=models.IoK8sApiCoreV1ResourceRequirements(
                    limits=limits or None, requests=requests or None
                ),
            ),
        ),
    )
    manifest: dict[str, Any] = trainjob.to_dict()
    return manifest


def _quantity(value: str) -> models.IoK8sApimachineryPkgApiResourceQuantity:
    """A resource quantity ("16Gi", "8") as the models hold one."""
    return models.IoK8sApimachineryPkgApiResourceQuantity(value)


def phase_of(trainjob: dict[str, Any]) -> Phase:
    """Where a TrainJob stands, from its status conditions: a True `Failed` (with the Trainer's reason,
    e.g. DeadlineExceeded) or `Complete` ends it, a True `Suspended` waits (Kueue queues this way);
    anything else, a new TrainJob without status included, is Running."""
    conditions = {c.get("type"): c for c in (trainjob.get("status") or {}).get("conditions") or []}
    for state in ("Failed", "Complete", "Suspended"):
        condition = conditions.get(state)
        if condition is not None and condition.get("status") == "True":
            return Phase(state, str(condition.get("reason") or ""), str(condition.get("message") or ""))
    return Phase("Running")


def launch(
    config: RunConfig,
    source: dict[str, str],
    world_size: int,
    out_dir: Path,
    nodes: Nodes,
    run_key: str,
    jobs: TrainJobs | None = None,
    *,
    poll_s: float = 10.0,
    timeout_s: float | None = None,
    queue_timeout_s: float = QUEUE_TIMEOUT_S,
    say: Callable[[str], None] = print,
) -> Path:
    """Run the bench at `world_size` as a TrainJob in `jobs`' namespace (default: this pod's, through its
    service account); returns the metrics file written in `out_dir`, the bytes rank 0 wrote, beside node
    0's log (`logs/bench-ws<N>.log`, as the single-node bench keeps torchrun's). `source` is env.json's
    (repository, commit); `run_key` run.json's, the pipeline run's id. The TrainJob may run for
    bench.run_timeout_s plus STARTUP_S; the launcher waits `timeout_s` (default: that and 10 min more)
    for it to run, and besides that up to `queue_timeout_s` while it is Suspended in a Kueue queue
    (`nodes.queue_name`), before it gives up. A failed TrainJob is a RunFailedError naming its reason.

    A pipeline task calls it as `bench_task` calls `stage_bench`:

        config, env, out = start_task(setup_dir, results_dir)
        run_key = read_json(Path(setup_dir) / RUN_FILE)["run_key"]
        path = trainjob.launch(config, env["source"], world_size, out, Nodes(image, gpus_per_node), run_key)
    """
    jobs = jobs or TrainJobs(current_namespace())
    name = trainjob_name(run_key, world_size)
    deadline_s = int(config.bench.run_timeout_s) + STARTUP_S
    manifest = trainjob_manifest(name, jobs.namespace, run_key, world_size, config, source, nodes, deadline_s)
    where = jobs.where(name)
    ours = True  # from before the create is sent: a TrainJob it made before failing is deleted too
    with _sigterm_unwinds():
        try:
            if jobs.create(manifest):
                count = manifest["spec"]["trainer"]["numNodes"]
                say(f"benchgate bench: created {where}: {count} nodes x {nodes.gpus_per_node} ranks")
            else:
                ours = False
                _attach(jobs, name, run_key)
                ours = True
                say(f"benchgate bench: {where} exists from an earlier attempt of this run: attached to it")
            limit_s = deadline_s + 600 if timeout_s is None else timeout_s
            phase = _wait(jobs, name, poll_s, limit_s, say, queue_timeout_s)
            pod = jobs.rank0_pod(name)
            if phase.state == "Failed":
                raise RunFailedError(_failure(where, phase, jobs, pod))
            if pod is None:
                raise RunFailedError(f"{where} is Complete, but node 0's pod is gone: its metrics are lost")
            pod_name = pod["metadata"]["name"]
            log = jobs.log(pod_name)
            write_text(out_dir / "logs" / f"bench-ws{world_size}.log", log)
            payload = log_payload.decode(log, f"{where}: pod {pod_name}")
            out = metrics_path(out_dir, world_size)
            if payload.name != out.name:
                raise RunFailedError(f"{where}: rank 0 printed {payload.name}, expected {out.name}")
            return write_text(out, payload.data.decode("utf-8"))
        finally:
            if ours:
                _delete(jobs, name, say)


def _attach(jobs: TrainJobs, name: str, run_key: str) -> None:
    """Attach to an existing TrainJob only when this pipeline run created it (its run-key annotation):
    it is then this run's to wait for and to delete. Anyone else's is left alone."""
    existing = jobs.get(name) or {}
    theirs = ((existing.get("metadata") or {}).get("annotations") or {}).get(RUN_KEY)
    if theirs != run_key:
        raise ConfigError(
            f"{jobs.where(name)} exists, but not from this run ({RUN_KEY}={theirs!r}, this run: "
            f"{run_key!r}): left as it is; delete it to run this bench"
        )


def _delete(jobs: TrainJobs, name: str, say: Callable[[str], None]) -> None:
    """Delete the TrainJob on the way out; a refusal is said, not raised over the bench's own outcome."""
    try:
        deleted = jobs.delete(name)
    except (ConfigError, RunFailedError) as e:
        say(f"benchgate bench: warning: {jobs.where(name)} is left behind: {e}")
        return
    say(f"benchgate bench: {jobs.where(name)} {'deleted' if deleted else 'was gone already'}")


def _wait(
    jobs: TrainJobs,
    name: str,
    poll_s: float,
    timeout_s: float,
    say: Callable[[str], None],
    queue_timeout_s: float = QUEUE_TIMEOUT_S,
) -> Phase:
    """Poll the TrainJob until it is Complete or Failed; say each change of state once. Time spent
    Suspended (queued: Kueue has not admitted it yet) counts against `queue_timeout_s` only, the rest
    against `timeout_s`, so a TrainJob waiting its turn keeps its place in the queue instead of being
    deleted as stuck after the bench's own timeout."""
    running_s = queued_s = 0.0
    last = time.monotonic()
    seen: Phase | None = None
    while True:
        trainjob = jobs.get(name)
        if trainjob is None:
            raise RunFailedError(f"{jobs.where(name)} was deleted while the bench ran (by someone else)")
        phase = phase_of(trainjob)
        now = time.monotonic()
        if seen is not None and seen.state == "Suspended":
            queued_s += now - last
        else:
            running_s += now - last
        last = now
        if phase != seen:
            detail = f": {phase.reason} {phase.message}".rstrip() if phase.reason or phase.message else ""
            waits = " (queued: waiting for admission, not a failure)" if phase.state == "Suspended" else ""
            say(f"benchgate bench: {jobs.where(name)} is {phase.state}{detail}{waits}")
            seen = phase
        if phase.state in ("Complete", "Failed"):
            return phase
        if phase.state == "Suspended" and queued_s > queue_timeout_s:
            raise RunFailedError(
                f"{jobs.where(name)} waited in its queue for more than {queue_timeout_s:g} s without being "
                f"admitted (still Suspended{': ' + phase.reason if phase.reason else ''}): is the "
                "ClusterQueue's quota large enough for its nodes? (docs/kubernetes.md, Clusters that "
                "queue GPUs)"
            )
        if phase.state != "Suspended" and running_s > timeout_s:
            raise RunFailedError(
                f"{jobs.where(name)} did not finish within {timeout_s:g} s (still {phase.state}"
                f"{': ' + phase.reason if phase.reason else ''})"
            )
        time.sleep(poll_s)


def _failure(where: str, phase: Phase, jobs: TrainJobs, pod: dict[str, Any] | None) -> str:
    """The TrainJob's failure, with the end of node 0's log when it can still be read."""
    message = f"{where} failed: {phase.reason or 'no reason given'}: {phase.message or 'no message'}"
    if pod is not None:
        with contextlib.suppress(ConfigError, RunFailedError):
            tail = jobs.log(pod["metadata"]["name"], tail_lines=15).rstrip()
            if tail:
                message += f"\n  node 0 ({pod['metadata']['name']}), last lines of its log:\n{tail}"
    return message


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (KFP terminating the run, a pod eviction) raises SystemExit, so the TrainJob is deleted on
    the way out instead of holding its nodes until its deadline. Only the main thread receives signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
