"""The controller against a KFP that a production Kubeflow runs: multi-user (every experiment in a
profile namespace) and reached with a projected ServiceAccount token that the kubelet rotates. Through
the real controller, the emulated API server and the FAKE KFP server (tests/support/fake_kfp_server.py)."""

from __future__ import annotations

from typing import Any

import pytest
from fake_kfp_server import authorization_of
from operator_harness import Cluster, run_manifest

from benchgate.controller.access import KFP_ACCESS, KFP_GROUP

pytestmark = pytest.mark.asyncio


def in_namespace(name: str, namespace: str) -> dict[str, Any]:
    manifest = run_manifest(name)
    manifest["metadata"]["namespace"] = namespace
    return manifest


def status_in(cluster: Cluster, name: str, namespace: str) -> dict[str, Any]:
    return dict((cluster.get(name, namespace) or {}).get("status") or {})


async def test_on_a_multi_user_kfp_each_namespaces_runs_go_to_its_own_experiment(cluster: Cluster) -> None:
    # Multi-user KFP refuses an experiment without a namespace (400): before, every run failed so.
    cluster.kfp.scenario.multi_user = True
    await cluster.create(in_namespace("a-1", "team-a"))
    await cluster.create(in_namespace("b-1", "team-b"))
    for name, namespace in (("a-1", "team-a"), ("b-1", "team-b")):
        await cluster.wait(
            lambda n=name, ns=namespace: status_in(cluster, n, ns).get("phase") == "Running",
            what=f"{namespace}/{name} running",
        )
    experiments = {e["experiment_id"]: e for e in cluster.kfp.experiments.values()}
    assert sorted(e["namespace"] for e in experiments.values()) == ["team-a", "team-b"]
    assert {e["display_name"] for e in experiments.values()} == {"benchgate"}
    for name, namespace in (("a-1", "team-a"), ("b-1", "team-b")):
        run = cluster.kfp.runs[status_in(cluster, name, namespace)["kfpRunId"]]
        assert experiments[run["experiment_id"]]["namespace"] == namespace


@pytest.mark.parametrize("cluster", [{"token_file": True}], indirect=True)
async def test_a_rotated_token_file_is_read_again_not_refused_for_good(cluster: Cluster) -> None:
    await cluster.create(run_manifest("before"))
    await cluster.phase("before", "Running")
    # The kubelet rotates the projected token: KFP refuses the old one from now on, and the new one is
    # in the file by the time the refusal arrives (the fake writes it just before answering 401).
    token_file = cluster.token_file
    assert token_file is not None
    cluster.kfp.scenario.token = "rotated-token"
    cluster.kfp.scenario.on_unauthorized = lambda: token_file.write_text("rotated-token\n", encoding="utf-8")
    await cluster.create(run_manifest("after"))
    await cluster.phase("after", "Running")
    cluster.kfp.force(cluster.status("before")["kfpRunId"], "SUCCEEDED")
    await cluster.phase("before", "Succeeded")  # still followed with the new token


async def test_an_experiment_another_controller_created_meanwhile_is_used(cluster: Cluster) -> None:
    # Both found no experiment and both create it: KFP refuses the second create with 409 ("already
    # exist"). Before, the run failed for good (KfpRejected); now the controller reads the other's.
    cluster.kfp.scenario.experiment_races = 1
    await cluster.create(run_manifest("race"))
    status = await cluster.phase("race", "Running")
    assert cluster.kfp.scenario.experiment_races == 0  # the race happened
    (experiment,) = cluster.kfp.experiments.values()
    assert cluster.kfp.runs[status["kfpRunId"]]["experiment_id"] == experiment["experiment_id"]
    assert cluster.kfp.calls("POST", "/experiments") == 1
    assert cluster.kfp.calls("POST", "/runs") == 1


async def test_the_controller_calls_only_what_the_charts_kfp_role_grants(cluster: Cluster) -> None:
    # A run created, followed and deleted mid-flight (terminate) on a multi-user KFP: every call KFP
    # would authorize is one of KFP_ACCESS, the rules of the chart's Role in each profile
    # (tests/operator/test_chart.py holds the chart to KFP_ACCESS).
    cluster.kfp.scenario.multi_user = True
    await cluster.create(in_namespace("a-1", "team-a"))
    await cluster.wait(
        lambda: status_in(cluster, "a-1", "team-a").get("phase") == "Running", what="a-1 running"
    )
    run_id = status_in(cluster, "a-1", "team-a")["kfpRunId"]
    await cluster.delete("a-1", "team-a")
    await cluster.wait(lambda: cluster.kfp.terminated == [run_id], what="its KFP run terminated")
    asked = {authorization_of(method, path) for method, path in cluster.kfp.requests} - {None}
    granted = {(a.resource, verb) for a in KFP_ACCESS for verb in a.verbs}
    assert {a.api_group for a in KFP_ACCESS} == {KFP_GROUP}
    assert asked <= granted, f"calls outside the chart's KFP role: {sorted(asked - granted)}"
    # And each verb the role grants is one this life of a run uses: nothing granted in vain.
    assert asked == granted
