"""Where a gate run meets MLflow: the baseline before compare, the record after the final verdict.

    before compare   refresh_baseline: the newest MLflow baseline of this profile and workload is
                     copied into the directory store, which compare reads. The directory store is the
                     cache, and the fallback when MLflow is unreachable.
    after verdict    publish_run: HTML report, baseline policy (directory store), then the run goes
                     into the spool and, if MLflow is reachable, is logged from there; last, the CI
                     reports (summary.md, junit.xml: benchgate.ci_report), which link the MLflow run.

What this run saw of MLflow is kept in `tracking.json` beside the results, so the second half never
waits again on a server the first half found down: a run waits at most tracking.max_wait_s in total.
Unreachable MLflow is a warning, never a failed run: the verdict stands on the cached baseline (with
no cached baseline the rows are UNKNOWN, not NEW: see `compare.without_reachable_baseline`). A disk of
this machine that refuses a write (the results, the baseline store, the spool, MLflow's local store) is
not an outage: it fails the run with a DiskError naming the path (exit 3), and what was written before
(the results, the spooled copy) stays.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchgate.baseline import find_baseline, read_meta, save_baseline
from benchgate.compare import load_comparison
from benchgate.config import RunConfig
from benchgate.diskfaults import local_faults, writing
from benchgate.errors import BadInputError, DiskError
from benchgate.figures import HistoryPoint
from benchgate.files import read_json, read_json_object, write_json, write_text
from benchgate.results import Bundle, load_bundle

TRACKING_FILE = "tracking.json"
RUN_FILE = "run.json"
PUBLISHED_FILE = "published.json"


def warn(message: str) -> None:
    print(f"benchgate: warning: {message}", file=sys.stderr, flush=True)


def _state(run_dir: Path) -> dict[str, Any]:
    path = run_dir / TRACKING_FILE
    if not path.exists():
        return {}
    try:
        return read_json_object(path)
    except ValueError as e:  # names the file
        raise BadInputError(str(e)) from None


def _write(path: Path, data: dict[str, Any]) -> None:
    with writing("the results", path):
        write_json(path, data)


def refresh_baseline(config: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Bring the directory store up to date with MLflow's baseline for this run's profile and workload.

    Writes and returns the tracking state: reachable or not, seconds waited, the MLflow baseline run,
    and the profile's recent runs (for the report's history plots).
    """
    from benchgate import tracking, tracking_read

    current = load_bundle(run_dir)
    state: dict[str, Any] = {"enabled": config.tracking.enabled, "waited_s": 0.0, "history": []}
    if not config.tracking.enabled:
        _write(run_dir / TRACKING_FILE, state)
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
                _cache(config, tracker, newest, baselines, current)
    except tracking.send_errors() as e:
        # Down, or answering with errors (auth, 5xx): either way the cached baseline decides. (A disk
        # that refused the cache is a DiskError, not one of these: it fails the run, naming the path.)
        waited = e.waited_s if isinstance(e, tracking.TrackingUnavailable) else time.monotonic() - started
        state.update(reachable=False, waited_s=waited, error=tracking.short_error(e))
        warn(f"{state['error']}; comparing against the cached baseline in {config.gate.baseline_dir}")
        _write(run_dir / TRACKING_FILE, state)
        return state
    state.update(
        reachable=True,
        experiment_id=tracker.experiment_id,
        history=[dataclasses.asdict(tracking_read.history_point(r)) for r in reversed(recent)],
    )
    if newest is not None:
        state["baseline_run_id"] = newest.info.run_id
    _write(run_dir / TRACKING_FILE, state)
    return state


def _cache(config: RunConfig, tracker: Any, newest: Any, baselines: list[Any], current: Bundle) -> None:
    """Copy MLflow's newest baseline into the directory store unless the store's is as new or newer.

    The store can be newer: a baseline written while MLflow was down, whose run is still in the spool.
    """
    from benchgate import tracking, tracking_read

    since = tracking_read.baseline_since(newest)
    cached = read_meta(config.gate.baseline_dir, current.machine_profile, str(current.workload))
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


def _history(state: dict[str, Any]) -> list[HistoryPoint]:
    return [HistoryPoint(**point) for point in state.get("history", [])]


def write_report(config: RunConfig, run_dir: Path) -> Path:
    """report.html: the verdict with plots against the baseline and the profile's recent runs."""
    from benchgate.plots import html_report

    current = load_bundle(run_dir)
    comparison = load_comparison(run_dir / "compare.json")
    baseline = find_baseline(config.gate.baseline_dir, current.machine_profile, str(current.workload))
    path = run_dir / "report.html"
    html = html_report(current, comparison, baseline, _history(_state(run_dir)))
    with writing("the report", path):
        write_text(path, html)  # atomic: a full disk never leaves half a report
    return path


def publish_run(config: RunConfig, run_dir: Path, hold: str | None = None) -> dict[str, Any]:
    """After the final verdict: spool, report, baseline policy, and MLflow. Writes published.json.

    The run goes into the spool first, before anything that can fail, so a crash in the report or the
    baseline swap leaves the results on disk for `benchgate sync`; the entry is rewritten once the
    report and the baseline marking exist. `hold` (why) keeps the run in the spool unsent: a store that
    would not outlive this process is no place to log it to.
    """
    from benchgate import spool
    from benchgate.ci_report import write_reports
    from benchgate.stages import stage_update_baseline

    record = dict(read_json(run_dir / RUN_FILE))
    if config.tracking.enabled:
        spool.write_entry(config.tracking.spool_dir, run_dir, record)
    write_report(config, run_dir)
    comparison = load_comparison(run_dir / "compare.json")
    written = stage_update_baseline(config, run_dir, comparison)
    published: dict[str, Any] = {"baseline_written": str(written) if written else None}
    if config.tracking.enabled:
        if written is not None:
            meta = read_json(written / "baseline.json")
            record |= {"baseline_since_unix": meta["created_unix"], "baseline_reason": meta["reason"]}
        published |= _record(config, run_dir, record, hold)
    _write(run_dir / PUBLISHED_FILE, published)
    # After the record, so the summary can link the MLflow run; in the results, so cluster runs have them.
    write_reports(run_dir)
    return published


def _record(config: RunConfig, run_dir: Path, record: dict[str, Any], hold: str | None) -> dict[str, Any]:
    from benchgate import spool, tracking, tracking_view

    entry = spool.write_entry(config.tracking.spool_dir, run_dir, record)
    state = _state(run_dir)
    budget = max(0.0, config.tracking.max_wait_s - float(state.get("waited_s", 0.0)))
    spooled = {"mlflow_run_id": None, "spooled": str(entry.resolve())}
    if hold:
        warn(f"{hold}; this run is not logged, it is spooled in {entry}")
        return spooled
    if state.get("reachable") is False:
        warn(f"this run is not in MLflow yet; it is spooled in {entry}: `benchgate sync` sends it")
        return spooled
    try:
        tracker = tracking.connect(config, budget)
        run_id, _ = tracking.log_entry(tracker, entry)
    except tracking.send_errors() as e:
        warn(
            f"logging to MLflow failed ({tracking.short_error(e)}); the run is spooled in {entry}: "
            "`benchgate sync` sends it"
        )
        return spooled
    try:
        spool.remove(entry)
    except DiskError as e:
        raise DiskError(f"the run is logged to MLflow as run {run_id}, but {e}") from None
    return {"mlflow_run_id": run_id, "spooled": None, "mlflow_url": tracking_view.run_url(tracker, run_id)}
