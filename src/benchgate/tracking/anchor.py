"""The anchor in MLflow: pinning a gate run as its profile's anchor, unpinning, and bringing it into the
directory store (store/anchor.py) before compare.

An anchor is a FINISHED gate run (a parent) tagged benchgate.anchor with the unix time it was pinned;
the newest pin of a profile and workload wins, as the newest marking wins for baselines (read.py), so
pinning an older run again makes it the anchor without touching the others. Who pinned it and why stay
on the run beside it. Unpinning (`--clear`) deletes those tags: MLflow is where a fresh CI runner learns
its anchor, so a pin removed only from one machine's store would come back on the next refresh.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchgate.results.bundle import load_bundle
from benchgate.store.anchor import clear_anchor, read_anchor_meta, save_anchor
from benchgate.tracking.client import (
    TAG_BRANCH,
    TAG_COMMIT,
    TAG_KIND,
    TAG_PROFILE,
    TAG_WORKLOAD,
    Tracker,
    quoted,
)
from benchgate.tracking.read import download_bundle, get_gate_run

if TYPE_CHECKING:
    from mlflow.entities import Run

TAG_ANCHOR = "benchgate.anchor"  # the unix time the run was pinned: the newest pin wins
TAG_ANCHOR_BY = "benchgate.anchor_by"  # who pinned it ($USER)
TAG_ANCHOR_REASON = "benchgate.anchor_reason"  # why (--reason)
ANCHOR_TAGS = (TAG_ANCHOR, TAG_ANCHOR_BY, TAG_ANCHOR_REASON)


def anchored_since(run: Run) -> float:
    try:
        return float(run.data.tags.get(TAG_ANCHOR, "0") or 0)
    except ValueError:  # a hand-set tag that is no time: the oldest pin, never the newest
        return 0.0


def anchored_runs(tracker: Tracker, profile: str, workload: str | None = None, limit: int = 100) -> list[Run]:
    """Finished gate runs of a machine profile (and workload) that carry a pin, newest pin first."""
    clauses = [
        f"tags.`{TAG_KIND}` = 'gate'",
        f"tags.`{TAG_PROFILE}` = '{quoted(profile, 'machine profile')}'",
        f"tags.`{TAG_ANCHOR}` LIKE '%'",
        "attributes.status = 'FINISHED'",
    ]
    if workload:
        clauses.append(f"tags.`{TAG_WORKLOAD}` = '{quoted(workload, 'workload')}'")
    runs = tracker.client.search_runs(
        [tracker.experiment_id], filter_string=" and ".join(clauses), max_results=limit
    )
    return sorted(runs, key=anchored_since, reverse=True)


def newest_anchors(runs: list[Run]) -> dict[str, Run]:
    """The anchor of each workload among `runs`: its newest pin."""
    newest: dict[str, Run] = {}
    for run in runs:
        name = run.data.tags.get(TAG_WORKLOAD, "?")
        if name not in newest or anchored_since(run) > anchored_since(newest[name]):
            newest[name] = run
    return newest


def _store_meta(tracker: Tracker, run: Run) -> dict[str, Any]:
    tags = run.data.tags
    return {
        "mlflow_run_id": run.info.run_id,
        "commit": tags.get(TAG_COMMIT),
        "branch": tags.get(TAG_BRANCH),
        "anchored_by": tags.get(TAG_ANCHOR_BY),
        "source": f"{tracker.uri} run {run.info.run_id}",
        "tracking_uri": tracker.uri,
    }


def cache_anchor(tracker: Tracker, run: Run, baseline_dir: Path) -> Path:
    """Download a pinned run's result files into the anchor store; returns where readers find it."""
    with tempfile.TemporaryDirectory(prefix="benchgate-anchor-") as tmp:
        bundle = load_bundle(download_bundle(tracker, run.info.run_id, Path(tmp)))
        reason = run.data.tags.get(TAG_ANCHOR_REASON) or f"MLflow run {run.info.run_id}"
        return save_anchor(bundle, baseline_dir, reason, anchored_since(run), _store_meta(tracker, run))


def pin(tracker: Tracker, run_id: str, reason: str, by: str, baseline_dir: Path) -> tuple[Run, Path]:
    """Pin a logged gate run as the anchor of its machine profile and workload, in MLflow and in the
    directory store. Its result files are downloaded and checked before anything is tagged: a run whose
    files do not make a baseline (BaselineError, exit 2) is never pinned."""
    get_gate_run(tracker, run_id)
    with tempfile.TemporaryDirectory(prefix="benchgate-anchor-") as tmp:
        bundle = load_bundle(download_bundle(tracker, run_id, Path(tmp)))
        pinned = time.time()
        for key, value in {TAG_ANCHOR: repr(pinned), TAG_ANCHOR_BY: by, TAG_ANCHOR_REASON: reason}.items():
            tracker.client.set_tag(run_id, key, value)
        run = tracker.client.get_run(run_id)
        location = save_anchor(bundle, baseline_dir, reason, pinned, _store_meta(tracker, run))
    return run, location


def unpin(tracker: Tracker, profile: str, workload: str | None = None) -> list[Run]:
    """Remove every pin of this profile (and workload) from MLflow; returns the runs that had one."""
    runs = anchored_runs(tracker, profile, workload, limit=1000)
    for run in runs:
        for key in ANCHOR_TAGS:
            if key in run.data.tags:
                tracker.client.delete_tag(run.info.run_id, key)
    return runs


def refresh_anchor(tracker: Tracker, baseline_dir: Path, profile: str, workload: str) -> str | None:
    """Before compare: the store's anchor made MLflow's. The newest pinned run is downloaded where the
    store lacks it or holds another pin; a stored anchor that this same MLflow no longer pins (cleared
    from another machine) is removed. Returns the anchor's run id, None where there is none."""
    newest = newest_anchors(anchored_runs(tracker, profile, workload)).get(workload)
    cached = read_anchor_meta(baseline_dir, profile, workload)
    if newest is None:
        if cached is not None and cached.get("tracking_uri") == tracker.uri:
            clear_anchor(baseline_dir, profile, workload)
        return None
    since = anchored_since(newest)
    # The pin time is stored as text in MLflow; a millisecond of slack absorbs any round trip.
    if (
        cached is None
        or cached.get("mlflow_run_id") != newest.info.run_id
        or abs(float(cached.get("created_unix", 0)) - since) > 1e-3
    ):
        cache_anchor(tracker, newest, baseline_dir)
    return str(newest.info.run_id)
