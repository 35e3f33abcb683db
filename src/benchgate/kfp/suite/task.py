"""The suite gate: the benchgate-suite pipeline's last task, after every entry's gate pipeline.

Each entry published its own verdict to MLflow (its gate task does not fail the run: a failed loop
iteration would only stop the entries after it), under the key "<KFP run id>-<entry name>". This task
reads them back, writes suite.json, suite.md and the Pareto view (pareto.png, pareto.md, suite.html) in
the layout a local suite's directory has (each entry's compare, env, eval and metrics files under
`<entry name>/`), logs the suite parent with every entry's gate run nested under it
(tracking/suite_record.py, as `benchgate suite run` does), and ends with the suite's exit code
(suite/runner.py's rule): the KFP UI shows the run red when an entry FAILed, was UNKNOWN, or has no
gate run (it failed before publishing; its own tasks in the same KFP run say why).

MLflow is the only place the entries' verdicts meet (the tasks share no disk), so a cluster suite needs
a tracking server: without one the task stops with exit 2, naming mlflow_tracking_uri; `benchgate submit
--suite` and the controller refuse such a suite before submitting it.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig, parse_config
from benchgate.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED, EXIT_UNKNOWN, ConfigError
from benchgate.kfp.params import POD_LOCAL_DIR
from benchgate.kfp.suite_entry import entry_run_key, read_entry
from benchgate.kfp.task_harness import reporting_errors, stage
from benchgate.kit.files import write_json, write_text
from benchgate.results.bundle import PUBLISHED_FILE
from benchgate.suite.runner import SUITE_FILE, suite_exit_code
from benchgate.suite.table import SUITE_MD, suite_markdown

VERDICT_EXIT = {"PASS": EXIT_PASS, "WARN": EXIT_PASS, "FAIL": EXIT_REGRESSION, "UNKNOWN": EXIT_UNKNOWN}


def suite_tracking_config(config: dict[str, Any], mlflow_tracking_uri: str) -> RunConfig:
    """The settings the suite gate needs: the pipeline config's [tracking] table (its experiment is the
    entries'), the server's URI, and pod-local stores. A ConfigError where there is no server."""
    tracking = dict(config.get("tracking") or {}) if isinstance(config, dict) else {}
    uri = mlflow_tracking_uri or str(tracking.get("uri") or "") or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri.startswith(("http://", "https://")):
        raise ConfigError(
            f"mlflow_tracking_uri: got {uri!r} (a suite on a cluster needs an MLflow server: its entries' "
            "verdicts meet there, and the suite's parent run is logged there)"
        )
    tracking.update(uri=uri, local_dir=str(POD_LOCAL_DIR / "mlflow"), spool_dir=str(POD_LOCAL_DIR / "spool"))
    return parse_config({"tracking": tracking})


def suite_gate_task(
    suite_name: str,
    entries: list[str],
    config: dict[str, Any],
    mlflow_tracking_uri: str,
    kfp_run_id: str,
    kfp_run_name: str,
    results_dir: str,
) -> int:
    """Gather the entries' verdicts, write and log the suite; returns the suite's exit code."""
    from benchgate.tracking import client as tracking
    from benchgate.tracking.suite_record import log_suite, worst_verdict
    from benchgate.tracking.suite_runs import mark_suite_run

    with reporting_errors("suite gate", results_dir), stage("suite gate"):
        settings = suite_tracking_config(config, mlflow_tracking_uri)
        parsed = [read_entry(text) for text in entries]
        out = Path(results_dir)
        out.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        tracker = tracking.connect(settings)
        record: dict[str, Any] = {
            "suite": suite_name,
            "suite_file": f"KFP run {kfp_run_name or kfp_run_id}",
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "entries": [_entry(tracker, entry, kfp_run_id, out) for entry in parsed],
        }
        record["exit_code"] = suite_exit_code(record["entries"])
        write_json(out / SUITE_FILE, record)
        write_text(out / SUITE_MD, suite_markdown(out, record))
        _write_report(out, record)
        run_id = log_suite(tracker, out, record, time.perf_counter() - started)
        mark_suite_run(tracker, run_id, kfp_run_id, kfp_run_name, worst_verdict(record))
        record["mlflow"] = {
            "suite_run_id": run_id,
            "url": tracking.run_url(tracker, run_id),
            "uri": tracker.uri,
            "experiment_id": tracker.experiment_id,
        }
        write_json(out / SUITE_FILE, record)
    print((out / SUITE_MD).read_text(encoding="utf-8"), flush=True)
    print(
        f"benchgate suite gate: logged to MLflow as run {run_id}; suite exit {record['exit_code']}",
        flush=True,
    )
    return int(record["exit_code"])


def _write_report(out: Path, record: dict[str, Any]) -> None:
    """The Pareto view (pareto.png, pareto.md, suite.html), as a local suite draws it; where no entry
    finished there is nothing to plot, and suite.json says so (the verdicts and exit code stand)."""
    from benchgate.suite.report import write_suite_report

    try:
        write_suite_report(out)
    except ConfigError as e:
        record["report"] = {"error": str(e)}
        write_json(out / SUITE_FILE, record)
        print(f"benchgate suite gate: no Pareto view: {e}", flush=True)


def _entry(tracker: Any, entry: dict[str, Any], kfp_run_id: str, out: Path) -> dict[str, Any]:
    """suite.json's row of one entry, from its gate run in MLflow (its files under out/<name>)."""
    from benchgate.results.comparison import load_comparison
    from benchgate.tracking.suite_runs import download_entry_files, entry_gate_run, entry_row

    name = entry["name"]
    key = entry_run_key(kfp_run_id, name)
    row = {
        "name": name,
        "workload": entry["workload"],
        "args": entry["workload_args"],
        "variant": entry["variant"],
        "out": name,
    }
    run = entry_gate_run(tracker, key)
    if run is None:
        return row | {
            "state": "error",
            "verdict": None,
            "exit_code": EXIT_RUN_FAILED,
            "error": f"{name}: no gate run in MLflow under the key {key}: the entry failed before its "
            "verdict was published (its tasks in this KFP run say why)",
            "seconds": None,
        }
    found = download_entry_files(tracker, run.info.run_id, out / name)
    write_json(out / name / PUBLISHED_FILE, {"mlflow_run_id": run.info.run_id})
    figures = entry_row(run)
    # compare.json knows gate.on_unknown (an UNKNOWN may be neutral); the verdict tag alone does not.
    if "compare.json" in found:
        exit_code = load_comparison(out / name / "compare.json").exit_code
    else:
        exit_code = VERDICT_EXIT.get(str(figures["verdict"]), EXIT_RUN_FAILED)
    return row | {"state": "done", "exit_code": exit_code, "error": None, **figures}
