"""The controller's decisions without kopf, kmock or a clock: `planning` (BenchmarkRun) and the schedule
timer's steps in `schedule`, each from plain values (spec, status, what a handler gathered, `now`) to
the status it writes, its Event and whether kopf retries or gives up."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from benchgate.controller.decide import conditions as cond
from benchgate.controller.decide import planning as plan
from benchgate.controller.decide import schedule as sched
from benchgate.controller.decide.planning import REFUSED, Ending, Outcome, Submission
from benchgate.controller.decide.spec_edits import spec_changed
from benchgate.controller.spec import status as st
from benchgate.kfp.run_request import pipeline_parameter_names

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
STAMP = "2026-11-22T12:00:00Z"
SHA = "0123456789abcdef0123456789abcdef01234567"
SPEC = {"commit": SHA, "repository": "https://github.com/example/trainer.git", "worldSize": 2}
META = {"name": "pr-1", "namespace": "team-a", "uid": "uid-1", "generation": 3}


def written(outcome: Outcome) -> dict[str, Any]:
    assert outcome.status is not None
    return outcome.status.patch()


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def submit(spec: dict[str, Any], status: dict[str, Any] | None = None) -> Submission | Outcome:
    return plan.submission(
        spec, META, status or {}, "team-a", "pr-1", "uid-1", "", pipeline_parameter_names(), NOW
    )


def test_the_decisions_need_no_kopf() -> None:
    modules = ", ".join(
        f"benchgate.controller.decide.{name}" for name in ("planning", "schedule", "conditions")
    )
    code = f"import sys, {modules}; print('kopf' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# ---------------------------------------------------------------- create


@pytest.mark.parametrize(
    ("status", "remembered", "seen"),
    [
        ({}, False, False),
        ({"phase": "Pending"}, False, False),  # queued or KFP was down: submit again
        ({"kfpRunId": "run-1"}, False, True),
        ({"phase": "Failed"}, False, True),  # refused
        ({}, True, True),  # an old body replayed: this controller decided already
    ],
)
def test_a_create_event_is_handled_once(status: dict[str, Any], remembered: bool, seen: bool) -> None:
    assert plan.seen_before(status, remembered) is seen


def test_a_valid_spec_is_submitted_under_the_objects_run_name() -> None:
    submission = submit(SPEC)
    assert isinstance(submission, Submission)
    assert submission.run_name == st.kfp_run_name("team-a", "pr-1", "uid-1")
    assert submission.arguments["commit"] == SHA and submission.arguments["world_size_n"] == 2
    assert submission.status.patch() == {"shortCommit": SHA[:12], "observedGeneration": 3}


def test_an_invalid_spec_is_refused_for_good_with_an_event() -> None:
    outcome = submit({**SPEC, "worldSize": -2})
    assert isinstance(outcome, Outcome)
    status = written(outcome)
    assert status["phase"] == "Failed" and status["completionTime"] == STAMP
    found = conditions(status)
    assert found["Submitted"]["status"] == "False" and found["Submitted"]["reason"] == "InvalidSpec"
    assert found["Finished"]["status"] == "True" and "spec.worldSize" in found["Finished"]["message"]
    assert outcome.warning is not None and outcome.warning[0] == "InvalidSpec"
    assert outcome.give_up is not None and outcome.give_up.startswith("invalid spec: spec.worldSize")


def test_slots_of_the_namespace_limit() -> None:
    assert plan.slot_free(set(), "a", 2) and plan.slot_free({"a"}, "b", 2)
    assert not plan.slot_free({"a", "b"}, "c", 2)
    assert plan.slot_free({"a", "b"}, "a", 2)  # a run holding one keeps it
    assert plan.slot_free({"a", "b"}, "c", 0)  # 0: no limit


def test_waiting_for_a_slot_or_for_kfp_is_pending_and_told_once() -> None:
    queued = plan.queued({}, "team-a", 4, NOW)
    message = "waiting: 4 BenchmarkRuns of namespace team-a are submitted or running"
    assert written(queued)["phase"] == "Pending"
    assert conditions(written(queued))["Submitted"]["reason"] == "Queued"
    # A state, not an error: a normal Event when the wait starts, no retry (the dispatch timer looks).
    assert queued.notice == ("Queued", message) and queued.warning is None
    assert plan.waiting(written(queued))
    # The next look finds it still queued: nothing to write, nothing to tell.
    assert plan.queued(written(queued), "team-a", 4, NOW + timedelta(seconds=30)) == plan.Outcome()
    # Still not submitted five minutes later, now because KFP is down: a warning, the transition holds.
    later = NOW + timedelta(minutes=5)
    down = plan.kfp_unavailable(written(queued), "KFP at http://kfp: HTTP 503", later)
    submitted = conditions(written(down))["Submitted"]
    assert submitted["reason"] == "KfpUnavailable" and submitted["lastTransitionTime"] == STAMP
    assert down.warning == ("KfpUnavailable", "KFP at http://kfp: HTTP 503")
    assert down.give_up is None and plan.waiting(written(down))
    # Down with another error text: the message is updated, the warning not repeated.
    again = plan.kfp_unavailable(written(down), "KFP at http://kfp: HTTP 502", later)
    assert again.status is not None and again.warning is None
    assert not plan.waiting({**written(down), "kfpRunId": "run-1"})


def test_a_wait_told_already_is_not_told_again_from_a_status_that_predates_it() -> None:
    # The look before told the outage, but its write has not landed: the status still reads as new.
    stale: dict[str, Any] = {}
    down = plan.kfp_unavailable(stale, "KFP at http://kfp: HTTP 503", NOW, told="KfpUnavailable")
    assert conditions(written(down))["Submitted"]["reason"] == "KfpUnavailable"  # written again
    assert down.warning is None and down.notice is None  # but not told again
    queued = plan.queued(stale, "team-a", 4, NOW, told="Queued")
    assert queued.notice is None and queued.warning is None
    # What was told is the reason: waiting for something else is told, whatever the status says.
    assert plan.queued(written(down), "team-a", 4, NOW, told="KfpUnavailable").notice is not None
    assert plan.kfp_unavailable(written(queued), "HTTP 503", NOW, told="Queued").warning is not None
    # Nothing told (a controller just started): the status speaks.
    assert plan.kfp_unavailable(written(down), "HTTP 502", NOW).warning is None
    assert plan.kfp_unavailable(stale, "HTTP 502", NOW).warning is not None


@pytest.mark.parametrize(("unauthorized", "reason"), [(True, "KfpUnauthorized"), (False, "KfpRejected")])
def test_kfp_refusing_the_token_or_the_run_fails_for_good(unauthorized: bool, reason: str) -> None:
    outcome = plan.kfp_refused({}, unauthorized, "HTTP 400: bad parameter", NOW)
    assert written(outcome)["phase"] == "Failed"
    assert conditions(written(outcome))["Submitted"]["reason"] == reason
    assert outcome.warning == (reason, "HTTP 400: bad parameter")
    assert outcome.give_up == "HTTP 400: bad parameter"


@pytest.mark.parametrize(("reused", "said"), [(False, "submitted KFP run"), (True, "attached to existing")])
def test_a_submitted_run_is_named_and_linked(reused: bool, said: str) -> None:
    outcome = plan.submitted({}, "br-x", "run-1", "http://kfp/#/runs/details/run-1", reused, NOW)
    status = written(outcome)
    assert {k: v for k, v in status.items() if k != "conditions"} == {
        "phase": "Submitted",
        "kfpRunId": "run-1",
        "kfpRunName": "br-x",
        "kfpRunUrl": "http://kfp/#/runs/details/run-1",
        "kfpState": "PENDING",
        "startTime": STAMP,
    }
    assert said in conditions(status)["Submitted"]["message"]
    assert outcome.give_up is None


# ---------------------------------------------------------------- follow


RUNNING = {"phase": "Running", "kfpRunId": "run-1", "kfpState": "RUNNING", "startTime": STAMP}


def test_which_runs_the_timers_and_the_slots_look_at() -> None:
    assert plan.following(RUNNING) and not plan.following({"phase": "Pending"})
    assert not plan.following({**RUNNING, "phase": "Succeeded"})
    assert plan.holds_slot(RUNNING) and not plan.holds_slot({"phase": "Failed"})
    assert plan.expiring({"ttlSecondsAfterFinished": 0}, {"phase": "Canceled"})
    assert not plan.expiring({"ttlSecondsAfterFinished": 60}, RUNNING)
    assert not plan.expiring({}, {"phase": "Succeeded"})


def test_kopfs_default_finalizer_is_replaced_by_benchgates() -> None:
    old, new = "kopf.zalando.org/KopfFinalizerMarker", "benchgate.dev/kfp-run"
    assert plan.migrated_finalizers([old]) == [new]
    assert plan.migrated_finalizers(["other.io/keep", old, new]) == ["other.io/keep", new]
    assert plan.migrated_finalizers([new]) is None and plan.migrated_finalizers(None) is None


def test_the_active_deadline() -> None:
    spec = {"activeDeadlineSeconds": 60}
    assert not plan.past_deadline(spec, RUNNING, NOW + timedelta(seconds=60))
    assert plan.past_deadline(spec, RUNNING, NOW + timedelta(seconds=61))
    assert not plan.past_deadline({}, RUNNING, NOW + timedelta(days=9))
    status = written(plan.deadline_exceeded(spec, RUNNING, True, NOW))
    assert status["phase"] == "Failed" and status["completionTime"] == STAMP
    finished = conditions(status)["Finished"]
    assert finished["reason"] == "DeadlineExceeded" and "activeDeadlineSeconds=60" in finished["message"]
    assert "was terminated" in finished["message"]
    canceling = conditions(written(plan.deadline_exceeded(spec, RUNNING, False, NOW)))["Finished"]
    assert "already being canceled" in canceling["message"]


def test_a_refused_terminate_is_a_condition_and_the_phase_holds() -> None:
    status = written(plan.terminate_refused(RUNNING, "terminating after the deadline: HTTP 403", NOW))
    assert list(status) == ["conditions"]
    reachable = conditions(status)["KfpReachable"]
    assert reachable["status"] == "False" and reachable["reason"] == "TerminateRefused"
    assert "HTTP 403" in reachable["message"]


def test_an_unreadable_kfp_run_keeps_its_phase() -> None:
    status = written(plan.kfp_unreadable(RUNNING, "KFP at http://kfp: timed out", NOW))
    assert list(status) == ["conditions"]
    assert conditions(status)["KfpReachable"]["status"] == "False"


def test_a_kfp_run_gone_fails_the_run_once_it_stays_gone() -> None:
    message = "KFP at http://kfp has no run run-1 (HTTP 404)"
    first = plan.kfp_run_gone(RUNNING, message, NOW)
    status = written(first)
    assert list(status) == ["conditions"] and first.warning is None  # one 404 could be a proxy
    missing = conditions(status)["KfpReachable"]
    assert (missing["status"], missing["reason"]) == ("False", "KfpRunGone")
    looked = {**RUNNING, "conditions": status["conditions"]}
    assert written(plan.kfp_run_gone(looked, message, NOW + plan.GONE_AFTER / 2)).get("phase") is None
    gone = plan.kfp_run_gone(looked, message, NOW + plan.GONE_AFTER)
    ended = written(gone)
    assert ended["phase"] == "Failed" and conditions(ended)["Finished"]["reason"] == "KfpRunGone"
    assert gone.warning is not None and "missing since 2026-11-22T12:00:00Z" in gone.warning[1]
    assert not plan.holds_slot(ended) and not plan.following(ended)


def test_an_unchanged_kfp_run_writes_nothing() -> None:
    first = plan.observed({**RUNNING, "kfpState": "PENDING", "phase": "Submitted"}, "RUNNING", [], NOW)
    assert isinstance(first, Outcome)
    status = written(first)
    assert status["phase"] == "Running" and status["kfpState"] == "RUNNING"
    assert conditions(status)["KfpReachable"]["reason"] == "KfpRunning"
    again = plan.observed({**RUNNING, **status}, "RUNNING", [], NOW + timedelta(seconds=30))
    assert again == Outcome()


def test_an_ended_kfp_run_is_an_ending_before_anything_is_written() -> None:
    ending = plan.observed(RUNNING, "FAILED", [("gate", "FAILED")], NOW)
    assert isinstance(ending, Ending)
    assert (ending.kfp_state, ending.phase, ending.reason) == ("FAILED", "Failed", "Regression")


def test_the_verdict_found_in_mlflow_is_written_with_the_end() -> None:
    found = {
        "run_id": "mlflow-1",
        "url": "https://mlflow.example/#/experiments/1/runs/mlflow-1",
        "tags": {"benchgate.verdict": "WARN"},
        "metrics": {"gate/ws1/tokens_per_s_change_pct": -3.21, "gate/checks_warn": 1.0},
    }
    ending = Ending("SUCCEEDED", "Succeeded", "GatePassed", "the gate passed")
    status = written(plan.ended(RUNNING, ending, found, None, True, NOW))
    assert status["phase"] == "Succeeded" and status["kfpState"] == "SUCCEEDED"
    assert status["completionTime"] == STAMP
    assert status["verdict"] == {
        "result": "WARN",
        "tokensPerSecondChangePct": {"ws1": -3.21},
        "throughputChange": "-3.2% (ws=1)",
        "checks": {"WARN": 1},
    }
    assert status["mlflowRunId"] == "mlflow-1" and status["mlflowRunUrl"] == found["url"]
    assert conditions(status)["VerdictRead"]["reason"] == "FromMLflow"
    assert conditions(status)["Finished"]["reason"] == "GatePassed"


@pytest.mark.parametrize(
    ("error", "mlflow_set", "why"),
    [
        (ConnectionError("refused"), True, "MLflow unavailable: ConnectionError: refused"),
        (None, True, "no gate run in MLflow for this KFP run"),
        (None, False, "no MLflow set"),
    ],
)
def test_without_a_verdict_the_end_is_written_and_says_why(
    error: Exception | None, mlflow_set: bool, why: str
) -> None:
    ending = Ending("CANCELED", "Canceled", "KfpCanceled", "the KFP run was canceled")
    status = written(plan.ended(RUNNING, ending, None, error, mlflow_set, NOW))
    assert status["phase"] == "Canceled" and "verdict" not in status and "mlflowRunId" not in status
    verdict = conditions(status)["VerdictRead"]
    assert verdict["status"] == "False" and verdict["message"] == why


def test_expiry_after_the_ttl() -> None:
    done = {"phase": "Succeeded", "completionTime": STAMP}
    assert not plan.expired({"ttlSecondsAfterFinished": 60}, done, NOW + timedelta(seconds=59))
    assert plan.expired({"ttlSecondsAfterFinished": 60}, done, NOW + timedelta(seconds=60))


@pytest.mark.parametrize(
    ("status", "remembered", "run"),
    [
        ({"phase": "Succeeded", "kfpRunId": "run-1"}, None, None),  # ended: KFP left alone
        ({}, REFUSED, None),  # refused before any KFP run
        ({"phase": "Running", "kfpRunId": "run-1"}, "run-1", "run-1"),
        ({"phase": "Pending"}, "run-2", "run-2"),  # deleted while submitting: the status predates it
        ({"phase": "Pending"}, None, ""),  # ... and the controller restarted since: look it up
    ],
)
def test_what_a_deletion_terminates(status: dict[str, Any], remembered: str | None, run: str | None) -> None:
    assert plan.to_terminate(status, remembered) == run


# ---------------------------------------------------------------- what every written status gets


def as_written(outcome: Outcome | Ending, current: dict[str, Any] | None = None, generation: int = 1) -> Any:
    assert isinstance(outcome, Outcome) and outcome.status is not None
    return cond.written(outcome.status, current or {}, generation, NOW)


def ended_as(phase: str, reason: str) -> Outcome:
    state = {"Succeeded": "SUCCEEDED", "Failed": "FAILED", "Canceled": "CANCELED"}[phase]
    return plan.ended(RUNNING, Ending(state, phase, reason, f"ended: {reason}"), None, None, False, NOW)  # type: ignore[arg-type]


PHASE_OUTCOMES = [
    ("queued", lambda: plan.queued({}, "team-a", 4, NOW), "Unknown", "Pending"),
    ("kfp-down", lambda: plan.kfp_unavailable({}, "HTTP 503", NOW), "Unknown", "Pending"),
    (
        "submitted",
        lambda: plan.submitted({}, "br-x", "run-1", "http://kfp", False, NOW),
        "Unknown",
        "Submitted",
    ),
    (
        "running",
        lambda: plan.observed({**RUNNING, "phase": "Submitted"}, "RUNNING", [], NOW),
        "Unknown",
        "Running",
    ),
    ("passed", lambda: ended_as("Succeeded", "GatePassed"), "True", "GatePassed"),
    ("regression", lambda: ended_as("Failed", "Regression"), "False", "Regression"),
    ("task-failed", lambda: ended_as("Failed", "RunFailed"), "False", "RunFailed"),
    ("canceled", lambda: ended_as("Canceled", "KfpCanceled"), "False", "KfpCanceled"),
    ("deadline", lambda: plan.deadline_exceeded({}, RUNNING, True, NOW), "False", "DeadlineExceeded"),
    ("invalid-spec", lambda: submit({**SPEC, "worldSize": -2}), "False", "InvalidSpec"),
    ("token-refused", lambda: plan.kfp_refused({}, True, "HTTP 401", NOW), "False", "KfpUnauthorized"),
]


@pytest.mark.parametrize(
    ("make", "succeeded", "reason"), [p[1:] for p in PHASE_OUTCOMES], ids=[p[0] for p in PHASE_OUTCOMES]
)
def test_every_phase_is_written_with_succeeded_ready_and_the_generation(
    make: Any, succeeded: str, reason: str
) -> None:
    """`kubectl wait --for=condition=Succeeded` ends on a pass, `...=Succeeded=False` on a failure, and
    neither while the run is unfinished (Unknown); Ready is True only for a pass."""
    status = as_written(make())
    found = conditions(status)
    assert found["Succeeded"]["status"] == succeeded and found["Succeeded"]["reason"] == reason
    ready = found["Ready"]
    assert ready["status"] == ("True" if succeeded == "True" else "False")
    assert ready["reason"] == (reason if succeeded != "Unknown" else "Progressing")
    assert status["observedGeneration"] == 1
    assert all(c["observedGeneration"] == 1 for c in status["conditions"]), status["conditions"]
    st.BenchmarkRunStatus.model_validate(status)  # still the model's


def test_a_condition_carries_the_generation_it_was_written_at() -> None:
    """Edited to generation 3 after its submission at 1: the run goes on as submitted (top-level
    observedGeneration 1), and what is written now is stamped 3; older conditions keep theirs."""
    current = as_written(plan.submitted({}, "br-x", "run-1", "http://kfp", False, NOW))
    assert current["observedGeneration"] == 1
    running = plan.observed({**RUNNING, **current}, "RUNNING", [], NOW)
    status = as_written(running, {**RUNNING, **current}, generation=3)
    found = conditions(status)
    assert status["observedGeneration"] == 1
    assert found["KfpReachable"]["observedGeneration"] == 3 and found["Succeeded"]["observedGeneration"] == 3
    assert found["Submitted"]["observedGeneration"] == 1
    # No phase written (an unreadable KFP run): nothing derived, the new condition stamped all the same.
    unreadable = as_written(plan.kfp_unreadable(status, "timed out", NOW), status, generation=3)
    assert set(unreadable) == {"conditions"}
    assert conditions(unreadable)["KfpReachable"]["observedGeneration"] == 3
    # A schedule's conditions are stamped too; it has no Succeeded or Ready.
    skipped = look({**SCHEDULE, "suspend": True})
    schedule_status = as_written(skipped, generation=2)
    assert {c["type"] for c in schedule_status["conditions"]} == {"Valid", "Scheduled"}
    assert all(c["observedGeneration"] == 2 for c in schedule_status["conditions"])


def test_a_spec_edited_after_the_submission_is_reported_once_per_generation() -> None:
    """Edits inside workloadArgs or config pass the CRD's rule; the run goes on as submitted."""
    submitted = as_written(plan.submitted({}, "br-x", "run-1", "http://kfp", False, NOW))
    current = {**RUNNING, **submitted}
    assert spec_changed(SPEC, current, {"generation": 1}, NOW) == Outcome()  # nothing edited
    edited = spec_changed(SPEC, current, {"generation": 2}, NOW)
    assert edited.warning is not None and edited.warning[0] == "SpecChangedAfterSubmit"
    status = as_written(edited, current, generation=2)
    applied = conditions(status)["SpecApplied"]
    assert applied["status"] == "False" and applied["reason"] == "SpecChangedAfterSubmit"
    assert applied["observedGeneration"] == 2 and "generation 1" in applied["message"]
    # The edit is answered: observedGeneration reaches 2 (nothing waits for it forever), the
    # submitted generation is kept apart; every condition holds at 2 now.
    assert status["observedGeneration"] == 2 and status["submittedGeneration"] == 1
    assert "phase" not in status
    assert all(c["observedGeneration"] == 2 for c in status["conditions"])
    # Seen again at the same generation: nothing written, no second Event; a newer one is told.
    again = {**current, **status}
    assert spec_changed(SPEC, again, {"generation": 2}, NOW) == Outcome()
    third = spec_changed(SPEC, again, {"generation": 3}, NOW)
    assert third.warning is not None and "submitted (generation 1)" in third.warning[1]
    assert third.status is not None and third.status.submitted_generation == 1


def test_a_spec_edited_while_the_run_waits_is_the_one_submitted() -> None:
    queued = as_written(plan.queued({}, "team-a", 1, NOW))
    edited = spec_changed({**SPEC, "commit": "f" * 40}, queued, {"generation": 2}, NOW)
    assert edited.warning is None
    status = as_written(edited, queued, generation=2)
    assert status["observedGeneration"] == 2 and status["shortCommit"] == "f" * 12
    assert conditions(status)["SpecApplied"]["status"] == "True"


# ---------------------------------------------------------------- the schedule timer


SCHEDULE = {
    "schedule": "0 2 * * *",
    "runTemplate": {"spec": {"repository": "https://github.com/example/trainer.git", "branch": "main"}},
}
SCHEDULE_META = {
    "name": "nightly",
    "namespace": "team-a",
    "uid": "s-1",
    "generation": 2,
    "creationTimestamp": "2026-11-21T12:00:00Z",
}
DUE = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)


def look(spec: dict[str, Any], status: dict[str, Any] | None = None) -> Outcome | sched.Due:
    return sched.look(spec, status or {}, SCHEDULE_META, NOW)


def owned(name: str, phase: str) -> dict[str, Any]:
    meta = {"name": name, "creationTimestamp": "2026-11-20T02:00:00Z", "ownerReferences": [{"uid": "s-1"}]}
    return {"metadata": meta, "status": {"phase": phase}}


def test_an_invalid_schedule_is_a_condition_with_one_event_per_message() -> None:
    bad = {**SCHEDULE, "schedule": "every night"}
    reconciled = sched.reconcile(bad, {}, SCHEDULE_META, NOW)
    assert reconciled is not None
    valid = conditions(reconciled.patch())["Valid"]
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.schedule" in valid["message"] and valid["observedGeneration"] == 2
    assert reconciled.patch()["nextScheduleTime"] is None  # none while invalid (null: removed)
    first = look(bad)
    assert isinstance(first, Outcome) and first.status is None  # Valid is reconcile's to write
    assert first.warning is not None and first.warning[0] == "InvalidSpec"
    # The next look: nothing to write, nothing to tell.
    said = {**reconciled.patch(), "nextScheduleTime": None}
    assert sched.reconcile(bad, said, SCHEDULE_META, NOW + timedelta(minutes=1)) is None
    again = look(bad, said)
    assert isinstance(again, Outcome) and again.warning is None and again.status is None


def test_a_due_time_and_the_times_skipped() -> None:
    assert look(SCHEDULE, {"lastScheduleTime": "2026-11-22T02:00:00Z"}) == Outcome()  # nothing due
    due = look(SCHEDULE)
    assert isinstance(due, sched.Due) and due.time == DUE
    assert due.handled().patch() == {"lastScheduleTime": "2026-11-22T02:00:00Z"}
    for spec, why in (({"suspend": True}, "suspended"), ({"startingDeadlineSeconds": 60}, "missed")):
        skipped = look({**SCHEDULE, **spec})
        assert isinstance(skipped, Outcome)
        status = written(skipped)
        assert status["lastScheduleTime"] == "2026-11-22T02:00:00Z"
        assert conditions(status)["Valid"]["status"] == "True"
        scheduled = conditions(status)["Scheduled"]
        assert scheduled["reason"] == "Skipped" and why in scheduled["message"]


@pytest.mark.parametrize(("policy", "skipped"), [("Forbid", True), ("Allow", False), ("Replace", False)])
def test_an_active_run_skips_the_time_only_under_forbid(policy: str, skipped: bool) -> None:
    due = look({**SCHEDULE, "concurrencyPolicy": policy})
    assert isinstance(due, sched.Due)
    outcome = sched.forbidden(due, [owned("nightly-1", "Running")], {}, NOW)
    assert (outcome is not None) is skipped
    if outcome is not None:
        scheduled = conditions(written(outcome))["Scheduled"]
        assert scheduled["reason"] == "ConcurrencyForbid" and "nightly-1" in scheduled["message"]
    assert sched.forbidden(due, [owned("nightly-0", "Succeeded")], {}, NOW) is None


def test_an_unresolved_branch_skips_the_time_with_an_event() -> None:
    due = look(SCHEDULE)
    assert isinstance(due, sched.Due)
    outcome = sched.branch_unresolved(due, {}, "no branch release/9.9", NOW)
    assert conditions(written(outcome))["Scheduled"]["reason"] == "BranchUnresolved"
    assert outcome.warning == ("BranchUnresolved", "no branch release/9.9")


def test_a_refused_create_skips_the_time_with_one_event_per_refusal() -> None:
    due = look(SCHEDULE)
    assert isinstance(due, sched.Due)

    def answer(time: sched.Due, quota: str = "exceeded quota") -> str:  # as clients.KubeRuns words it
        name = time.run_name()
        return f'creating BenchmarkRun team-a/{name}: HTTP 403: benchmarkruns "{name}" is forbidden: {quota}'

    first = sched.create_refused(due, {}, answer(due), NOW)
    scheduled = conditions(written(first))["Scheduled"]
    assert scheduled["status"] == "False" and scheduled["reason"] == "CreateRefused"
    assert first.warning == ("CreateRefused", answer(due))
    # The next night, the same refusal of another run (its name in the answer): not told again ...
    status = written(first)
    tomorrow = sched.Due(due.spec, due.time + timedelta(days=1), due.schedule)
    assert tomorrow.run_name() != due.run_name()
    assert sched.create_refused(tomorrow, status, answer(tomorrow), NOW).warning is None
    # ... also when the status does not show the first yet (its write pending): what was told counts.
    told = sched.refusal(due, answer(due))
    assert sched.create_refused(tomorrow, {}, answer(tomorrow), NOW, told=told).warning is None
    # Another refusal is told, and so is the same one after a time that was not refused.
    other = answer(tomorrow, "exceeded quota (limited: 4)")
    assert sched.create_refused(tomorrow, status, other, NOW).warning is not None
    assert sched.create_refused(tomorrow, status, other, NOW, told=told).warning is not None
    created = {**status, "conditions": [{**scheduled, "status": "True", "reason": "RunCreated"}]}
    assert sched.create_refused(tomorrow, created, answer(tomorrow), NOW).warning is not None


@pytest.mark.parametrize(("policy", "replaced"), [("Allow", []), ("Replace", ["nightly-2"])])
def test_a_creation_replaces_prunes_and_records(policy: str, replaced: list[str]) -> None:
    spec = {**SCHEDULE, "concurrencyPolicy": policy, "successfulRunsHistoryLimit": 1}
    due = look(spec)
    assert isinstance(due, sched.Due)
    runs = [owned("nightly-0", "Succeeded"), owned("nightly-1", "Succeeded"), owned("nightly-2", "Running")]
    runs[1]["metadata"]["creationTimestamp"] = "2026-11-21T02:00:00Z"
    schedule = {"metadata": SCHEDULE_META, "spec": spec}
    creation = sched.creation(due, schedule, runs, "c" * 40, {}, NOW)
    name = creation.manifest["metadata"]["name"]
    assert creation.manifest["spec"]["commit"] == "c" * 40
    assert creation.replace == replaced and creation.prune == ["nightly-0"]
    status = written(creation.outcome)
    assert status["lastRunName"] == name and status["lastCommit"] == "c" * 40
    assert status["active"] == ([] if replaced else ["nightly-2"]) + [name]
    assert status["observedGeneration"] == 2 and status["lastScheduleTime"] == "2026-11-22T02:00:00Z"
    assert conditions(status)["Scheduled"]["message"] == f"created {name} at {'c' * 12}"
