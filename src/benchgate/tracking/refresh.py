"""Before compare: the newest MLflow baseline of this run's profile and workload is copied into the
directory store, which compare reads, and so is its pinned anchor (tracking/anchor.py). The directory
store is the cache, and the fallback when MLflow is unreachable.

What this run saw of MLflow is kept in `tracking.json` beside the results, so the publish stage never
waits again on a server this stage found down: a run waits at most tracking.max_wait_s in total.
Unreachable MLflow is a warning, never a failed run: the verdict stands on the cached baseline (with
no cached baseline the rows are UNKNOWN, not NEW: see `checks.compare.without_reachable_baseline`). A
disk of this machine that refuses a write (the results, the baseline store) is not an outage: it fails
the run with a DiskError naming the path (exit 3).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig
from benchgate.errors import BadInputError
from benchgate.kit.diskfaults import local_faults, writing
from benchgate.kit.files import read_json_object, write_json
from benchgate.results.bundle import load_bundle
from benchgate.store.baseline import read_meta, save_baseline

TRACKING_FILE = "tracking.json"


def warn(message: str) -> None:
    print(f"benchgate: warning: {message}", file=sys.stderr, flush=True)


def read_state(run_dir: Path) -> dict[str, Any]:
    path = run_dir / TRACKING_FILE
    if not path.exists():
        return {}
    try:
        return read_json_object(path)
    except ValueError as e:  # names the file
        raise BadInputError(str(e)) from None


def write_state(path: Path, data: dict[str, Any]) -> None:
    with writing("the results", path):
        write_json(path, data)


def refresh_baseline(config: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Bring the directory store up to date with MLflow's baseline for this run's profile and workload.

    Writes and returns the tracking state: reachable or not, seconds waited, the MLflow baseline run,
    and the profile's recent runs (for the report's history plots).
    """
    from benchgate.tracking import client as tracking
    from benchgate.tracking import read as tracking_read
    from benchgate.tracking.anchor import refresh_anchor

    current = load_bundle(run_dir)
    state: dict[str, Any] = {"enabled": config.tracking.enabled, "waited_s": 0.0, "history": []}
    if not config.tracking.enabled:
        write_state(run_dir / TRACKING_FILE, state)
        return state
    state["uri"] = tracking.resolve_uri(config)
    started = time.monotonic()
    try:
        tracker = tracking.connect(config)
        workload = str(current.workload)
        with local_faults(tracker.local_dir):
            recent = tracking_read.gate_runs(
                tracker, current.machine_profile, workload, limit=config.tracking.history_runs
            )
            baselines = tracking_read.gate_runs(
                tracker, current.machine_profile, workload, baselines_only=True, limit=20
            )
            newest = tracking_read.newest_baseline(baselines)
            if newest is not None:
                _cache(config, tracker, newest, baselines, current.machine_profile, workload)
            # The pinned anchor too (creep rows): a fresh CI runner's store has none.
            anchor = refresh_anchor(tracker, config.gate.baseline_dir, current.machine_profile, workload)
    except tracking.send_errors() as e:
        # Down, or answering with errors (auth, 5xx): either way the cached baseline decides. (A disk
        # that refused the cache is a DiskError, not one of these: it fails the run, naming the path.)
        waited = e.waited_s if isinstance(e, tracking.TrackingUnavailable) else time.monotonic() - started
        state.update(reachable=False, waited_s=waited, error=tracking.short_error(e))
        warn(f"{state['error']}; comparing against the cached baseline in {config.gate.baseline_dir}")
        write_state(run_dir / TRACKING_FILE, state)
        return state
    state.update(
        reachable=True,
        experiment_id=tracker.experiment_id,
        history=[dataclasses.asdict(tracking_read.history_point(r)) for r in reversed(recent)],
    )
    if newest is not None:
        state["baseline_run_id"] = newest.info.run_id
    if anchor is not None:
        state["anchor_run_id"] = anchor
    write_state(run_dir / TRACKING_FILE, state)
    return state


def cache_newest_baseline(config: RunConfig, machine_profile: str, workload: str) -> str:
    """Bring the directory store up to date with MLflow's baseline of `machine_profile` and `workload`
    before there is a run to compare: the eval stage needs the baseline's eval to know whether its first
    seed is out of band (measure/seeds.py), and a fresh CI runner or a cluster pod starts with an empty
    store. Returns what it did, for the task's log; MLflow down or tracking off leaves the store as it is
    (the eval then runs its first seed alone, and compare says why)."""
    from benchgate.tracking import client as tracking
    from benchgate.tracking import read as tracking_read

    if not config.tracking.enabled:
        return "tracking is off: the store's baseline, if any, is used as it is"
    try:
        tracker = tracking.connect(config)
        with local_faults(tracker.local_dir):
            baselines = tracking_read.gate_runs(
                tracker, machine_profile, workload, baselines_only=True, limit=20
            )
            newest = tracking_read.newest_baseline(baselines)
            if newest is None:
                return f"MLflow holds no baseline for {machine_profile}/{workload}"
            _cache(config, tracker, newest, baselines, machine_profile, workload)
    except tracking.send_errors() as e:
        return f"MLflow not reached ({tracking.short_error(e)}): the store's baseline, if any, is used"
    return f"the store holds MLflow's baseline run {newest.info.run_id}"


def _cache(
    config: RunConfig, tracker: Any, newest: Any, baselines: list[Any], machine_profile: str, workload: str
) -> None:
    """Copy MLflow's newest baseline into the directory store unless the store's is as new or newer.

    The store can be newer: a baseline written while MLflow was down, whose run is still in the spool.
    """
    from benchgate.tracking import client as tracking
    from benchgate.tracking import read as tracking_read

    since = tracking_read.baseline_since(newest)
    cached = read_meta(config.gate.baseline_dir, machine_profile, workload)
    # The marking time is stored as text in MLflow; a millisecond of slack absorbs any round trip.
    if cached is not None and (
        cached.get("mlflow_run_id") == newest.info.run_id
        or float(cached.get("created_unix", 0)) >= since - 1e-3
    ):
        return
    with tempfile.TemporaryDirectory(prefix="benchgate-baseline-") as tmp:
        bundle = load_bundle(tracking_read.download_bundle(tracker, newest.info.run_id, Path(tmp)))
        save_baseline(
            bundle,
            config.gate.baseline_dir,
            reason=f"MLflow run {newest.info.run_id}",
            created_unix=since,
            history=tracking_read.history_from_runs(baselines),
            extra={
                "mlflow_run_id": newest.info.run_id,
                "commit": newest.data.tags.get(tracking.TAG_COMMIT),
                "branch": newest.data.tags.get(tracking.TAG_BRANCH),
                "source": f"{tracker.uri} run {newest.info.run_id}",
            },
        )
