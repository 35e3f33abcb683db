"""One MLflow run per suite (`benchgate suite run`): the parent its entries' gate runs nest under.

Logged after the entries, whose results are on disk first, in the experiment the gate runs go to:

    name      "suite <name>: <worst verdict>" (and how many entries could not run)
    tags      benchgate.kind=suite, benchgate.suite=<name>, benchgate.verdict (the worst entry's, the
              runs table's verdict column), benchgate.suite.exit_code, the version, a description (one
              line per entry)
    times     the run ends when it is logged and starts `seconds` before, or at its earliest entry's gate
              run where that started earlier (on a cluster `seconds` is the suite gate's own time): the
              UI's duration is the suite's
    params    suite_file, entries
    metrics   entries_done, entries_error, seconds
    artifacts suite.md, suite.json, pareto.png, pareto.md (those that exist)

Each entry's gate run (its run id is in the entry directory's published.json) gets the tag
mlflow.parentRunId = the suite run, so the UI shows one gate run per entry under the suite. A gate run
stays kind=gate: history, baselines and promotion read it as they read any gate run; the suite run is
kind=suite and never read as one. An entry whose gate run was spooled (the server was down during it)
has no run id to nest; `benchgate sync` sends it later as a run of its own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchgate._version import __version__
from benchgate.kit import diskfaults
from benchgate.kit.files import read_json
from benchgate.results.bundle import PUBLISHED_FILE
from benchgate.results.comparison import SEVERITY, VERDICTS
from benchgate.tracking.client import TAG_KIND, TAG_PARENT, TAG_VERDICT, TAG_VERSION, Tracker
from benchgate.tracking.view import TAG_DESCRIPTION, metric

KIND_SUITE = "suite"
TAG_SUITE = "benchgate.suite"
TAG_SUITE_EXIT = "benchgate.suite.exit_code"
ARTIFACTS = ("suite.md", "suite.json", "pareto.png", "pareto.md")


def worst_verdict(record: dict[str, Any]) -> str:
    """The worst verdict of the entries that ran (FAIL > UNKNOWN > WARN > PASS); "none" where none did."""
    verdicts = [e["verdict"] for e in record["entries"] if e.get("verdict") in VERDICTS]
    if not verdicts:
        return "none"
    return str(max(verdicts, key=lambda v: SEVERITY[v]))


def run_name(record: dict[str, Any]) -> str:
    errors = sum(e["state"] == "error" for e in record["entries"])
    tail = f" ({errors} could not run)" if errors else ""
    return f"suite {record['suite']}: {worst_verdict(record)}{tail}"


def description(record: dict[str, Any]) -> str:
    """The suite run's description in the MLflow UI (Markdown): one line per entry."""
    lines = [f"**{run_name(record)}**", "", "| entry | workload | verdict | exit |", "|---|---|---|---|"]
    for e in record["entries"]:
        verdict = e["verdict"] or ("ERROR" if e["state"] == "error" else e["state"])
        lines.append(f"| {e['name']} | {e.get('workload') or '—'} | {verdict} | {e['exit_code']} |")
    return "\n".join(lines)


def entry_gate_runs(suite_dir: Path, record: dict[str, Any]) -> dict[str, str]:
    """Entry name -> the MLflow run id of its gate run, for the entries that have one."""
    found: dict[str, str] = {}
    for e in record["entries"]:
        path = suite_dir / str(e.get("out")) / PUBLISHED_FILE
        if e["state"] != "done" or not e.get("out") or not path.is_file():
            continue
        try:
            run_id = read_json(path).get("mlflow_run_id")
        except (ValueError, AttributeError):  # damaged since it was written: not nested, not fatal
            continue
        if run_id:
            found[str(e["name"])] = str(run_id)
    return found


def earliest_start(tracker: Tracker, run_ids: Iterable[str], start_ms: int) -> int:
    """`start_ms`, or the start of the earliest of the runs `run_ids` where one began before it."""
    from mlflow.exceptions import MlflowException

    starts = [start_ms]
    for run_id in run_ids:
        with contextlib.suppress(MlflowException):  # deleted since: the suite's own time stands
            starts.append(int(tracker.client.get_run(run_id).info.start_time))
    return min(starts)


def log_suite(tracker: Tracker, suite_dir: Path, record: dict[str, Any], seconds: float) -> str:
    """Log the suite parent and nest the entries' gate runs under it; returns the suite run's id."""
    from mlflow.entities import Param

    client = tracker.client
    entries = record["entries"]
    tags = {
        TAG_KIND: KIND_SUITE,
        TAG_SUITE: str(record["suite"]),
        TAG_VERDICT: worst_verdict(record),
        TAG_SUITE_EXIT: str(record["exit_code"]),
        TAG_VERSION: __version__,
        TAG_DESCRIPTION: description(record),
    }
    params = {"suite_file": str(record["suite_file"]), "entries": ",".join(str(e["name"]) for e in entries)}
    figures = {
        "entries_done": float(sum(e["state"] == "done" for e in entries)),
        "entries_error": float(sum(e["state"] == "error" for e in entries)),
        # An incremental suite's entries measured before: their gate runs stay under the parent of the
        # suite run that measured them.
        "entries_skipped": float(sum(e["state"] == "skipped" for e in entries)),
        "seconds": float(seconds),
    }
    now_ms = int(time.time() * 1e3)
    gate_runs = entry_gate_runs(suite_dir, record)
    artifacts = [suite_dir / name for name in ARTIFACTS if (suite_dir / name).is_file()]
    with diskfaults.local_faults(tracker.local_dir, suite_dir):
        # Started when the suite did: created now with no start time, it would end as it began (0 ms).
        started_ms = earliest_start(tracker, gate_runs.values(), now_ms - max(0, round(seconds * 1e3)))
        run = client.create_run(
            tracker.experiment_id, start_time=started_ms, tags=tags, run_name=run_name(record)
        )
        run_id = str(run.info.run_id)
        client.log_batch(
            run_id,
            metrics=[metric(k, v, now_ms) for k, v in figures.items()],
            params=[Param(k, v[:6000]) for k, v in params.items()],
            synchronous=True,
        )
        for path in artifacts:
            client.log_artifact(run_id, str(path))
        for gate_run_id in gate_runs.values():
            client.set_tag(gate_run_id, TAG_PARENT, run_id)
        client.set_terminated(run_id, "FINISHED", now_ms)
    return run_id
