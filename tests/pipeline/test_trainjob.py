"""The multi-node launcher (kfp/trainjob/job.py) against kmock's emulated Kubernetes API, with the TrainJob
resource of Kubeflow Trainer registered and the Trainer played by the test: it reads the TrainJob the
launcher created, creates node 0's pod (and other pods the launcher must not mistake for it), serves
the pods' logs and sets the TrainJob's status, as the Trainer's controller and the kubelet would.

The launcher runs in a thread with the real kubernetes client. Its manifest is checked twice: a round
trip through the kubeflow_trainer_api model, and the openAPIV3Schema (plus the name rules) of the Trainer's
own CRD, vendored in tests/data/ from Kubeflow Trainer 2.3.0. Every request the launcher sends must be
one the Role in docs/multinode.md grants (that Role is also checked against Kubernetes' schema).

The metrics file is tests/data/stack_run/metrics-ws2.json, read from a real run: what node 0 prints in
its log must come back as the same bytes in the results directory.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubeflow_trainer_api import models

from benchgate.config import RunConfig
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.trainjob.client import GROUP, PLURAL, VERSION, TrainJobs
from benchgate.kfp.trainjob.job import RUN_KEY, Nodes, launch, trainjob_manifest, trainjob_name
from benchgate.kfp.trainjob.placement import BENCH_POD, QUEUE_LABEL, exclusive_affinity
from benchgate.kit import log_payload

pytestmark = pytest.mark.asyncio

TESTS = Path(__file__).resolve().parents[1]
DOC = TESTS.parent / "docs" / "multinode.md"
CRD = yaml.safe_load((TESTS / "data" / "trainer.kubeflow.org_trainjobs.yaml").read_text(encoding="utf-8"))
REAL_METRICS = TESTS / "data" / "stack_run" / "metrics-ws2.json"
NAMESPACE = "team-a"
RUN_KEY_VALUE = "3f5e0b7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"  # a KFP run id
SOURCE = {
    "repository": "https://github.com/example/trainer.git",
    "commit": "0123456789abcdef" * 2 + "01234567",
}
NODES = Nodes(
    image="ghcr.io/benchgate/bench:0.1.0",
    gpus_per_node=1,
    cpu="2",
    memory="8Gi",
    node_selector={"cloud.google.com/gke-nodepool": "a100"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
)
TEST_CLIENT = {"User-Agent": "benchgate-tests"}
CONFIG = RunConfig.model_validate({"bench": {"steps": 30}})
# The Suspended condition as Kubeflow Trainer writes it (pkg/controller/trainjob_controller.go,
# setSuspendedCondition, with the reasons of pkg/apis/trainer/v1alpha1/trainjob_types.go): True with reason
# "Suspended" while spec.suspend is true (Kueue holds a queued TrainJob so), then False with reason
# "Resumed" once Kueue admits it and sets spec.suspend to false.
QUEUED = {"type": "Suspended", "reason": "Suspended", "message": "TrainJob is suspended"}
RESUMED = {"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed"}


def _jsonschema(node: Any) -> Any:
    """The CRD's OpenAPI schema as JSON Schema: unknown fields are errors (strict field validation),
    `nullable` allows null, vendor extensions dropped (their CEL rules are checked separately)."""
    if isinstance(node, list):
        return [_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes") and k != "nullable"}
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def crd_errors(manifest: dict[str, Any]) -> list[str]:
    """What the Trainer's CRD refuses of `manifest`: its schema, and its CEL rules on the name."""
    validator = jsonschema.Draft4Validator(_jsonschema(SCHEMA))
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(manifest)]
    rules = [r["rule"] for r in SCHEMA["x-kubernetes-validations"]]
    pattern = next(re.search(r"matches\('(.+)'\)", r) for r in rules if "matches" in r)
    assert pattern is not None and "size(self.metadata.name) <= 63" in rules, rules
    name = manifest["metadata"]["name"]
    if not re.fullmatch(pattern[1], name) or len(name) > 63:
        errors.append(f"metadata.name: {name!r} breaks the CRD's rules {rules}")
    return errors


def documented_rbac() -> list[dict[str, Any]]:
    """The YAML objects of docs/multinode.md (the launcher's Role and its binding)."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.M | re.S)
    return [o for block in blocks for o in yaml.safe_load_all(block) if o]


def refused_by_the_documented_role(kmock: Any) -> list[str]:
    """Every request the launcher sent that the documented Role does not grant."""
    role = next(o for o in documented_rbac() if o["kind"] == "Role")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    refused = []
    for request in list(kmock):
        if request.resource is None or request.headers.get("User-Agent") == TEST_CLIENT["User-Agent"]:
            continue
        method = str(getattr(request.method, "value", request.method)).upper()
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(method)
        verb = verb or ("get" if request.name else "list")
        resource = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
        if (request.resource.group or "", resource, verb) not in granted:
            refused.append(f"{verb} {request.resource.group or 'core'}/{resource}")
    return refused


def test_the_documented_role_and_binding_are_valid_kubernetes_objects() -> None:
    objects = documented_rbac()
    assert sorted(o["kind"] for o in objects) == ["Role", "RoleBinding"]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.33", strict=True)


@pytest.fixture
def trainer(kmock: Any) -> Any:
    """kmock with the core resources and Kubeflow Trainer's TrainJobs."""
    kmock.resources.load_bundled()
    kmock.resources[f"{GROUP}/{VERSION}/{PLURAL}"] = {
        "kind": "TrainJob",
        "namespaced": True,
        "verbs": {"list", "watch", "get", "create", "patch", "update", "delete"},
        "subresources": {"status"},
    }
    return kmock


class Cluster:
    """What the Trainer, the JobSet controller and the kubelet do, done by the test through the API."""

    def __init__(self, kmock: Any) -> None:
        self.kmock = kmock
        self.url = str(kmock.url).rstrip("/")

    def trainjobs(self) -> list[dict[str, Any]]:
        return [
            dict(obj.raw)
            for (resource, ns, _name), obj in self.kmock.objects.items()
            if resource.plural == PLURAL and ns == NAMESPACE and not obj.deleted
        ]

    async def wait(self, check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            value = check()
            if value:
                return value
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

    async def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {**TEST_CLIENT}
        if method == "PATCH":
            headers["Content-Type"] = "application/merge-patch+json"
        async with aiohttp.ClientSession(headers=headers) as http:
            response = await http.request(method, f"{self.url}{path}", json=body)
            assert response.status in (200, 201), await response.text()
            return dict(await response.json())

    async def create_trainjob(self, manifest: dict[str, Any]) -> None:
        await self.request("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}", manifest)

    async def node_pod(
        self, trainjob: str, index: int, log: str, jobset: str | None = None, age_s: int = 0
    ) -> str:
        """The pod of node `index` as the JobSet creates it (labels, completion index), created `age_s`
        seconds ago, with its log."""
        jobset = jobset or trainjob
        name = f"{jobset}-node-0-{index}-{age_s}x7k2p"
        created = datetime.now(UTC) - timedelta(seconds=age_s)
        labels = {
            "jobset.sigs.k8s.io/jobset-name": jobset,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "jobset.sigs.k8s.io/job-index": "0",
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": labels,
                "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            "spec": {"containers": [{"name": "node", "image": NODES.image}]},
            "status": {"phase": "Succeeded"},
        }
        await self.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
        self.kmock[f"get /api/v1/namespaces/{NAMESPACE}/pods/{name}/log"] << log.encode()
        return name

    async def set_status(self, name: str, condition: dict[str, Any]) -> None:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}/{name}/status"
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        full = {"status": "True", "lastTransitionTime": stamp, **condition}
        await self.request("PATCH", path, {"status": {"conditions": [full]}})


def rank0_log(metrics: bytes, name: str = "metrics-ws2.json") -> str:
    """Node 0's log as a real pod's would read: torchrun's and the ranks' lines, then the block."""
    return (
        "benchgate node 0/2: ranks 0-0 of 2, rank 0 at benchgate-ws2-x-node-0-0.benchgate-ws2-x:29500\n"
        "W1125 00:12:01.123000 41 torch/distributed/run.py:793] OMP_NUM_THREADS set for each process\n"
        + log_payload.encode(name, metrics)
        + "benchgate node: metrics-ws2.json printed above\n"
    )


def start_launch(
    tmp_path: Path, url: str, nodes: Nodes = NODES, **kwargs: Any
) -> tuple[asyncio.Task[Path], list[str]]:
    said: list[str] = []
    jobs = TrainJobs(NAMESPACE, host=url)
    options: dict[str, Any] = {"poll_s": 0.05, "say": said.append, **kwargs}
    call = asyncio.to_thread(
        launch, CONFIG, SOURCE, 2, tmp_path / "results", nodes, RUN_KEY_VALUE, jobs, **options
    )
    return asyncio.ensure_future(call), said


async def test_a_complete_trainjob_leaves_rank_0s_metrics_file_byte_for_byte(
    trainer: Any, tmp_path: Path
) -> None:
    cluster = Cluster(trainer)
    task, said = start_launch(tmp_path, cluster.url)
    created = (await cluster.wait(cluster.trainjobs, "the launcher's TrainJob"))[0]
    name = created["metadata"]["name"]
    assert name == trainjob_name(RUN_KEY_VALUE, 2)

    # What the API server would refuse, and what the Trainer's own model reads.
    assert crd_errors(created) == []
    assert models.TrainerV1alpha1TrainJob.from_dict(created).to_dict() == created
    spec = created["spec"]
    assert spec["runtimeRef"] == {"name": "torch-distributed"}
    trainer_spec = spec["trainer"]
    assert (trainer_spec["numNodes"], trainer_spec["numProcPerNode"]) == (2, 1)
    assert trainer_spec["resourcesPerNode"] == {  # exclusive by default: Guaranteed QoS
        "limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"},
        "requests": {"cpu": "2", "memory": "8Gi"},
    }
    assert "suspend" not in spec and QUEUE_LABEL not in created["metadata"]["labels"]  # no queue given
    assert trainer_spec["command"] == ["python", "-m", "benchgate.measure.node"]
    assert trainer_spec["args"][-4:] == ["--repository", SOURCE["repository"], "--commit", SOURCE["commit"]]
    config_env = next(e["value"] for e in trainer_spec["env"] if e["name"] == "BENCHGATE_RUN_CONFIG")
    assert RunConfig.model_validate_json(config_env).bench.steps == 30
    pod_patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod_spec = pod_patch["template"]["spec"]["template"]["spec"]
    assert pod_patch["name"] == "node"
    assert pod_spec["nodeSelector"] == NODES.node_selector
    assert pod_spec["tolerations"] == NODES.tolerations
    assert pod_spec["affinity"] == exclusive_affinity()
    assert pod_patch["template"]["spec"]["template"]["metadata"] == {"labels": {BENCH_POD: name}}
    assert pod_spec["containers"] == [
        {"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
    ]

    metrics = REAL_METRICS.read_bytes()
    # Node 0's pod, then pods whose logs hold other bytes: an older attempt of node 0 (its Job replaced
    # it), node 1 and node 0 of another TrainJob, both newer. Only the newest pod of node 0 of this
    # TrainJob is rank 0's (the emulator ignores label selectors: the launcher must check the labels).
    await cluster.node_pod(name, 0, rank0_log(metrics), age_s=30)
    await cluster.node_pod(name, 0, rank0_log(b'{"attempt": 1}\n'), age_s=90)
    await cluster.node_pod(name, 1, rank0_log(b'{"node": 1}\n'), age_s=10)
    other = "benchgate-ws2-0000other"
    await cluster.node_pod(name, 0, rank0_log(b'{"other": "trainjob"}\n'), jobset=other, age_s=5)
    await cluster.set_status(name, {"type": "Complete", "reason": "JobsCompleted", "message": "done"})

    written = await asyncio.wait_for(task, 30)
    listed = [
        r for r in trainer if r.method == "GET" and r.resource is not None and r.resource.plural == "pods"
    ]
    selector = "jobset.sigs.k8s.io/jobset-name={},jobset.sigs.k8s.io/replicatedjob-name=node"
    assert {r.params.get("labelSelector") for r in listed if not r.subresource} == {selector.format(name)}
    assert written == tmp_path / "results" / "metrics-ws2.json"
    assert written.read_bytes() == metrics
    assert (tmp_path / "results" / "logs" / "bench-ws2.log").read_text() == rank0_log(metrics)
    assert cluster.trainjobs() == []  # deleted at the end
    assert any("is Complete" in line for line in said), said
    assert refused_by_the_documented_role(trainer) == []


async def test_a_failed_trainjob_is_a_run_failure_naming_its_reason_and_it_is_deleted(
    trainer: Any, tmp_path: Path
) -> None:
    cluster = Cluster(trainer)
    task, _said = start_launch(tmp_path, cluster.url)
    name = (await cluster.wait(cluster.trainjobs, "the launcher's TrainJob"))[0]["metadata"]["name"]
    await cluster.node_pod(
        name, 0, "benchgate node 0/2: ranks 0-0 of 2\nbenchgate node: error: bench ws=2: rank 1 was killed\n"
    )
    await cluster.set_status(
        name,
        {
            "type": "Failed",
            "reason": "DeadlineExceeded",
            "message": "TrainJob exceeded its activeDeadlineSeconds",
        },
    )
    with pytest.raises(RunFailedError) as raised:
        await asyncio.wait_for(task, 30)
    message = str(raised.value)
    assert f"TrainJob {NAMESPACE}/{name} failed: DeadlineExceeded: TrainJob exceeded its" in message
    assert "benchgate node: error: bench ws=2: rank 1 was killed" in message  # node 0's last lines
    assert not (tmp_path / "results" / "metrics-ws2.json").exists()
    assert cluster.trainjobs() == []
    assert refused_by_the_documented_role(trainer) == []  # the log's tail included


async def test_a_retried_launcher_attaches_to_its_runs_trainjob(trainer: Any, tmp_path: Path) -> None:
    cluster = Cluster(trainer)
    # The first attempt's launcher created the TrainJob, and was killed before it could delete it.
    earlier = trainjob_manifest(
        trainjob_name(RUN_KEY_VALUE, 2), NAMESPACE, RUN_KEY_VALUE, 2, CONFIG, SOURCE, NODES, 1800
    )
    await cluster.create_trainjob(earlier)
    retried, said = start_launch(tmp_path, cluster.url)
    await cluster.wait(lambda: any("attached" in line for line in said), "the retried launcher to attach")
    assert [t["metadata"]["name"] for t in cluster.trainjobs()] == [earlier["metadata"]["name"]]
    creates = [
        r for r in trainer if r.method == "POST" and r.resource is not None and r.resource.plural == PLURAL
    ]
    assert len(creates) == 2  # the first attempt's, and the retried launcher's that was answered 409

    name = earlier["metadata"]["name"]
    await cluster.node_pod(name, 0, rank0_log(REAL_METRICS.read_bytes()))
    await cluster.set_status(name, {"type": "Complete", "reason": "JobsCompleted", "message": "done"})
    written = await asyncio.wait_for(retried, 30)
    assert written.read_bytes() == REAL_METRICS.read_bytes()
    assert cluster.trainjobs() == []
    assert refused_by_the_documented_role(trainer) == []  # the attach's read included


async def test_a_trainjob_of_the_same_name_from_elsewhere_is_left_alone(trainer: Any, tmp_path: Path) -> None:
    cluster = Cluster(trainer)
    name = trainjob_name(RUN_KEY_VALUE, 2)
    foreign = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": {RUN_KEY: "someone-else"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    await cluster.create_trainjob(foreign)
    task, _ = start_launch(tmp_path, cluster.url)
    with pytest.raises(ConfigError, match=r"exists, but not from this run .*someone-else.*left as it is"):
        await asyncio.wait_for(task, 30)
    assert [t["metadata"]["annotations"][RUN_KEY] for t in cluster.trainjobs()] == ["someone-else"]


async def test_a_trainjob_that_never_finishes_times_out_and_is_deleted(trainer: Any, tmp_path: Path) -> None:
    cluster = Cluster(trainer)
    task, _ = start_launch(tmp_path, cluster.url, timeout_s=0.5)
    name = (await cluster.wait(cluster.trainjobs, "the launcher's TrainJob"))[0]["metadata"]["name"]
    # Admitted and running (the Trainer's condition after a resume), but it never ends: stuck.
    await cluster.set_status(name, RESUMED)
    with pytest.raises(RunFailedError, match=r"did not finish within 0.5 s \(still Running\)"):
        await asyncio.wait_for(task, 30)
    assert cluster.trainjobs() == []


async def test_a_complete_trainjob_whose_log_lost_the_block_is_a_clear_failure(
    trainer: Any, tmp_path: Path
) -> None:
    cluster = Cluster(trainer)
    task, _ = start_launch(tmp_path, cluster.url)
    name = (await cluster.wait(cluster.trainjobs, "the launcher's TrainJob"))[0]["metadata"]["name"]
    cut = rank0_log(REAL_METRICS.read_bytes()).split("BENCHGATE-METRICS-END")[0]  # a log cut short
    pod = await cluster.node_pod(name, 0, cut)
    await cluster.set_status(name, {"type": "Complete", "reason": "JobsCompleted", "message": "done"})
    with pytest.raises(RunFailedError, match=rf"pod {pod}: no BENCHGATE-METRICS-BEGIN .* cut short"):
        await asyncio.wait_for(task, 30)
    assert cluster.trainjobs() == []


LAUNCHER = """
import sys
from pathlib import Path
from benchgate.kfp.trainjob.job import launch
from benchgate.kfp.trainjob.client import TrainJobs
from test_trainjob import CONFIG, NAMESPACE, NODES, RUN_KEY_VALUE, SOURCE
jobs = TrainJobs(NAMESPACE, host=sys.argv[1])
launch(CONFIG, SOURCE, 2, Path(sys.argv[2]), NODES, RUN_KEY_VALUE, jobs, poll_s=0.05)
"""


async def test_a_terminated_launcher_deletes_its_trainjob_on_the_way_out(
    trainer: Any, tmp_path: Path
) -> None:
    """KFP terminates a run's pods with SIGTERM: the launcher, in its own process as in its pod, must not
    leave the TrainJob holding its nodes until the deadline."""
    cluster = Cluster(trainer)
    here = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCHER, cluster.url, str(tmp_path / "results"), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    await cluster.wait(cluster.trainjobs, "the launcher's TrainJob")
    process.send_signal(signal.SIGTERM)
    output, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 128 + signal.SIGTERM, output.decode()
    assert cluster.trainjobs() == []
    assert b"deleted" in output


async def test_a_launcher_without_the_role_is_told_which_grant_is_missing(
    trainer: Any, tmp_path: Path
) -> None:
    cluster = Cluster(trainer)
    answer = {
        "kind": "Status",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": 'trainjobs.trainer.kubeflow.org is forbidden: User "system:serviceaccount:team-a:'
        'default-editor" cannot create resource "trainjobs" in API group "trainer.kubeflow.org" in the '
        'namespace "team-a"',
    }
    trainer[f"post /apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}"] << 403 << answer
    task, _ = start_launch(tmp_path, cluster.url)
    with pytest.raises(ConfigError) as raised:
        await asyncio.wait_for(task, 30)
    assert str(raised.value) == (
        f"creating TrainJob {NAMESPACE}/{trainjob_name(RUN_KEY_VALUE, 2)}: HTTP 403: {answer['message']} "
        "(the launcher's service account needs the Role in docs/multinode.md)"
    )


async def test_a_queued_trainjob_waits_in_its_queue_past_the_run_timeout_then_runs(
    trainer: Any, tmp_path: Path
) -> None:
    """Kueue holds the TrainJob suspended until its ClusterQueue has room: the launcher keeps waiting
    (its place in the queue kept) well past the run's own timeout, and times the run from admission."""
    cluster = Cluster(trainer)
    queued_nodes = replace(NODES, queue_name="gpu-queue")
    task, said = start_launch(tmp_path, cluster.url, timeout_s=0.5, nodes=queued_nodes)
    created = (await cluster.wait(cluster.trainjobs, "the launcher's TrainJob"))[0]
    name = created["metadata"]["name"]
    assert created["metadata"]["labels"][QUEUE_LABEL] == "gpu-queue"
    assert created["spec"]["suspend"] is True  # no pod starts before Kueue admits it
    assert crd_errors(created) == []
    await cluster.set_status(name, QUEUED)
    await cluster.wait(lambda: any("is Suspended" in line for line in said), "the launcher to see the queue")
    await asyncio.sleep(1.5)  # three times the run timeout, queued
    assert not task.done(), said
    assert cluster.trainjobs() != []
    assert any("queued: waiting for admission" in line for line in said), said
    await cluster.set_status(name, RESUMED)
    await cluster.node_pod(name, 0, rank0_log(REAL_METRICS.read_bytes()))
    await cluster.set_status(name, {"type": "Complete", "reason": "JobsCompleted", "message": "done"})
    written = await asyncio.wait_for(task, 30)
    assert written.read_bytes() == REAL_METRICS.read_bytes()
    assert cluster.trainjobs() == []


async def test_a_trainjob_never_admitted_gives_up_after_the_queue_timeout(
    trainer: Any, tmp_path: Path
) -> None:
    cluster = Cluster(trainer)
    queued_nodes = replace(NODES, queue_name="gpu-queue")
    task, _ = start_launch(tmp_path, cluster.url, queue_timeout_s=0.5, nodes=queued_nodes)
    name = (await cluster.wait(cluster.trainjobs, "the launcher's TrainJob"))[0]["metadata"]["name"]
    await cluster.set_status(name, QUEUED)
    with pytest.raises(RunFailedError, match=r"waited in its queue for more than 0.5 s .*still Suspended"):
        await asyncio.wait_for(task, 30)
    assert cluster.trainjobs() == []


def test_a_queue_name_that_is_no_label_value_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"queueName: got 'GPU queue!'"):
        trainjob_manifest(
            "n", NAMESPACE, RUN_KEY_VALUE, 2, CONFIG, SOURCE, replace(NODES, queue_name="GPU queue!"), 60
        )


def test_exclusive_placement_needs_cpu_and_memory_for_guaranteed_qos() -> None:
    with pytest.raises(ConfigError, match=r"exclusive placement: memory request not given"):
        trainjob_manifest("n", NAMESPACE, RUN_KEY_VALUE, 2, CONFIG, SOURCE, replace(NODES, memory=""), 60)
    shared = trainjob_manifest(
        "n", NAMESPACE, RUN_KEY_VALUE, 2, CONFIG, SOURCE, replace(NODES, exclusive=False), 60
    )
    assert shared["spec"]["trainer"]["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "1"}
    patch = shared["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][
        0
    ]
    assert "affinity" not in patch["template"]["spec"]["template"]["spec"]
    assert crd_errors(shared) == []


def test_the_launcher_pod_owns_its_trainjob(monkeypatch: pytest.MonkeyPatch) -> None:
    """An evicted launcher's TrainJob goes with it (garbage collection), not holding GPU nodes."""
    monkeypatch.setenv("BENCHGATE_POD_NAME", "benchgate-abc-bench-ws-n-launcher")
    monkeypatch.setenv("BENCHGATE_POD_UID", "5c1e0f8e-2b7a-4d9a-9a51-0d6b1e7c2f11")
    manifest = trainjob_manifest("n", NAMESPACE, RUN_KEY_VALUE, 2, CONFIG, SOURCE, NODES, 60)
    assert manifest["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "benchgate-abc-bench-ws-n-launcher",
            "uid": "5c1e0f8e-2b7a-4d9a-9a51-0d6b1e7c2f11",
        }
    ]
    assert crd_errors(manifest) == []
    monkeypatch.delenv("BENCHGATE_POD_UID")
    assert (
        "ownerReferences"
        not in trainjob_manifest("n", NAMESPACE, RUN_KEY_VALUE, 2, CONFIG, SOURCE, NODES, 60)["metadata"]
    )


async def test_the_trainjob_is_created_with_strict_field_validation(trainer: Any, tmp_path: Path) -> None:
    """An older Trainer that lacks a field refuses the TrainJob, and the launcher says what that means."""
    cluster = Cluster(trainer)
    answer = {
        "kind": "Status",
        "status": "Failure",
        "reason": "BadRequest",
        "code": 400,
        "message": 'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding error: '
        'unknown field "spec.trainer.numProcPerNode"',
    }
    trainer[f"post /apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}"] << 400 << answer
    task, _ = start_launch(tmp_path, cluster.url)
    with pytest.raises(ConfigError) as raised:
        await asyncio.wait_for(task, 30)
    assert 'unknown field "spec.trainer.numProcPerNode"' in str(raised.value)
    assert "the cluster's Kubeflow Trainer does not know these TrainJob fields" in str(raised.value)
    creates = [
        r for r in trainer if r.method == "POST" and r.resource is not None and r.resource.plural == PLURAL
    ]
    assert [r.params.get("fieldValidation") for r in creates] == ["Strict"]


def test_each_node_mounts_the_git_secret_for_a_private_repository() -> None:
    manifest = trainjob_manifest(
        "n", NAMESPACE, RUN_KEY_VALUE, 2, CONFIG, SOURCE, replace(NODES, git_secret="benchgate-git"), 60
    )
    patch = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"
    ][0]
    pod = patch["template"]["spec"]["template"]["spec"]
    assert {"name": "git-secret", "secret": {"secretName": "benchgate-git", "optional": True}} in pod[
        "volumes"
    ]
    assert {"name": "git-secret", "mountPath": "/var/run/secrets/benchgate/git"} in pod["containers"][0][
        "volumeMounts"
    ]
    assert crd_errors(manifest) == []
