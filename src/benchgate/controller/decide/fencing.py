"""Who may submit a BenchmarkRun's KFP run, and when benchgate's finalizer holds the run: pure decisions.

The finalizer `benchgate.dev/kfp-run` holds a run only while a KFP run of it may be going: from the
claim written just before the KFP run is created to the run's end. Queued, refused and finished runs
and every schedule carry none, so an uninstalled or lost controller leaves nothing undeletable
(the chart's pre-delete hook releases what is still held: `release`).

The claim fences a submission between controllers (a handover, a partition, a second instance): KFP's
find-then-create is not atomic, so before it the controller writes the annotation
`benchgate.dev/submission-claim` ("<identity> <time>") and the finalizer in one merge patch that
carries the resourceVersion it read. The API server refuses that patch (409 Conflict) when anyone
wrote the object since, so of two controllers that read the same version one claims and the other
backs off and looks again. A claim by another controller that is younger than `lease_s` is theirs:
this one waits for it to end in a status, or to expire (its writer gone) before taking over; the KFP
run's name is derived from the object's uid, so the taker finds a run its predecessor created.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from benchgate.controller.access import FINALIZER, GROUP, KOPF_DEFAULT_FINALIZER
from benchgate.controller.decide.planning import View
from benchgate.controller.spec import status as st

CLAIM = f"{GROUP}/submission-claim"
# The finalizer names benchgate wrote: its own, and kopf's default under which earlier releases
# finalized (only on benchgate's own kinds, so no other operator's).
OWN_FINALIZERS = (FINALIZER, KOPF_DEFAULT_FINALIZER)


def claim_token(identity: str, now: datetime) -> str:
    """The claim's value: who claimed, and when (UTC, to the second)."""
    if not identity or " " in identity:
        raise ValueError(f"a controller identity is one word, not {identity!r}")
    return f"{identity} {now.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def parse_claim(token: str | None) -> tuple[str, datetime] | None:
    """(identity, time) of a claim's value; None when there is none or it cannot be read (then it
    fences nothing: a value nobody can read is nobody's claim)."""
    identity, _, when = (token or "").partition(" ")
    try:
        claimed = st.parse_time(when) if identity and when else None
    except ValueError:
        return None
    return (identity, claimed) if claimed is not None else None


def may_claim(annotations: View, identity: str, now: datetime, lease_s: float) -> bool:
    """Whether this controller may claim the submission: no claim, its own, or another's older than
    `lease_s` (its writer is gone: a live controller submits within seconds of its claim)."""
    found = parse_claim((annotations or {}).get(CLAIM))
    if found is None:
        return True
    holder, claimed = found
    return holder == identity or now - claimed > timedelta(seconds=lease_s)


def claim_patch(meta: View, token: str) -> dict[str, Any]:
    """The merge patch that claims the submission: the resourceVersion read (the API server refuses
    the patch with 409 when the object changed since), the claim, and the finalizer added to those
    read (a merge patch replaces the list; the version check keeps anyone's added since)."""
    version = meta.get("resourceVersion")
    if not version:
        raise ValueError("a claim needs the object's metadata.resourceVersion")
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER not in finalizers:
        finalizers.append(FINALIZER)
    return {"metadata": {"resourceVersion": version, "annotations": {CLAIM: token}, "finalizers": finalizers}}


def finalized(status: View, annotations: Mapping[str, Any] | None) -> bool:
    """Whether benchgate's finalizer holds the run: it has not ended, and a KFP run of it exists or
    is being created (its status names one, or a submission was claimed). kopf adds the finalizer
    while this holds, runs the delete handler on deletion, and removes it once it no longer holds."""
    if status.get("phase") in st.TERMINAL_PHASES:
        return False
    return bool(status.get("kfpRunId")) or CLAIM in (annotations or {})


def released(finalizers: list[str] | None) -> list[str] | None:
    """The finalizers without benchgate's, None when it holds none (nothing to write); every other
    finalizer is kept: benchgate removes only what it wrote."""
    kept = [f for f in finalizers or [] if f not in OWN_FINALIZERS]
    return None if len(kept) == len(finalizers or []) else kept
