"""kopf's record of the handled spec (handlers/persistence.py): what counts as a change of a run."""

from __future__ import annotations

import kopf

from benchgate.controller.decide.fencing import CLAIM
from benchgate.controller.handlers.persistence import StatusDiffBase


def run(annotations: dict[str, str] | None = None) -> kopf.Body:
    metadata: dict[str, object] = {"name": "pr-1", "namespace": "team-a", "resourceVersion": "7"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return kopf.Body({"metadata": metadata, "spec": {"commit": "a" * 40}, "status": {"phase": "Pending"}})


def test_the_submission_claim_is_no_change_of_the_run() -> None:
    # The claim's write must not make kopf record a new diff base (a status write per submission).
    storage = StatusDiffBase()
    unclaimed = storage.build(body=run())
    assert storage.build(body=run({CLAIM: "controller-0 2026-11-28T10:00:00Z"})) == unclaimed
    assert "metadata" not in unclaimed  # no empty annotations left behind to differ from


def test_any_other_annotation_is_a_change() -> None:
    storage = StatusDiffBase()
    assert storage.build(body=run({"team.example.com/owner": "ml"})) != storage.build(body=run())
