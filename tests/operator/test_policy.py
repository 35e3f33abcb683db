"""The admin policy through the real controller (kopf, kmock's API, the FAKE KFP server): a run outside
it is refused before KFP hears of it, with the Admitted condition and one Warning Event; a promotion
where none is allowed runs as `never`; only a run a schedule really made counts as the schedule's; the
policy's default deadline ends a run that sets none; and the chart renders the policy `benchgate policy
check` derives from the same values."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from kmock import action
from operator_harness import Cluster, run_manifest

from benchgate.cli.policy import CHART_DIR, chart_values
from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.decide.admin_policy import Policy
from benchgate.controller.decide.policy_values import policy_from_values, policy_json
from benchgate.controller.decide.schedule import SCHEDULE_LABEL
from benchgate.controller.spec.resources import Toleration

pytestmark = pytest.mark.asyncio

GPU = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
BOUNDED = Policy(
    repositories=("https://github.com/example/",),
    tolerations=(GPU,),
    pvcs={"team-a": ("bench-cache",)},
    max_gpus_per_node=8,
)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [c for c in status.get("conditions", []) if c["type"] == kind]
    return dict(found)


def events_posted(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    """Every Event the controller posted about object `name`, from the emulator's request log."""
    return [
        dict(request.data)
        for request in list(cluster.kmock)
        if request.resource is not None
        and request.resource.plural == "events"
        and request.action == action.CREATE
        and request.data.get("involvedObject", {}).get("name") == name
    ]


def parameters_of(cluster: Cluster, name: str) -> dict[str, Any]:
    """The pipeline parameters the run `name` was submitted to KFP with."""
    run_name = cluster.status(name)["kfpRunName"]
    (body,) = [b for b in cluster.kfp.created_runs if b["display_name"] == run_name]
    return dict(body["runtime_config"]["parameters"])


@pytest.mark.parametrize("cluster", [{"policy": BOUNDED}], indirect=True)
async def test_runs_outside_the_policy_fail_before_kfp_hears_of_them(cluster: Cluster) -> None:
    # name: (spec, the condition's reason, the start of its message: the field and the value)
    refused = {
        "elsewhere": (
            {"repository": "https://github.com/example-evil/trainer.git"},
            "RepositoryNotAllowed",
            "spec.repository: got 'https://github.com/example-evil/trainer.git'",
        ),
        "too-wide": (
            {"worldSize": 16},
            "WorldSizeExceedsNode",
            "spec.worldSize: got 16 (a world size must fit",
        ),
        "any-taint": (
            {"tolerations": [{"operator": "Exists"}]},
            "TolerationNotAllowed",
            'spec.tolerations[0]: got {"operator": "Exists"}',
        ),
        "other-pvc": (
            {"baselinePvc": "kfp-artifacts"},
            "PvcNotAllowed",
            "spec.baselinePvc: got 'kfp-artifacts'",
        ),
    }
    for name, (spec, _, _) in refused.items():
        await cluster.create(run_manifest(name, **spec))
    await cluster.create(run_manifest("inside", worldSize=8, baselinePvc="bench-cache"))
    for name, (_, reason, message) in refused.items():
        status = await cluster.phase(name, "Failed")
        admitted = condition(status, "Admitted")
        assert (admitted["status"], admitted["reason"]) == ("False", reason)
        assert admitted["message"].startswith(message), admitted["message"]
        assert condition(status, "Finished")["status"] == "True"
    # The run inside the policy is the only one KFP ever saw.
    await cluster.phase("inside", "Running")
    assert condition(cluster.status("inside"), "Admitted")["reason"] == "PolicyAllowed"
    assert [b["display_name"] for b in cluster.kfp.created_runs] == [cluster.status("inside")["kfpRunName"]]
    # One Warning Event per refused run, not one per look: refused for good, never retried.
    await cluster.wait(lambda: cluster.kfp.calls("GET", "/runs/") >= 3, what="a few looks at the run inside")
    for name, (_, reason, _) in refused.items():
        (event,) = events_posted(cluster, name)
        assert (event["type"], event["reason"]) == ("Warning", reason)


@pytest.mark.parametrize("cluster", [{"policy": Policy(promote_namespaces=("ml-infra",))}], indirect=True)
async def test_a_namespace_that_may_not_promote_runs_auto_as_never_and_refuses_always(
    cluster: Cluster,
) -> None:
    await cluster.create(run_manifest("forced", updateBaseline="always"))
    await cluster.create(run_manifest("nightly-ish", branch="main"))  # updateBaseline: auto
    status = await cluster.phase("forced", "Failed")
    assert condition(status, "Admitted")["reason"] == "PromotionNotAllowed"
    assert "namespace team-a may not promote" in condition(status, "Admitted")["message"]
    status = await cluster.phase("nightly-ish", "Running")
    admitted = condition(status, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("True", "PromotionDisabled")
    assert parameters_of(cluster, "nightly-ish")["update_baseline"] == "never"
    assert len(cluster.kfp.created_runs) == 1


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> str:
    """A real git repository with a main branch, as a file:// URL."""
    repo = tmp_path / "trainer"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(
        repo,
        "-c",
        "user.email=ci@example.com",
        "-c",
        "user.name=ci",
        "commit",
        "--quiet",
        "--allow-empty",
        "-m",
        "v1",
    )
    return repo.resolve().as_uri()


@pytest.mark.parametrize(
    "cluster", [{"speed": 120.0, "policy": Policy(promote_schedule_owned_only=True)}], indirect=True
)
async def test_only_a_run_the_schedule_made_promotes_not_one_that_names_it_as_owner(
    cluster: Cluster, repository: str
) -> None:
    template = {"repository": repository, "branch": "main", "worldSize": 2}
    schedule = await cluster.create(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "BenchmarkSchedule",
            "metadata": {"name": "nightly", "namespace": "team-a"},
            "spec": {"schedule": "* * * * *", "runTemplate": {"spec": template}},
        },
        plural="benchmarkschedules",
    )
    made = await cluster.wait(
        lambda: [n for n in cluster.names() if cluster.get(n)["metadata"]["labels"].get(SCHEDULE_LABEL)],
        what="the schedule's first run",
    )
    await cluster.phase(made[0], "Running")
    assert parameters_of(cluster, made[0])["update_baseline"] == "auto"
    assert condition(cluster.status(made[0]), "Admitted")["reason"] == "PolicyAllowed"
    # A hand-made run naming the schedule as its owner, but not made from its template.
    owner = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BenchmarkSchedule",
        "name": "nightly",
        "uid": schedule["metadata"]["uid"],
        "controller": True,
    }
    forged = run_manifest(
        "forged", **(template | {"worldSize": 4}), commit=cluster.get(made[0])["spec"]["commit"]
    )
    forged["metadata"]["ownerReferences"] = [owner]
    await cluster.create(forged)
    status = await cluster.phase("forged", "Running")
    assert condition(status, "Admitted")["reason"] == "PromotionDisabled"
    assert parameters_of(cluster, "forged")["update_baseline"] == "never"


ACROSS_NODES = {"worldSize": 16, "multiNode": {"gpusPerNode": 8}}


@pytest.mark.parametrize("cluster", [{"policy": Policy(max_gpus_per_node=8, multi_node=True)}], indirect=True)
async def test_a_world_size_beyond_a_node_goes_multi_node_where_the_policy_allows_it(
    cluster: Cluster,
) -> None:
    await cluster.create(run_manifest("across", **ACROSS_NODES))
    await cluster.create(run_manifest("fits", worldSize=8, multiNode={"gpusPerNode": 8}))
    await cluster.create(run_manifest("fat-nodes", worldSize=32, multiNode={"gpusPerNode": 16}))
    status = await cluster.phase("across", "Running")
    assert condition(status, "Admitted")["reason"] == "PolicyAllowed"
    parameters = parameters_of(cluster, "across")
    assert (parameters["world_size_n"], parameters["multi_node"], parameters["gpus_per_node"]) == (
        16,
        True,
        8,
    )
    assert parameters["trainer_runtime"] == "torch-distributed"
    # A world size that fits one node stays there, multiNode or not.
    await cluster.phase("fits", "Running")
    fits = parameters_of(cluster, "fits")
    assert (fits["world_size_n"], fits["multi_node"], fits["gpus_per_node"]) == (8, False, 8)
    # Each node's share is still bounded by the node size.
    status = await cluster.phase("fat-nodes", "Failed")
    admitted = condition(status, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "WorldSizeExceedsNode")
    assert admitted["message"].startswith("spec.multiNode.gpusPerNode: got 16"), admitted["message"]
    assert len(cluster.kfp.created_runs) == 2


@pytest.mark.parametrize("cluster", [{"policy": Policy(max_gpus_per_node=8)}], indirect=True)
async def test_a_multi_node_run_is_refused_where_the_policy_does_not_allow_multi_node(
    cluster: Cluster,
) -> None:
    await cluster.create(run_manifest("across", **ACROSS_NODES))
    status = await cluster.phase("across", "Failed")
    admitted = condition(status, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "WorldSizeExceedsNode")
    assert admitted["message"].startswith("spec.worldSize: got 16 (a world size must fit on one node")
    assert "the policy's multiNode: true, which is false" in admitted["message"], admitted["message"]
    assert cluster.kfp.created_runs == []


@pytest.mark.parametrize(
    "cluster", [{"speed": 120.0, "policy": Policy(default_active_deadline_seconds=60)}], indirect=True
)
async def test_the_policys_default_deadline_terminates_a_run_that_sets_none(cluster: Cluster) -> None:
    await cluster.create(run_manifest("unbounded"))
    status = await cluster.phase("unbounded", "Failed")
    assert status["activeDeadlineSeconds"] == 60
    finished = condition(status, "Finished")
    assert finished["reason"] == "DeadlineExceeded" and "activeDeadlineSeconds=60" in finished["message"]
    assert cluster.kfp.terminated == [status["kfpRunId"]]


@pytest.mark.parametrize(
    "cluster", [{"policy": Policy(experiments={"*": ("{namespace}", "{namespace}/*")})}], indirect=True
)
async def test_another_teams_experiment_and_any_tracking_server_are_refused(cluster: Cluster) -> None:
    await cluster.create(run_manifest("theirs", mlflowExperiment="team-b/nightly"))
    await cluster.create(
        run_manifest(
            "exfiltrate",
            mlflowExperiment="team-a",
            config={"tracking": {"uri": "https://mlflow.evil.example"}},
        )
    )
    await cluster.create(run_manifest("ours", mlflowExperiment="team-a/nightly"))
    for name, reason, message in (
        ("theirs", "ExperimentNotAllowed", "spec.mlflowExperiment: got 'team-b/nightly'"),
        (
            "exfiltrate",
            "TrackingUriNotAllowed",
            "spec.config.tracking.uri: got 'https://mlflow.evil.example'",
        ),
    ):
        admitted = condition(await cluster.phase(name, "Failed"), "Admitted")
        assert (admitted["status"], admitted["reason"]) == ("False", reason)
        assert admitted["message"].startswith(message), admitted["message"]
    await cluster.phase("ours", "Running")
    assert [b["display_name"] for b in cluster.kfp.created_runs] == [cluster.status("ours")["kfpRunName"]]


CHART_VALUES = [
    {},
    {"policy": {"experiments": {"*": ["{namespace}", "{namespace}/*"]}, "maxCpuRequest": "64"}},
    {"policy": {"repositories": ["https://github.com/acme/"], "defaultActiveDeadlineSeconds": 0}},
]


@pytest.mark.parametrize("values", CHART_VALUES, ids=["defaults", "experiments", "repositories"])
async def test_the_chart_renders_the_policy_the_cli_derives_from_the_same_values(
    values: dict[str, Any], tmp_path: Path
) -> None:
    # Helm merges the values over values.yaml and renders BENCHGATE_POLICY; the CLI merges them itself.
    with helm_python.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(
            {**values, "kfp": {"host": "http://ml-pipeline.kubeflow:8888"}}, name="bg", namespace="bg"
        )
    (configmap,) = [
        d
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for d in yaml.safe_load_all(text)
        if isinstance(d, dict) and d.get("kind") == "ConfigMap" and "BENCHGATE_POLICY" in d.get("data", {})
    ]
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    derived = chart_values([path], CHART_DIR)
    assert json.loads(configmap["data"]["BENCHGATE_POLICY"]) == json.loads(policy_json(derived))
    assert policy_from_values(derived) == Policy.model_validate(
        json.loads(configmap["data"]["BENCHGATE_POLICY"])
    )
