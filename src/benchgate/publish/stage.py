"""The publish stage, after the final verdict: HTML report, baseline policy (directory store), then the
run goes into the spool and, if MLflow is reachable, is logged from there; last, the CI reports
(summary.md, junit.xml: `ci_report`), which link the MLflow run.

The MLflow baseline before compare is `tracking.refresh`. A disk of this machine that refuses a write
(the results, the baseline store, the spool, MLflow's local store) is not an outage: it fails the run
with a DiskError naming the path (exit 3), and what was written before (the results, the spooled copy)
stays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchgate.config import RunConfig
from benchgate.errors import DiskError
from benchgate.kit.diskfaults import writing
from benchgate.kit.files import read_json, write_text
from benchgate.results.bundle import PUBLISHED_FILE, RUN_FILE, load_bundle
from benchgate.results.comparison import load_comparison
from benchgate.results.figures import HistoryPoint
from benchgate.store.baseline import find_baseline
from benchgate.tracking.refresh import read_state, warn, write_state


def _history(state: dict[str, Any]) -> list[HistoryPoint]:
    return [HistoryPoint(**point) for point in state.get("history", [])]


def write_report(config: RunConfig, run_dir: Path) -> Path:
    """report.html: the verdict with plots against the baseline and the profile's recent runs, and their
    change points. The runs are put in the commit order of the branch checked out where this runs (as
    `benchgate history` does), when they are all on it; elsewhere (a pipeline pod) by start time."""
    from benchgate.measure.source import branch_commits
    from benchgate.publish.ab_report import read_ab
    from benchgate.publish.html_report import html_report

    current = load_bundle(run_dir)
    comparison = load_comparison(run_dir / "compare.json")
    baseline = find_baseline(config.gate.baseline_dir, current.machine_profile, str(current.workload))
    path = run_dir / "report.html"
    history = _history(read_state(run_dir))
    order = branch_commits(Path.cwd()) if history else None  # no git call for a profile's first run
    ab = read_ab(run_dir, config.gate)  # each A/B's rounds, looks and decision
    html = html_report(current, comparison, baseline, history, commit_order=order, ab=ab)
    with writing("the report", path):
        write_text(path, html)  # atomic: a full disk never leaves half a report
    return path


def stage_publish(config: RunConfig, run_dir: Path, hold: str | None = None) -> dict[str, Any]:
    """After the final verdict: spool, report, baseline policy, and MLflow. Writes published.json.

    The run goes into the spool first, before anything that can fail, so a crash in the report or the
    baseline swap leaves the results on disk for `benchgate sync`; the entry is rewritten once the
    report and the baseline marking exist. `hold` (why) keeps the run in the spool unsent: a store that
    would not outlive this process is no place to log it to.
    """
    from benchgate.publish.ci_report import write_reports
    from benchgate.publish.policy import stage_update_baseline
    from benchgate.store import spool

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
    write_state(run_dir / PUBLISHED_FILE, published)
    # After the record, so the summary can link the MLflow run; in the results, so cluster runs have them.
    write_reports(run_dir)
    return published


def _record(config: RunConfig, run_dir: Path, record: dict[str, Any], hold: str | None) -> dict[str, Any]:
    from benchgate.store import spool
    from benchgate.tracking import client as tracking
    from benchgate.tracking import record as tracking_record

    entry = spool.write_entry(config.tracking.spool_dir, run_dir, record)
    state = read_state(run_dir)
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
        run_id, _ = tracking_record.log_entry(tracker, entry)
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
    return {"mlflow_run_id": run_id, "spooled": None, "mlflow_url": tracking.run_url(tracker, run_id)}
