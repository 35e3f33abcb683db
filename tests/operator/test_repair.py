"""A status write lost after the submission: the run is found in KFP by its name and followed again.

kopf writes an object in two requests (its metadata, then `/status`); a `/status` write the API server
fails (`Cluster.fail` answers it before kmock stores anything) must leave neither a run without a phase
for good nor a second KFP run. The repair timer looks every `repair_s` (here 0.5 s).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_kfp_server import FakeKfp
from operator_harness import TEST_CLIENT, Cluster, run_manifest, verb_of

from benchgate.controller.access import FINALIZER
from benchgate.controller.decide.fencing import CLAIM
from benchgate.controller.spec.status import kfp_run_name

pytestmark = pytest.mark.asyncio

REPAIR = {"repair_s": 0.5}


def status_write_naming_a_kfp_run(request: Any) -> bool:
    return (
        request.resource is not None
        and request.resource.plural == "benchmarkruns"
        and request.subresource == "status"
        and "kfpRunId" in json.dumps(request.data)
    )


def submitted_condition(status: dict[str, Any]) -> dict[str, Any]:
    """The Submitted condition ({} before there is one)."""
    found = [c for c in status.get("conditions", []) if c["type"] == "Submitted"]
    assert len(found) <= 1, found
    return dict(found[0]) if found else {}


def controller_patches(cluster: Cluster, name: str) -> list[Any]:
    return [
        r
        for r in list(cluster.kmock)
        if r.resource is not None
        and r.resource.plural == "benchmarkruns"
        and r.name == name
        and verb_of(r) == "patch"
        and r.headers.get("User-Agent") != TEST_CLIENT["User-Agent"]
    ]


@pytest.mark.parametrize("cluster", [REPAIR], indirect=True)
async def test_a_status_write_refused_after_the_submission_is_repaired_from_kfp(cluster: Cluster) -> None:
    # An error kopf does not send again (a 4xx): the submission's status is lost for good.
    fault = cluster.fail(status_write_naming_a_kfp_run, status=422, times=1)
    await cluster.create(run_manifest("lost"))
    status = await cluster.phase("lost", "Running", timeout_s=15)
    assert fault.times == 0  # the submission's write was the one refused
    (run,) = cluster.kfp.runs.values()
    assert status["kfpRunId"] == run["run_id"]
    assert status["kfpRunName"] == run["display_name"]
    assert submitted_condition(status)["reason"] == "Repaired"
    assert len(cluster.kfp.created_runs) == 1


@pytest.mark.parametrize("cluster", [{**REPAIR, "max_active_per_namespace": 1}], indirect=True)
async def test_a_queued_run_whose_submission_status_is_lost_is_repaired(cluster: Cluster) -> None:
    # The dispatch timer submits a queued run once a slot frees; its write lost, the run still reads
    # Pending (Queued), which the dispatch timer must not submit again and the repair timer fixes.
    await cluster.create(run_manifest("first"))
    await cluster.phase("first", "Running")
    await cluster.create(run_manifest("queued"))
    await cluster.wait(lambda: submitted_condition(cluster.status("queued")).get("reason") == "Queued")
    fault = cluster.fail(status_write_naming_a_kfp_run, status=422, times=1)
    await cluster.delete("first")
    status = await cluster.phase("queued", "Running", timeout_s=15)
    assert fault.times == 0
    assert submitted_condition(status)["reason"] == "Repaired"
    assert len(cluster.kfp.created_runs) == 2  # first's and queued's, one each
    assert status["kfpRunId"] == next(
        r["run_id"] for r in cluster.kfp.runs.values() if r["display_name"] == status["kfpRunName"]
    )


def run_an_older_controller_left_unsubmitted() -> dict[str, Any]:
    """What an older controller, killed between kopf's two writes, left: kopf's record of the handled
    spec (an annotation, in the first write) and its finalizer, no status (the second write)."""
    manifest = run_manifest("orphan")
    manifest["metadata"]["uid"] = "8f1d0c1e-0000-4000-8000-000000000006"
    handled = json.dumps({"spec": manifest["spec"]}, separators=(",", ":"))
    manifest["metadata"]["annotations"] = {"kopf.zalando.org/last-handled-configuration": handled}
    manifest["metadata"]["finalizers"] = [FINALIZER]
    return manifest


@pytest.mark.parametrize(
    "cluster", [{**REPAIR, "precreate": [run_an_older_controller_left_unsubmitted()]}], indirect=True
)
async def test_a_run_handled_but_unrecorded_before_a_restart_is_found_by_its_name(cluster: Cluster) -> None:
    # kopf holds the run for handled (its record is there), so its create handler never fires again;
    # after the restart nothing remembers the run: the repair timer asks KFP for it by its name.
    name = kfp_run_name("team-a", "orphan", "8f1d0c1e-0000-4000-8000-000000000006")
    cluster.kfp.experiments["exp-1"] = {"experiment_id": "exp-1", "display_name": "benchgate"}
    cluster.kfp.runs["run-orphan"] = {
        "run_id": "run-orphan",
        "display_name": name,
        "experiment_id": "exp-1",
        "state": "RUNNING",
    }
    status = await cluster.phase("orphan", "Running", timeout_s=15)
    assert status["kfpRunId"] == "run-orphan" and status["kfpRunName"] == name
    assert submitted_condition(status)["reason"] == "Repaired"
    assert cluster.kfp.created_runs == []


async def test_kopfs_record_of_a_handled_run_is_written_with_its_status(cluster: Cluster) -> None:
    # A status write that fails once (a 5xx) is sent again by kopf itself; what it sends carries
    # kopf's record that the creation was handled together with the KFP run's id, so no write can
    # record one without the other. The metadata writes carry only the finalizer.
    cluster.fail(status_write_naming_a_kfp_run, status=500, times=1)
    await cluster.create(run_manifest("whole"))
    status = await cluster.phase("whole", "Running")
    assert submitted_condition(status)["reason"] == "KfpRunCreated"
    assert len(cluster.kfp.created_runs) == 1
    naming = [r.data for r in controller_patches(cluster, "whole") if status_write_naming_a_kfp_run(r)]
    assert len(naming) == 2  # refused, then sent again
    for data in naming:
        assert "last-handled-configuration" in data["status"]["kopf"]
    # kopf's records never go to the annotations: the only one is benchgate's submission claim.
    assert not any(
        "kopf.zalando.org" in json.dumps(r.data)
        for r in controller_patches(cluster, "whole")
        if not r.subresource
    )
    assert list(cluster.get("whole")["metadata"]["annotations"]) == [CLAIM]


@pytest.fixture
def kfp_down(fake_kfp: tuple[FakeKfp, str]) -> None:
    """KFP answering 503 from before the controller starts (requested before `cluster`)."""
    fake_kfp[0].scenario.fail_with = 503


@pytest.mark.parametrize(
    "cluster", [{**REPAIR, "precreate": [run_an_older_controller_left_unsubmitted()]}], indirect=True
)
async def test_the_repair_waits_quietly_for_a_kfp_that_is_down(kfp_down: None, cluster: Cluster) -> None:
    name = kfp_run_name("team-a", "orphan", "8f1d0c1e-0000-4000-8000-000000000006")
    cluster.kfp.experiments["exp-1"] = {"experiment_id": "exp-1", "display_name": "benchgate"}
    cluster.kfp.runs["run-orphan"] = {
        "run_id": "run-orphan",
        "display_name": name,
        "experiment_id": "exp-1",
        "state": "RUNNING",
    }
    # Several looks fail: each is logged and the next one asks again; nothing written, and no Event
    # (a KFP outage must not add one per run per look).
    await cluster.wait(lambda: len(cluster.kfp.requests) >= 4, what="a few looks at a KFP that is down")
    assert cluster.status("orphan") == {}
    assert cluster.events() == []
    cluster.kfp.scenario.fail_with = None
    status = await cluster.phase("orphan", "Running", timeout_s=15)
    assert status["kfpRunId"] == "run-orphan"
    assert submitted_condition(status)["reason"] == "Repaired"
    assert cluster.kfp.created_runs == []
