"""Gate runs read back from MLflow: a profile's runs and baselines, their history (also around the gate
run of a KFP run, for a schedule's history check), promotion.

The other half of `tracking.py` (which writes them). A baseline is a FINISHED parent tagged
benchgate.baseline=true; the newest by its marking time (benchgate.baseline_since_unix) wins, so
promoting an older run makes it the baseline again without touching the newer ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchgate.errors import BadInputError
from benchgate.results.bundle import METRICS_FILE
from benchgate.results.figures import RUN_TOKENS_PER_S, HistoryPoint, run_tokens_per_s
from benchgate.tracking.client import (
    TAG_ACK_BY,
    TAG_ACK_REASON,
    TAG_ACK_UNIX,
    TAG_BASELINE,
    TAG_BASELINE_REASON,
    TAG_BASELINE_SINCE,
    TAG_BRANCH,
    TAG_COMMIT,
    TAG_KFP_RUN_ID,
    TAG_KIND,
    TAG_PROFILE,
    TAG_VERDICT,
    TAG_WORKLOAD,
    Tracker,
    quoted,
)

if TYPE_CHECKING:
    from mlflow.entities import Run as Run  # re-exported: what the readers here return


def gate_runs(
    tracker: Tracker,
    profile: str,
    workload: str | None = None,
    baselines_only: bool = False,
    limit: int = 100,
    branch: str | None = None,
) -> list[Run]:
    """Finished gate runs (parents) of a machine profile, newest first.

    Only kind=gate: a stage's child (kind=stage) and a bisection (kind=bisect, tracking/bisection.py)
    share the experiment but are never history points or baselines."""
    clauses = [
        f"tags.`{TAG_KIND}` = 'gate'",
        f"tags.`{TAG_PROFILE}` = '{quoted(profile, 'machine profile')}'",
        "attributes.status = 'FINISHED'",
    ]
    if workload:
        clauses.append(f"tags.`{TAG_WORKLOAD}` = '{quoted(workload, 'workload')}'")
    if branch:
        clauses.append(f"tags.`{TAG_BRANCH}` = '{quoted(branch, 'branch')}'")
    if baselines_only:
        clauses.append(f"tags.`{TAG_BASELINE}` = 'true'")
    return list(
        tracker.client.search_runs(
            [tracker.experiment_id],
            filter_string=" and ".join(clauses),
            max_results=limit,
            order_by=["attributes.start_time DESC"],
        )
    )


def gate_run_for_kfp(tracker: Tracker, kfp_run_id: str) -> Run | None:
    """The gate run a KFP run logged (its parent run, tagged with the KFP run id), if it is there yet."""
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`{TAG_KIND}` = 'gate' and tags.`{TAG_KFP_RUN_ID}` = "
        f"'{quoted(kfp_run_id, 'KFP run id')}'",
        max_results=1,
    )
    return runs[0] if runs else None


def baseline_since(run: Run) -> float:
    return float(run.data.tags.get(TAG_BASELINE_SINCE, "0") or 0)


def newest_baseline(runs: list[Run]) -> Run | None:
    marked = [r for r in runs if r.data.tags.get(TAG_BASELINE) == "true"]
    return max(marked, key=baseline_since, default=None)


def history_point(run: Run) -> HistoryPoint:
    """A gate run as history reads it; a run logged before `ws<N>/tokens_per_s_mean` existed gets it
    from the figures it has (results/figures.run_tokens_per_s), so every run shows the same tokens/s."""
    tags = run.data.tags
    figures = dict(run.data.metrics)
    for ws, rate in run_tokens_per_s(figures).items():
        figures.setdefault(f"ws{ws}/{RUN_TOKENS_PER_S}", rate)
    return HistoryPoint(
        commit=tags.get(TAG_COMMIT) or None,
        created_unix=run.info.start_time / 1e3,
        figures=figures,
        run_id=run.info.run_id,
        branch=tags.get(TAG_BRANCH) or None,
        verdict=tags.get(TAG_VERDICT),
        is_baseline=tags.get(TAG_BASELINE) == "true",
        acknowledged=tags.get(TAG_ACK_REASON),
        workload=tags.get(TAG_WORKLOAD) or None,
    )


@dataclass(frozen=True)
class RunHistory:
    """The history a gate run belongs to: its machine profile, its workload, and the newest gate runs of
    both (that run among them) as history points, oldest first by start time."""

    profile: str
    workload: str
    points: list[HistoryPoint]


def kfp_run_history(tracker: Tracker, kfp_run_id: str, limit: int) -> RunHistory | None:
    """The history of the gate run a KFP run logged (`limit` runs at most), or None when MLflow has no
    such gate run (not logged yet, or the run ended before publishing)."""
    run = gate_run_for_kfp(tracker, kfp_run_id)
    if run is None:
        return None
    profile = run.data.tags.get(TAG_PROFILE, "")
    workload = run.data.tags.get(TAG_WORKLOAD, "")
    runs = gate_runs(tracker, profile, workload or None, limit=limit)
    return RunHistory(profile, workload, [history_point(r) for r in reversed(runs)])


def download_bundle(tracker: Tracker, run_id: str, dest: Path) -> Path:
    """The result files of a logged run that make a baseline (env, metrics, eval) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for info in tracker.client.list_artifacts(run_id):
        name = Path(info.path).name
        if name in ("env.json", "eval.json") or METRICS_FILE.match(name):
            tracker.client.download_artifacts(run_id, info.path, str(dest))
    return dest


def get_gate_run(tracker: Tracker, run_id: str) -> Run:
    from mlflow.exceptions import MlflowException

    try:
        run = tracker.client.get_run(run_id)
    except MlflowException:
        raise BadInputError(f"RUN_ID: got {run_id!r} (no such run at {tracker.uri})") from None
    if run.data.tags.get(TAG_KIND) != "gate":
        raise BadInputError(
            f"RUN_ID: got {run_id!r} (not a benchgate gate run: name the parent run, not a stage)"
        )
    if run.info.status != "FINISHED":
        raise BadInputError(f"RUN_ID: got {run_id!r} (its status is {run.info.status}, not FINISHED)")
    return run


def promote(tracker: Tracker, run_id: str, reason: str) -> Run:
    """Mark a logged gate run as the baseline of its machine profile and workload from now on."""
    get_gate_run(tracker, run_id)
    for key, value in {
        TAG_BASELINE: "true",
        TAG_BASELINE_SINCE: repr(time.time()),
        TAG_BASELINE_REASON: reason,
    }.items():
        tracker.client.set_tag(run_id, key, value)
    return tracker.client.get_run(run_id)


def acknowledge(tracker: Tracker, run_id: str, reason: str, by: str) -> Run:
    """Accept the change a gate run starts (a known, wanted slowdown): history --check stops alerting
    on it. The reason and who gave it stay on the run as tags."""
    if not reason.strip():
        raise BadInputError("--reason: got an empty text (say why the change is accepted)")
    get_gate_run(tracker, run_id)
    for key, value in {TAG_ACK_REASON: reason, TAG_ACK_BY: by, TAG_ACK_UNIX: repr(time.time())}.items():
        tracker.client.set_tag(run_id, key, value)
    return tracker.client.get_run(run_id)


# Logged figure (after "ws<N>/") -> history.json p50 key, and what the figure is divided by to get it.
_HISTORY_P50 = {
    "tokens_per_s_p50": ("tokens_per_s", 1.0),
    "step_time_ms_p50": ("step_time_s", 1e3),
    "step_time_per_reference_p50": ("step_time_per_reference", 1.0),
    "step_time_ms_mean": ("mean_step_time_s", 1e3),
    "step_time_per_reference_mean": ("mean_step_time_per_reference", 1.0),
}


def history_from_runs(runs: list[Run]) -> list[dict[str, Any]]:
    """Baseline runs as the directory store's history.json rows (run-level p50s: the run-to-run noise)."""
    rows = []
    for run in sorted(runs, key=lambda r: r.info.start_time):
        p50: dict[str, dict[str, float]] = {}
        for key, value in run.data.metrics.items():
            ws, _, name = key.partition("/")
            if ws.startswith("ws") and name in _HISTORY_P50:
                p50_key, divisor = _HISTORY_P50[name]
                p50.setdefault(ws[2:], {})[p50_key] = value / divisor
        rows.append(
            {
                "commit": run.data.tags.get(TAG_COMMIT),
                "created_unix": run.info.start_time / 1e3,
                "p50": p50,
                "mlflow_run_id": run.info.run_id,
            }
        )
    return rows
