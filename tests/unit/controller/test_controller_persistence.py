"""kopf's record of the handled spec (handlers/persistence.py): what counts as a change of a run."""

from __future__ import annotations

import kopf
import pytest

from benchgate.controller.decide.fencing import CLAIM
from benchgate.controller.handlers import persistence
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


def created(uid: str = "u-1", record: str | None = None) -> kopf.Body:
    status: dict[str, object] = {}
    if record is not None:
        status["kopf"] = {"last-handled-configuration": record}
    return kopf.Body(
        {"metadata": {"name": "pr-1", "uid": uid}, "spec": {"commit": "a" * 40}, "status": status}
    )


def test_the_record_is_held_until_a_watch_event_shows_it() -> None:
    # The claim's watch event shows the run before the handler's status write: without the record,
    # kopf would take the run for new again and write the record a second time.
    storage = StatusDiffBase()
    essence = storage.build(body=created())
    patch = kopf.Patch()
    storage.store(body=created(), patch=patch, essence=essence)
    written = patch["status"]["kopf"]["last-handled-configuration"]
    assert storage.fetch(body=created()) == essence  # the claim's event: handled, no change
    assert storage.fetch(body=created(uid="u-2")) is None  # another run is new
    # The status write seen: the status answers from now on, and the memory forgets the run.
    assert storage.fetch(body=created(record=written)) == essence
    assert storage.unseen == {}


def test_the_memory_answers_for_a_minute_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    # A status write that was lost leaves the run new again at its next event, as after a restart.
    storage = StatusDiffBase()
    storage.store(body=created(), patch=kopf.Patch(), essence=storage.build(body=created()))
    monkeypatch.setattr(persistence, "UNSEEN_HOLD_S", -1.0)
    assert storage.fetch(body=created()) is None
    storage.store(body=created(uid="u-2"), patch=kopf.Patch(), essence=storage.build(body=created()))
    assert list(storage.unseen) == ["u-2"]  # the expired run is dropped at the next write
