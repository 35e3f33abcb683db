"""One MLflow run per bisection (`benchgate bisect`, ranges/bisect_run.py): the range, what it found,
and bisect.json as its artifact, in the experiment the gate runs go to.

It is tagged benchgate.kind=bisect. Gate runs are kind=gate, and every read of gate runs (history,
baselines, promotion, a KFP run's gate run: tracking/read.py) selects kind=gate, so a bisection never
shows in `benchgate history`, never becomes a baseline and cannot be promoted to one, though it
carries the machine profile it ran on (its A/B changes hold on that machine). It has no verdict or
baseline tag: those say what a gate run measured of one commit. Its figures are A/B changes between
commits, not tokens/s.

    tags      benchgate.kind=bisect, benchgate.bisect.status (CULPRIT, NO_REGRESSION, UNKNOWN), machine
              profile, version; benchgate.kfp_run_id where the bisect pipeline ran it (`bisect
              --submit --wait` finds the run by it: `logged_bisection`)
    params    good, bad, culprit (or none), steps, commits, world_size, workload, tolerance_pct
    metrics   decisions, rounds, seconds; change_vs_good_pct and own_change_pct of a culprit
    artifact  bisect.json
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchgate._version import __version__
from benchgate.kit import diskfaults
from benchgate.kit.files import read_json
from benchgate.tracking.client import TAG_KFP_RUN_ID, TAG_KIND, TAG_PROFILE, TAG_VERSION, Tracker, quoted
from benchgate.tracking.view import TAG_DESCRIPTION, metric

KIND_BISECT = "bisect"
TAG_BISECT_STATUS = "benchgate.bisect.status"


def run_name(record: dict[str, Any]) -> str:
    span = f"{record['good']['sha'][:12]}..{record['bad']['sha'][:12]}"
    culprit = record.get("culprit")
    if culprit:
        return f"bisect {span}: culprit {culprit['sha'][:12]}"
    return f"bisect {span}: {record['status']}"


def description(record: dict[str, Any]) -> str:
    """The run's description in the MLflow UI (Markdown): one line per step."""
    lines = [
        f"**{run_name(record)}**",
        "",
        "| step | commit | status | change | rounds |",
        "|---|---|---|---|---|",
    ]
    for step in record["steps"]:
        decision = step["decision"]
        change = decision.get("change_pct")
        shown = f"{change:+.1f}%" if change is not None else "—"
        lines.append(
            f"| {step['step']} | {step['candidate'][:12]} | {decision['status']} | {shown} | "
            f"{decision['rounds']} |"
        )
    return "\n".join(lines)


def _figures(record: dict[str, Any]) -> dict[str, float]:
    steps = record["steps"]
    figures = {
        "decisions": float(len(steps)),
        "rounds": float(sum(step["decision"]["rounds"] for step in steps)),
        "seconds": float(record.get("seconds") or 0.0),
    }
    culprit = record.get("culprit") or {}
    for name, key in (("change_vs_good_pct", "vs_good"), ("own_change_pct", "own")):
        change = (culprit.get(key) or {}).get("change_pct")
        if change is not None:
            figures[name] = float(change)
    return figures


def log_bisection(tracker: Tracker, record: dict[str, Any], bisect_json: Path) -> str:
    """Log the bisection `record` (bisect.json's content, at `bisect_json`) as one finished run; its id."""
    from mlflow.entities import Param

    client = tracker.client
    culprit = record.get("culprit") or {}
    params = {
        "good": record["good"]["sha"],
        "bad": record["bad"]["sha"],
        "culprit": culprit.get("sha", "none"),
        "steps": str(len(record["steps"])),
        "commits": str(len(record["commits"])),
        "world_size": str(record["world_size"]),
        "workload": record["workload"],
        "tolerance_pct": str(record["tolerance_pct"]),
    }
    tags = {
        TAG_KIND: KIND_BISECT,
        TAG_BISECT_STATUS: str(record["status"]),
        TAG_PROFILE: str(record["machine_profile"]),
        TAG_VERSION: __version__,
        TAG_DESCRIPTION: description(record),
    }
    if record.get("kfp_run_id"):
        tags[TAG_KFP_RUN_ID] = str(record["kfp_run_id"])
    now_ms = int(time.time() * 1e3)
    with diskfaults.local_faults(tracker.local_dir, bisect_json):
        run = client.create_run(tracker.experiment_id, tags=tags, run_name=run_name(record))
        run_id = str(run.info.run_id)
        client.log_batch(
            run_id,
            metrics=[metric(k, v, now_ms) for k, v in _figures(record).items()],
            params=[Param(k, v) for k, v in params.items()],
            synchronous=True,
        )
        client.log_artifact(run_id, str(bisect_json))
        client.set_terminated(run_id, "FINISHED", now_ms)
    return run_id


def logged_bisection(tracker: Tracker, kfp_run_id: str) -> tuple[str, dict[str, Any]] | None:
    """The bisection the KFP run `kfp_run_id` logged: (its MLflow run id, its bisect.json), None where
    the experiment holds none."""
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`{TAG_KIND}` = '{KIND_BISECT}' and tags.`{TAG_KFP_RUN_ID}` = "
        f"'{quoted(kfp_run_id, 'KFP run id')}'",
        max_results=1,
    )
    if not runs:
        return None
    run_id = str(runs[0].info.run_id)
    with tempfile.TemporaryDirectory() as tmp:
        return run_id, read_json(Path(tracker.client.download_artifacts(run_id, "bisect.json", tmp)))
