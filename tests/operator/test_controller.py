"""The controller's BenchmarkRun life cycle, end to end: real kopf, kmock's API, the FAKE KFP server.

Each test also audits the controller's API requests against the chart's RBAC, and the statuses it
wrote against their models (see operator_harness.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import pytest
from operator_harness import (
    POLL_S,
    SHA,
    TEST_CLIENT,
    Cluster,
    refused_statuses,
    run_manifest,
    schema_errors,
    verb_of,
    written_statuses,
)

from benchgate.controller.access import FINALIZER, KOPF_DEFAULT_FINALIZER
from benchgate.controller.decide.fencing import CLAIM, claim_token
from benchgate.controller.spec.status import kfp_run_name

pytestmark = pytest.mark.asyncio


def kfp_run_id(cluster: Cluster, name: str) -> str:
    return str(cluster.status(name)["kfpRunId"])


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [c for c in status.get("conditions", []) if c["type"] == kind]
    return dict(found)


async def test_create_submits_one_kfp_run_and_follows_it(cluster: Cluster) -> None:
    await cluster.create(run_manifest("pr-1", branch="feature/x", workloadArgs={"size": "tiny"}))
    status = await cluster.phase("pr-1", "Running")
    assert status["shortCommit"] == SHA[:12] and status["kfpState"] == "RUNNING"
    assert status["kfpRunUrl"] == f"{cluster.kfp_url}/#/runs/details/{status['kfpRunId']}"
    assert status["startTime"].endswith("Z") and status["observedGeneration"] == 1
    (body,) = cluster.kfp.created_runs
    parameters = body["runtime_config"]["parameters"]
    assert parameters["commit"] == SHA and parameters["world_size_n"] == 2
    # A JSON object in a string parameter: KFP's dict parameters would turn an int into a float.
    assert parameters["branch"] == "feature/x" and parameters["workload_args"] == '{"size": "tiny"}'
    assert body["display_name"] == status["kfpRunName"]
    assert condition(status, "Submitted")["reason"] == "KfpRunCreated"


@pytest.mark.parametrize(
    "cluster", [{"precreate": [run_manifest("early-1"), run_manifest("early-2")]}], indirect=True
)
async def test_objects_that_existed_before_the_controller_get_one_run_each(cluster: Cluster) -> None:
    """kmock replays existing objects on every watch, so their create handler fires more than once."""
    for name in ("early-1", "early-2"):
        await cluster.phase(name, "Running")
    await cluster.wait(lambda: cluster.kfp.calls("GET", "/runs/") >= 6, what="a few polls")
    assert cluster.kfp.calls("POST", "/runs") == 2
    assert sorted(r["display_name"] for r in cluster.kfp.created_runs) == sorted(
        cluster.status(n)["kfpRunName"] for n in ("early-1", "early-2")
    )


async def test_the_finalizer_holds_a_run_only_while_its_kfp_run_may_go(cluster: Cluster) -> None:
    """Held for an object's whole life, a finalizer leaves it undeletable once the controller is gone
    (and hangs its namespace's deletion): benchgate's is written with the submission's claim, before
    the KFP run exists, and removed once the run ended. A refused run never carries it."""
    await cluster.create(run_manifest("pr-8"))
    await cluster.phase("pr-8", "Running")
    meta = cluster.get("pr-8")["metadata"]
    assert meta["finalizers"] == [FINALIZER]
    assert meta["annotations"][CLAIM].split(" ")[0]  # who claimed the submission, and when
    cluster.kfp.force(kfp_run_id(cluster, "pr-8"), "SUCCEEDED", "SUCCEEDED")
    await cluster.phase("pr-8", "Succeeded")
    await cluster.wait(
        lambda: not cluster.get("pr-8")["metadata"].get("finalizers"), what="the finalizer to go"
    )
    await cluster.create(run_manifest("bad", commit="not-a-sha"))
    await cluster.phase("bad", "Failed")
    await cluster.wait(lambda: cluster.kfp.calls("GET", "/runs/") >= 2, what="a few more looks")
    assert not cluster.get("bad")["metadata"].get("finalizers")


def legacy_run() -> dict[str, Any]:
    """A run an older controller handled to the end: kopf's record of the spec it handled, its default
    finalizer name, a finished status."""
    manifest = run_manifest("legacy")
    handled = json.dumps({"spec": manifest["spec"]}, separators=(",", ":"))
    manifest["metadata"]["annotations"] = {"kopf.zalando.org/last-handled-configuration": handled}
    manifest["metadata"]["finalizers"] = [KOPF_DEFAULT_FINALIZER]
    manifest["status"] = {"phase": "Succeeded", "kfpRunId": "run-old", "kfpState": "SUCCEEDED"}
    return manifest


@pytest.mark.parametrize("cluster", [{"precreate": [legacy_run()]}], indirect=True)
async def test_a_finished_run_finalized_by_an_older_controller_loses_the_finalizer_and_deletes(
    cluster: Cluster,
) -> None:
    # An older release left kopf's default finalizer name: nothing would remove it now, and deleting the
    # run would leave it Terminating for good. The run ended: the controller removes it on resume.
    await cluster.wait(
        lambda: not cluster.get("legacy")["metadata"].get("finalizers"), what="the old finalizer to go"
    )
    await cluster.delete("legacy")
    await cluster.wait(lambda: cluster.get("legacy") is None, what="legacy to be gone")
    assert cluster.kfp.requests == []  # finished: nothing submitted, nothing terminated


async def test_a_run_submitted_before_a_restart_is_attached_to_not_submitted_again(cluster: Cluster) -> None:
    """A controller that died after creating the KFP run but before writing status: the next attempt
    finds the run by its deterministic name and attaches."""
    manifest = run_manifest("pr-2")
    manifest["metadata"]["uid"] = "8f1d0c1e-0000-4000-8000-000000000002"
    name = kfp_run_name("team-a", "pr-2", manifest["metadata"]["uid"])
    experiment = {"experiment_id": "exp-1", "display_name": "benchgate"}
    cluster.kfp.experiments["exp-1"] = experiment
    cluster.kfp.runs["run-before"] = {
        "run_id": "run-before",
        "display_name": name,
        "experiment_id": "exp-1",
        "state": "RUNNING",
    }
    await cluster.create(manifest)
    status = await cluster.phase("pr-2", "Running")
    assert status["kfpRunId"] == "run-before"
    assert "attached to existing" in condition(status, "Submitted")["message"]
    assert cluster.kfp.calls("POST", "/runs") == 0


@pytest.mark.parametrize(
    ("state", "outcome", "phase", "reason"),
    [
        ("SUCCEEDED", "SUCCEEDED", "Succeeded", "GatePassed"),
        ("FAILED", "GATE_FAILED", "Failed", "Regression"),
        ("FAILED", "TASK_FAILED", "Failed", "RunFailed"),
        ("CANCELED", "CANCELED", "Canceled", "KfpCanceled"),
    ],
)
async def test_final_kfp_states_are_mirrored(
    cluster: Cluster, state: str, outcome: str, phase: str, reason: str
) -> None:
    await cluster.create(run_manifest("pr-3"))
    await cluster.phase("pr-3", "Running")
    cluster.kfp.force(kfp_run_id(cluster, "pr-3"), state, outcome)
    status = await cluster.phase("pr-3", phase)
    assert status["kfpState"] == state and status["completionTime"] >= status["startTime"]
    assert condition(status, "Finished")["reason"] == reason
    # Without MLflow the verdict cannot be read; the status says so instead of guessing.
    assert condition(status, "VerdictRead")["status"] == "False" and "verdict" not in status


async def test_pending_kfp_run_reads_as_submitted(cluster: Cluster) -> None:
    await cluster.create(run_manifest("pr-4"))
    await cluster.wait(lambda: cluster.status("pr-4").get("kfpRunId"), what="a KFP run")
    cluster.kfp.force(kfp_run_id(cluster, "pr-4"), "PENDING")
    await cluster.wait(lambda: cluster.status("pr-4").get("kfpState") == "PENDING", what="PENDING")
    assert cluster.status("pr-4")["phase"] == "Submitted"


async def test_kfp_down_then_up_is_retried_into_one_run(cluster: Cluster) -> None:
    cluster.kfp.scenario.fail_with = 503
    await cluster.create(run_manifest("pr-5"))
    status = await cluster.phase("pr-5", "Pending")
    assert condition(status, "Submitted")["reason"] == "KfpUnavailable"
    await cluster.wait(lambda: cluster.kfp.calls("GET", "/healthz") >= 4, what="a few retries")
    cluster.kfp.scenario.fail_with = None
    await cluster.phase("pr-5", "Running")
    assert cluster.kfp.calls("POST", "/runs") == 1
    # One outage, one warning; no error logged as an Event at every retry.
    assert len(cluster.events("KfpUnavailable")) == 1
    assert [e for e in cluster.events() if e.get("type") == "Error"] == []


async def test_a_run_kfp_rejects_fails_permanently_with_an_event(cluster: Cluster) -> None:
    cluster.kfp.scenario.reject_runs = True
    await cluster.create(run_manifest("pr-6"))
    status = await cluster.phase("pr-6", "Failed")
    submitted = condition(status, "Submitted")
    assert submitted["reason"] == "KfpRejected" and "HTTP 400" in submitted["message"]
    await cluster.wait(lambda: cluster.events("KfpRejected"), what="a KfpRejected event")
    await asyncio.sleep(5 * POLL_S)  # five retry intervals
    assert cluster.kfp.calls("POST", "/runs") == 1  # not retried
    assert not cluster.kfp.runs


async def test_a_refused_token_fails_once_and_is_not_retried(cluster: Cluster) -> None:
    cluster.kfp.scenario.token = "another-token"
    await cluster.create(run_manifest("pr-7"))
    status = await cluster.phase("pr-7", "Failed")
    assert condition(status, "Submitted")["reason"] == "KfpUnauthorized"
    assert "refused the credentials: HTTP 401" in condition(status, "Submitted")["message"]
    seen = len(cluster.kfp.requests)
    await asyncio.sleep(5 * POLL_S)  # five retry intervals: nothing more reaches KFP
    assert len(cluster.kfp.requests) == seen and not cluster.kfp.runs


@pytest.mark.parametrize(
    ("spec", "field", "value"),
    [
        ({"commit": "main"}, "spec.commit", "'main'"),
        ({"worldSize": -2}, "spec.worldSize", "-2"),
        ({"stepz": 10}, "spec.stepz", "10"),
        ({"repository": "ext::sh -c touch% /tmp/pwned"}, "spec.repository", "ext::sh"),
        ({"tolerances": {"throughput_drop_pct": -3}}, "spec.tolerances.throughput_drop_pct", "-3"),
    ],
)
async def test_bad_specs_are_refused_by_the_schema_and_by_the_controller(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, spec: dict[str, Any], field: str, value: str
) -> None:
    manifest = run_manifest("bad", **spec)
    # An API server with the CRD refuses it already ...
    assert schema_errors("benchmarkruns", manifest), manifest
    # ... and one without it (or with an old CRD) hands it to the controller, which refuses it too.
    caplog.set_level(logging.INFO)
    await cluster.create(manifest)
    status = await cluster.phase("bad", "Failed")
    message = condition(status, "Submitted")["message"]
    assert field in message and value in message
    await cluster.wait(lambda: cluster.events("InvalidSpec"), what="an InvalidSpec event")
    assert cluster.kfp.requests == []  # KFP never heard of it
    assert not [r for r in caplog.records if r.exc_info], "a traceback in the controller log"


async def test_deleting_a_running_benchmarkrun_terminates_its_kfp_run(cluster: Cluster) -> None:
    await cluster.create(run_manifest("pr-8"))
    await cluster.phase("pr-8", "Running")
    run_id = kfp_run_id(cluster, "pr-8")
    await cluster.delete("pr-8")
    await cluster.wait(lambda: cluster.get("pr-8") is None, what="pr-8 to be gone")
    assert cluster.kfp.terminated == [run_id]


async def test_deleting_a_benchmarkrun_mid_submission_terminates_the_run(cluster: Cluster) -> None:
    """The deletion arrives while KFP is still creating the run, so the object's status never names
    it: the controller remembers the id and terminates it all the same."""
    cluster.kfp.scenario.create_delay_s = 1.0
    await cluster.create(run_manifest("pr-11"))
    await cluster.wait(lambda: cluster.kfp.calls("POST", "/runs") == 1, what="the submission to start")
    await cluster.delete("pr-11")
    await cluster.wait(lambda: cluster.get("pr-11") is None, what="pr-11 to be gone")
    (run_id,) = cluster.kfp.runs
    assert cluster.kfp.terminated == [run_id]


async def test_deleting_a_finished_benchmarkrun_leaves_kfp_alone(cluster: Cluster) -> None:
    await cluster.create(run_manifest("pr-9"))
    await cluster.phase("pr-9", "Running")
    cluster.kfp.force(kfp_run_id(cluster, "pr-9"), "SUCCEEDED")
    await cluster.phase("pr-9", "Succeeded")
    await cluster.delete("pr-9")
    await cluster.wait(lambda: cluster.get("pr-9") is None, what="pr-9 to be gone")
    assert cluster.kfp.terminated == []


@pytest.mark.parametrize("cluster", [{"speed": 120.0}], indirect=True)
async def test_active_deadline_terminates_the_run(cluster: Cluster) -> None:
    await cluster.create(run_manifest("slow", activeDeadlineSeconds=60))
    status = await cluster.phase("slow", "Failed")
    assert condition(status, "Finished")["reason"] == "DeadlineExceeded"
    assert cluster.kfp.terminated == [status["kfpRunId"]]


@pytest.mark.parametrize("cluster", [{"speed": 120.0, "max_active_per_namespace": 1}], indirect=True)
async def test_a_run_that_ended_past_its_deadline_reports_its_outcome_and_frees_its_slot(
    cluster: Cluster,
) -> None:
    # KFP ended each run before the controller's first look, which comes after the 1 s deadline (a
    # poll is 24 s of this clock): the outcome is KFP's, nothing is terminated (KFP would answer 400),
    # and the one slot of the namespace passes to the next run.
    cluster.kfp.scenario.initial = ("SUCCEEDED", "SUCCEEDED")
    await cluster.create(run_manifest("late", activeDeadlineSeconds=1))
    await cluster.create(run_manifest("next"))
    status = await cluster.phase("late", "Succeeded")
    assert condition(status, "Finished")["reason"] == "GatePassed"
    await cluster.phase("next", "Succeeded")
    assert cluster.kfp.calls("POST", "/runs/") == 0 and cluster.kfp.terminated == []


@pytest.mark.parametrize("cluster", [{"speed": 120.0}], indirect=True)
async def test_a_canceling_run_past_its_deadline_is_not_terminated_again(cluster: Cluster) -> None:
    cluster.kfp.scenario.initial = ("CANCELING", "RUNNING")
    await cluster.create(run_manifest("stopping", activeDeadlineSeconds=1))
    status = await cluster.phase("stopping", "Failed")
    finished = condition(status, "Finished")
    assert finished["reason"] == "DeadlineExceeded" and "already being canceled" in finished["message"]
    assert cluster.kfp.calls("POST", "/runs/") == 0


@pytest.mark.parametrize("cluster", [{"speed": 120.0}], indirect=True)
async def test_a_run_that_ends_between_its_look_and_its_terminate_reports_its_outcome(
    cluster: Cluster,
) -> None:
    # The look reads RUNNING past the deadline, the run ends before the terminate arrives: KFP answers
    # 400, which is no error; the next look reports the outcome.
    cluster.kfp.scenario.ends_before_terminate = ("SUCCEEDED", "SUCCEEDED")
    await cluster.create(run_manifest("racing", activeDeadlineSeconds=1))
    status = await cluster.phase("racing", "Succeeded")
    assert condition(status, "Finished")["reason"] == "GatePassed"
    assert cluster.kfp.calls("POST", "/runs/") == 1 and cluster.kfp.terminated == []


@pytest.mark.parametrize("cluster", [{"speed": 120.0}], indirect=True)
async def test_ttl_after_finished_deletes_the_run(cluster: Cluster) -> None:
    await cluster.create(run_manifest("done", ttlSecondsAfterFinished=60))
    await cluster.create(run_manifest("kept"))
    for name in ("done", "kept"):
        await cluster.phase(name, "Running")
        cluster.kfp.force(kfp_run_id(cluster, name), "SUCCEEDED")
        await cluster.phase(name, "Succeeded")
    await cluster.wait(lambda: cluster.get("done") is None, what="the TTL to delete 'done'")
    assert cluster.get("kept") is not None  # no TTL: kept


@pytest.mark.parametrize("cluster", [{"max_active_per_namespace": 2}], indirect=True)
async def test_the_namespace_concurrency_limit_queues_runs(cluster: Cluster) -> None:
    # Created together, the three race for the two slots: kopf handles each object in its own worker,
    # and which two claim them first is the order their creations come back from the API server, not
    # the order they were sent. The test waits for whichever two won, not for q-1 and q-2.
    names = ("q-1", "q-2", "q-3")
    for name in names:
        await cluster.create(run_manifest(name))
    other = run_manifest("elsewhere")
    other["metadata"]["namespace"] = "team-b"
    await cluster.create(other)

    def phases() -> dict[str, str]:
        return {name: str(cluster.status(name).get("phase") or "") for name in names}

    def split() -> tuple[list[str], list[str]] | None:
        now = phases()
        running = [n for n in names if now[n] == "Running"]
        pending = [n for n in names if now[n] == "Pending" and cluster.status(n).get("conditions")]
        return (running, pending) if len(running) == 2 and len(pending) == 1 else None

    running, (queued,) = await cluster.wait(split, what="two of the three Running and one queued")
    assert condition(cluster.status(queued), "Submitted")["reason"] == "Queued"
    await cluster.wait(lambda: (cluster.get("elsewhere", "team-b") or {}).get("status", {}).get("kfpRunId"))
    assert cluster.kfp.calls("POST", "/runs") == 3  # two of team-a's and team-b's run
    cluster.kfp.force(kfp_run_id(cluster, running[0]), "SUCCEEDED")
    await cluster.phase(queued, "Running")
    assert cluster.kfp.calls("POST", "/runs") == 4


@pytest.mark.parametrize("cluster", [{"max_active_per_namespace": 1, "speed": 100.0}], indirect=True)
async def test_a_kfp_run_that_is_gone_fails_its_run_frees_the_slot_and_deletes(cluster: Cluster) -> None:
    # KFP answers 404 for the run (deleted there, or its store reset): at first a condition, then, once
    # it stays gone (planning.GONE_AFTER, 60 s of the controller's clock, here 0.6 s), Failed.
    await cluster.create(run_manifest("lost"))
    await cluster.phase("lost", "Running")
    await cluster.create(run_manifest("behind"))
    assert condition(await cluster.phase("behind", "Pending"), "Submitted")["reason"] == "Queued"
    with cluster.kfp.lock:
        del cluster.kfp.runs[kfp_run_id(cluster, "lost")]
    failed = await cluster.phase("lost", "Failed")
    assert condition(failed, "Finished")["reason"] == "KfpRunGone"
    assert "(HTTP 404)" in condition(failed, "Finished")["message"]
    await cluster.phase("behind", "Running")  # the slot was freed: the queue moves
    await cluster.wait(lambda: cluster.events("KfpRunGone"), what="a KfpRunGone event")
    # A delete of a run whose KFP run is gone finishes: nothing to terminate.
    with cluster.kfp.lock:
        cluster.kfp.runs.clear()
    await cluster.delete("behind")
    await cluster.wait(lambda: cluster.get("behind") is None, what="'behind' to be gone")


@pytest.mark.parametrize("cluster", [{"max_active_per_namespace": 1}], indirect=True)
async def test_a_queued_run_is_quiet_while_it_waits(cluster: Cluster) -> None:
    await cluster.create(run_manifest("first"))
    await cluster.phase("first", "Running")
    await cluster.create(run_manifest("second"))
    queued = await cluster.phase("second", "Pending")
    assert condition(queued, "Submitted")["reason"] == "Queued"
    before = len(cluster.kmock)  # requests so far
    await asyncio.sleep(10 * POLL_S)  # ten looks of the dispatch timer
    assert len(cluster.events("Queued")) == 1  # told once, as a normal Event, when the wait began
    assert [e for e in cluster.events() if e.get("type") == "Error"] == []
    # Still queued, nothing new to say: no status patch for it in those ten looks.
    later = [r for r in list(cluster.kmock)[before:] if verb_of(r) == "patch" and r.name == "second"]
    assert later == []
    cluster.kfp.force(kfp_run_id(cluster, "first"), "SUCCEEDED")
    await cluster.phase("second", "Running")
    assert cluster.kfp.calls("POST", "/runs") == 2


async def test_every_status_written_is_one_of_the_model(cluster: Cluster) -> None:
    """The harness holds every status patch to BenchmarkRunStatus after each test: here, that it sees
    them (a run's life from submission to its end), and that it would refuse a key the model lacks."""
    await cluster.create(run_manifest("pr-12"))
    await cluster.phase("pr-12", "Running")
    cluster.kfp.force(kfp_run_id(cluster, "pr-12"), "SUCCEEDED")
    await cluster.phase("pr-12", "Succeeded")
    written = written_statuses(cluster.kmock)
    keys = {key for plural, status in written if plural == "benchmarkruns" for key in status}
    expected = {"phase", "shortCommit", "observedGeneration", "kfpRunId", "kfpRunName", "kfpRunUrl"}
    expected |= {"kfpState", "startTime", "completionTime", "conditions"}
    assert expected <= keys, keys
    assert refused_statuses(written) == []
    assert refused_statuses([("benchmarkruns", {"phase": "Running", "kfpRunID": "run-1"})])
    assert refused_statuses([("benchmarkruns", {"phase": "Finished"})])


def kubectl_wait(obj: dict[str, Any], kind: str) -> str | None:
    """The condition status `kubectl wait --for=condition=<kind>[=<status>]` compares, read as kubectl
    reads it (ConditionalWait.checkCondition): none while the condition is missing or was observed at
    an older generation than the object's (then the wait goes on)."""
    generation = obj["metadata"].get("generation")
    for found in (obj.get("status") or {}).get("conditions", []):
        if found.get("type", "").lower() != kind.lower():
            continue
        observed = found.get("observedGeneration", obj["status"].get("observedGeneration"))
        if generation is not None and observed is not None and observed < generation:
            return None
        return str(found["status"])
    return None


async def test_kubectl_wait_can_tell_pass_from_fail(cluster: Cluster) -> None:
    for name in ("passes", "regresses"):
        await cluster.create(run_manifest(name))
        await cluster.phase(name, "Running")
        # Unfinished: neither `--for=condition=Succeeded` nor `...=Succeeded=False` ends the wait.
        assert kubectl_wait(cluster.get(name), "Succeeded") == "Unknown"
        assert kubectl_wait(cluster.get(name), "Ready") == "False"
    cluster.kfp.force(kfp_run_id(cluster, "passes"), "SUCCEEDED", "SUCCEEDED")
    cluster.kfp.force(kfp_run_id(cluster, "regresses"), "FAILED", "GATE_FAILED")
    await cluster.phase("passes", "Succeeded")
    await cluster.phase("regresses", "Failed")
    passed, regressed = cluster.get("passes"), cluster.get("regresses")
    assert kubectl_wait(passed, "Succeeded") == "True" and kubectl_wait(passed, "Ready") == "True"
    assert kubectl_wait(regressed, "Succeeded") == "False" and kubectl_wait(regressed, "Ready") == "False"
    assert condition(regressed["status"], "Succeeded")["reason"] == "Regression"
    assert condition(regressed["status"], "Ready")["reason"] == "Regression"
    for obj in (passed, regressed):
        assert obj["status"]["observedGeneration"] == 1
        assert {c["observedGeneration"] for c in obj["status"]["conditions"]} == {1}
    # Every condition the controller wrote on the way, in every patch, named its generation.
    written = [c for _, status in written_statuses(cluster.kmock) for c in status.get("conditions", [])]
    assert written and all(c.get("observedGeneration") == 1 for c in written)


async def patch_spec(cluster: Cluster, name: str, spec: dict[str, Any]) -> None:
    """A merge patch of the spec, as `kubectl patch --type=merge` sends it."""
    async with aiohttp.ClientSession(headers=TEST_CLIENT) as http:
        response = await http.patch(
            cluster.path("benchmarkruns", "team-a", name),
            json={"spec": spec},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status == 200, await response.text()


async def test_editing_workload_args_is_reported_and_submits_nothing(cluster: Cluster) -> None:
    """An edit inside workloadArgs that reaches the controller (kmock evaluates no CEL; CEL sees only
    declared fields): the controller says it is not applied, the run goes on as submitted, and
    observedGeneration reaches the new generation."""
    await cluster.create(run_manifest("edited", workloadArgs={"size": "tiny"}))
    await cluster.phase("edited", "Running")
    await patch_spec(cluster, "edited", {"workloadArgs": {"size": "large"}})
    assert cluster.get("edited")["metadata"]["generation"] == 2
    status = await cluster.wait(
        lambda: (
            (s := cluster.status("edited")) and any(c["type"] == "SpecApplied" for c in s["conditions"]) and s
        ),
        what="the SpecApplied condition",
    )
    applied = condition(status, "SpecApplied")
    assert applied["status"] == "False" and applied["reason"] == "SpecChangedAfterSubmit"
    # The edit was seen and answered: observedGeneration reaches the generation (a GitOps tool
    # waiting for it would wait forever otherwise); the generation that runs is kept apart.
    assert applied["observedGeneration"] == 2 and status["observedGeneration"] == 2
    assert status["submittedGeneration"] == 1
    await cluster.wait(lambda: cluster.events("SpecChangedAfterSubmit"), what="a warning Event")
    # The run finishes as submitted; `kubectl wait` still ends on it at the new generation.
    cluster.kfp.force(kfp_run_id(cluster, "edited"), "SUCCEEDED", "SUCCEEDED")
    await cluster.phase("edited", "Succeeded")
    assert kubectl_wait(cluster.get("edited"), "Succeeded") == "True"
    assert cluster.kfp.calls("POST", "/runs") == 1
    (body,) = cluster.kfp.created_runs
    assert body["runtime_config"]["parameters"]["workload_args"] == '{"size": "tiny"}'
    assert len(cluster.events("SpecChangedAfterSubmit")) == 1
    assert cluster.status("edited")["observedGeneration"] == 2


def claim_write(request: Any) -> bool:
    """The controller's claim of a submission: a merge patch of the object carrying the claim."""
    data = request.data if isinstance(request.data, dict) else {}
    return (
        request.resource is not None
        and request.resource.plural == "benchmarkruns"
        and not request.subresource
        and verb_of(request) == "patch"
        and CLAIM in (data.get("metadata", {}).get("annotations") or {})
    )


async def test_a_claim_refused_as_stale_submits_nothing_until_claimed_again(cluster: Cluster) -> None:
    """An API server refuses a claim whose resourceVersion is no longer the object's (409: another
    controller or an edit wrote it since): nothing reaches KFP on that look; the next claims."""
    cluster.fail(claim_write, status=409, times=1)
    await cluster.create(run_manifest("raced"))
    await cluster.phase("raced", "Running")
    waited = [
        c
        for _, status in written_statuses(cluster.kmock)
        for c in status.get("conditions", [])
        if c.get("reason") == "SubmissionClaimed"
    ]
    assert waited and "changed while being claimed" in waited[0]["message"]
    assert cluster.kfp.calls("POST", "/runs") == 1
    assert len([r for r in list(cluster.kmock) if claim_write(r)]) == 2  # refused, then claimed


def claimed_by_another(clock: Any) -> dict[str, Any]:
    manifest = run_manifest("theirs")
    manifest["metadata"]["annotations"] = {CLAIM: claim_token("other-pod", clock())}
    return manifest


@pytest.mark.parametrize("cluster", [{"speed": 10}], indirect=True)
async def test_another_controllers_live_claim_fences_the_submission_until_it_expires(
    cluster: Cluster,
) -> None:
    """Another controller claimed the run and may be creating its KFP run right now: this one waits;
    once the claim is older than the peering lifetime (its writer gone) it takes over."""
    await cluster.create(claimed_by_another(cluster.clock))
    status = await cluster.wait(
        lambda: (s := cluster.status("theirs")) and s.get("phase") == "Pending" and s, what="a wait"
    )
    assert condition(status, "Submitted")["reason"] == "SubmissionClaimed"
    assert "other-pod" in condition(status, "Submitted")["message"]
    assert cluster.kfp.calls("POST", "/runs") == 0
    # 60 s of the controller's clock (6 s here): taken over, submitted once, claimed by this controller.
    await cluster.phase("theirs", "Running", timeout_s=30)
    assert cluster.kfp.calls("POST", "/runs") == 1
    holder = cluster.get("theirs")["metadata"]["annotations"][CLAIM].split(" ")[0]
    assert holder == cluster.runtime.identity
