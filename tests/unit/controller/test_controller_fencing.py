"""Who may submit a run, and when benchgate's finalizer holds it (`decide.fencing`): pure decisions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from benchgate.controller.access import FINALIZER, KOPF_DEFAULT_FINALIZER
from benchgate.controller.decide import fencing

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def test_a_claim_names_its_instance_and_time_and_reads_back() -> None:
    token = fencing.claim_token("benchgate-7d9f-x2x", NOW)
    assert token == "benchgate-7d9f-x2x 2026-11-28T12:00:00Z"
    assert fencing.parse_claim(token) == ("benchgate-7d9f-x2x", NOW)
    for unreadable in (None, "", "someone", "someone yesterday"):
        assert fencing.parse_claim(unreadable) is None
    with pytest.raises(ValueError, match="one word"):
        fencing.claim_token("two words", NOW)


def test_another_controllers_claim_fences_until_its_lease_ends() -> None:
    mine, theirs = "pod-a", "pod-b"
    fresh = {fencing.CLAIM: fencing.claim_token(theirs, NOW - timedelta(seconds=10))}
    stale = {fencing.CLAIM: fencing.claim_token(theirs, NOW - timedelta(seconds=61))}
    assert fencing.may_claim({}, mine, NOW, 60)  # nobody's
    assert fencing.may_claim({fencing.CLAIM: fencing.claim_token(mine, NOW)}, mine, NOW, 60)  # its own
    assert not fencing.may_claim(fresh, mine, NOW, 60)  # another's, live: it submits, this one waits
    assert fencing.may_claim(stale, mine, NOW, 60)  # its writer gone: taken over
    assert fencing.may_claim({fencing.CLAIM: "garbage"}, mine, NOW, 60)  # unreadable: nobody's


def test_the_claim_patch_carries_the_version_read_and_adds_the_finalizer() -> None:
    """The API server refuses a merge patch whose metadata.resourceVersion is not the object's (409):
    two controllers that read one version cannot both claim."""
    meta = {"resourceVersion": "41", "finalizers": ["example.com/other"]}
    patch = fencing.claim_patch(meta, "pod-a 2026-11-28T12:00:00Z")
    assert patch == {
        "metadata": {
            "resourceVersion": "41",
            "annotations": {fencing.CLAIM: "pod-a 2026-11-28T12:00:00Z"},
            "finalizers": ["example.com/other", FINALIZER],
        }
    }
    again = fencing.claim_patch({"resourceVersion": "42", "finalizers": [FINALIZER]}, "pod-a x")
    assert again["metadata"]["finalizers"] == [FINALIZER]
    with pytest.raises(ValueError, match="resourceVersion"):
        fencing.claim_patch({}, "pod-a x")


def test_the_finalizer_holds_only_while_a_kfp_run_may_go() -> None:
    claimed = {fencing.CLAIM: "pod-a 2026-11-28T12:00:00Z"}
    assert not fencing.finalized({}, {})  # queued or new: no KFP run
    assert fencing.finalized({}, claimed)  # being submitted
    assert fencing.finalized({"phase": "Running", "kfpRunId": "r"}, None)
    for ended in ("Succeeded", "Failed", "Canceled"):
        assert not fencing.finalized({"phase": ended, "kfpRunId": "r"}, claimed)


def test_release_keeps_every_finalizer_but_benchgates() -> None:
    assert fencing.released(["example.com/other", FINALIZER]) == ["example.com/other"]
    assert fencing.released([KOPF_DEFAULT_FINALIZER]) == []
    assert fencing.released(["example.com/other"]) is None  # nothing to write
    assert fencing.released(None) is None
