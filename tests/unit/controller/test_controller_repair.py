"""The repair timer's decisions without kopf: which BenchmarkRuns it looks up in KFP (`needs_repair`),
and the status it writes for a KFP run it found (`repaired`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from benchgate.controller.decide import planning as plan

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
STAMP = "2026-11-22T12:00:00Z"
QUEUED = {"type": "Submitted", "status": "False", "reason": "Queued", "message": "waiting"}


@pytest.mark.parametrize(
    ("status", "looked_up"),
    [
        ({}, True),  # the submission's write lost whole: kopf's first write (finalizer, record) only
        ({"shortCommit": "0123456789ab", "observedGeneration": 1}, True),
        ({"phase": "Pending", "conditions": [QUEUED]}, True),  # the dispatch timer's submission lost
        ({"phase": "Pending", "conditions": [{**QUEUED, "reason": "KfpUnavailable"}]}, True),
        ({"phase": "Submitted", "kfpRunId": "run-1"}, False),  # the follow timer's
        ({"phase": "Running", "kfpRunId": "run-1"}, False),
        ({"phase": "Submitted", "kfpRunId": ""}, True),  # an empty id names no run
        ({"phase": "Failed"}, False),  # refused before any KFP run (a bad spec, a refused token)
        ({"phase": "Failed", "kfpRunId": "run-1"}, False),
        ({"phase": "Succeeded", "kfpRunId": "run-1"}, False),
        ({"phase": "Canceled"}, False),
    ],
)
def test_which_runs_the_repair_timer_looks_up(status: dict[str, Any], looked_up: bool) -> None:
    assert plan.needs_repair(status) is looked_up


def test_a_run_found_by_its_name_is_submitted_with_reason_repaired() -> None:
    before = {"phase": "Pending", "conditions": [{**QUEUED, "lastTransitionTime": "2026-11-22T11:00:00Z"}]}
    outcome = plan.repaired(before, "br-team-a-pr-1-abc", "run-1", "http://kfp/#/runs/details/run-1", NOW)
    assert outcome.status is not None
    status = outcome.status.patch()
    assert status["phase"] == "Submitted"
    assert status["kfpRunId"] == "run-1" and status["kfpRunName"] == "br-team-a-pr-1-abc"
    assert status["kfpRunUrl"] == "http://kfp/#/runs/details/run-1" and status["kfpState"] == "PENDING"
    assert status["startTime"] == STAMP
    (submitted,) = status["conditions"]
    assert (submitted["status"], submitted["reason"]) == ("True", "Repaired")
    assert "br-team-a-pr-1-abc" in submitted["message"] and submitted["lastTransitionTime"] == STAMP
    # Quiet: the repair is logged, not an Event; nothing for kopf to retry or give up.
    assert (outcome.warning, outcome.notice, outcome.give_up) == (None, None, None)
    assert not plan.needs_repair(status)


def test_a_repair_keeps_the_other_conditions() -> None:
    reachable = {"type": "KfpReachable", "status": "False", "reason": "KfpUnavailable", "message": "down"}
    outcome = plan.repaired({"conditions": [reachable]}, "br-x", "run-2", "", NOW)
    assert outcome.status is not None
    kinds = {c["type"]: c["reason"] for c in outcome.status.patch()["conditions"]}
    assert kinds == {"KfpReachable": "KfpUnavailable", "Submitted": "Repaired"}
