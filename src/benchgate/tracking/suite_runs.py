"""A suite on a cluster, read back from MLflow: each entry's gate run by its key, and the suite parent
by the KFP run that logged it.

On a cluster every entry of a suite is one gate pipeline inside one KFP run (kfp/suite/pipeline.py);
each logs its gate run under the key "<KFP run id>-<entry name>" (kfp/suite_entry.py), and the suite
gate finds them here after the last entry. The suite parent it logs (tracking/suite_record.py, which
tags the worst verdict as a local suite's parent has it) is tagged here with the KFP run's id and name,
so the controller reads a suite's outcome as it reads a gate run's (`suite_run_for_kfp`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchgate.tracking.client import (
    TAG_KFP_RUN_ID,
    TAG_KFP_RUN_NAME,
    TAG_KIND,
    TAG_VERDICT,
    Tracker,
    quoted,
)
from benchgate.tracking.record import find_logged
from benchgate.tracking.suite_record import KIND_SUITE

if TYPE_CHECKING:
    from mlflow.entities import Run

# What the suite gate downloads of each entry's gate run: the suite's table (suite.md) reads compare.json,
# its Pareto view (suite/report.py) env.json, eval.json and the metrics files, all a few KB.
ENTRY_FILES = re.compile(r"(compare\.json|compare\.md|env\.json|eval\.json|metrics-ws\d+\.json)")


def entry_gate_run(tracker: Tracker, run_key: str) -> Run | None:
    """The finished gate run logged under `run_key`, the newest where an upload was retried; None when
    there is none (the entry failed before publishing, or its run was spooled)."""
    finished = [run for run in find_logged(tracker, run_key) if run.info.status == "FINISHED"]
    return finished[-1] if finished else None


def entry_row(run: Run) -> dict[str, Any]:
    """What suite.json says of an entry that ran: its verdict and the gate run's duration."""
    verdict = run.data.tags.get(TAG_VERDICT) or None
    end = run.info.end_time or run.info.start_time
    return {"verdict": verdict, "seconds": round((end - run.info.start_time) / 1e3, 3)}


def download_entry_files(tracker: Tracker, run_id: str, dest: Path) -> list[str]:
    """ENTRY_FILES of the gate run `run_id` into `dest`; returns the names found."""
    dest.mkdir(parents=True, exist_ok=True)
    present = sorted(Path(info.path).name for info in tracker.client.list_artifacts(run_id))
    found = [name for name in present if ENTRY_FILES.fullmatch(name)]
    for name in found:
        tracker.client.download_artifacts(run_id, name, str(dest))
    return found


def mark_suite_run(tracker: Tracker, run_id: str, kfp_run_id: str, kfp_run_name: str, verdict: str) -> None:
    """Tag the suite parent with the KFP run it came from, and with its worst verdict again (log_suite
    tagged it already; the suite gate passes the verdict it printed)."""
    client = tracker.client
    client.set_tag(run_id, TAG_KFP_RUN_ID, kfp_run_id)
    client.set_tag(run_id, TAG_KFP_RUN_NAME, kfp_run_name)
    client.set_tag(run_id, TAG_VERDICT, verdict)


def suite_run_for_kfp(tracker: Tracker, kfp_run_id: str) -> Run | None:
    """The suite parent a KFP run of the suite pipeline logged, if it is there yet."""
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`{TAG_KIND}` = '{KIND_SUITE}' and tags.`{TAG_KFP_RUN_ID}` = "
        f"'{quoted(kfp_run_id, 'KFP run id')}'",
        max_results=1,
    )
    return runs[0] if runs else None
