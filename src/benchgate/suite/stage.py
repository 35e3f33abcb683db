"""A whole suite: claim --out, gate the entries, write the table and the report, then the MLflow parent.

An incremental suite (`[suite] incremental = true`) keeps the entries measured before in --out under
the same measurement key (suite/incremental.py) and runs the rest.

Results reach the disk before anything remote: suite.json after every entry, suite.md and the Pareto
view (suite/report.py: pareto.png, pareto.md, suite.html) once they have all run, and only then the
MLflow suite parent. A tracking server that is down
costs a warning and a line in suite.json (`mlflow.error`), never the exit code or a result.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig, parse_config
from benchgate.errors import BenchgateError, ConfigError
from benchgate.kit.files import write_text
from benchgate.results import outdir
from benchgate.suite.incremental import KeyMaker, measured_before, previous_rows
from benchgate.suite.report import write_suite_report
from benchgate.suite.runner import SUITE_FILE, RunEntry, SuiteProgress, SuiteRecord, run_entries
from benchgate.suite.spec import SUITE_OUTPUTS, SuiteSpec, entry_config, merged_tables
from benchgate.suite.table import SUITE_MD, suite_markdown

DEFAULT_OUT = Path("benchgate-suite-out")


@dataclass
class SuiteOutcome:
    out_dir: Path
    record: SuiteRecord
    # Set where the suite parent could not be logged: what to warn about.
    tracking_warning: str | None = None
    # Set where the Pareto view could not be drawn (no entry finished): what to warn about.
    report_warning: str | None = None

    @property
    def exit_code(self) -> int:
        return int(self.record.data["exit_code"])


def suite_config(spec: SuiteSpec, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """The settings the suite shares: the [suite] config file with the command line's over it (where the
    suite parent is logged). A ConfigError names the flag's field."""
    data: dict[str, Any] = {}
    for dotted, value in (overrides or {}).items():
        if value is not None:
            section, _, key = dotted.partition(".")
            data.setdefault(section, {})[key] = value
    return parse_config(merged_tables(spec.config, data))


def run_suite(
    spec: SuiteSpec,
    out: Path,
    run_entry: RunEntry,
    overrides: Mapping[str, Any] | None = None,
    progress: SuiteProgress | None = None,
) -> SuiteOutcome:
    """Run `spec` into `out` (module docstring); `overrides` are dotted config keys set on every entry."""
    shared = suite_config(spec, overrides)  # a bad flag is refused before --out is touched
    started = time.perf_counter()
    with outdir.claimed(Path(out)) as claimed:
        keys, carried = incremental_plan(spec, claimed.path, overrides) if spec.incremental else ({}, {})
        claimed.clear(keep=[str(row["out"]) for row in carried.values()])
        names = [e.name for e in spec.entries if e.entry is not None]
        claimed.will_write([*SUITE_OUTPUTS, *names])
        record = run_entries(spec, claimed.path, run_entry, overrides, progress, keys, carried)
        write_text(claimed.path / SUITE_MD, suite_markdown(claimed.path, record.data))
        outcome = SuiteOutcome(claimed.path, record)
        outcome.report_warning = _write_report(outcome)
        if shared.tracking.enabled:
            outcome.tracking_warning = _log_parent(shared, outcome, time.perf_counter() - started)
    return outcome


def incremental_plan(
    spec: SuiteSpec, out_dir: Path, overrides: Mapping[str, Any] | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each runnable entry's measurement key, and the previous rows of those measured before under it
    (suite/incremental.py), read before --out is cleared. An entry whose config is refused gets no key:
    it runs, and is refused with its reason."""
    previous = previous_rows(out_dir / SUITE_FILE)
    maker = KeyMaker()
    keys: dict[str, dict[str, Any]] = {}
    carried: dict[str, dict[str, Any]] = {}
    for planned in spec.entries:
        if planned.entry is None:
            continue
        try:
            key = maker.key(entry_config(spec, planned, out_dir, overrides))
        except BenchgateError:
            continue
        keys[planned.name] = key
        before = measured_before(previous.get(planned.name), key, out_dir)
        if before is not None:
            carried[planned.name] = before
    return keys, carried


def _write_report(outcome: SuiteOutcome) -> str | None:
    """The Pareto view (pareto.png, pareto.md, suite.html); what to warn about where there is none.

    Only a suite in which no entry finished has nothing to plot (a ConfigError of the report): the
    suite's verdicts and exit code stand, and suite.json says why the view is missing."""
    try:
        write_suite_report(outcome.out_dir)
    except ConfigError as e:
        outcome.record.data["report"] = {"error": str(e)}
        outcome.record.save()
        return f"no Pareto view: {e}"
    return None


def _log_parent(config: RunConfig, outcome: SuiteOutcome, seconds: float) -> str | None:
    """The MLflow suite parent, recorded in suite.json; what to warn about where it could not be logged."""
    from benchgate.tracking import client as tracking
    from benchgate.tracking.suite_record import log_suite

    record = outcome.record
    failures: tuple[type[BaseException], ...] = (BenchgateError, OSError, *tracking.send_errors())
    try:
        tracker = tracking.connect(config)
        run_id = log_suite(tracker, outcome.out_dir, record.data, seconds)
    except failures as e:
        record.data["mlflow"] = {"suite_run_id": None, "error": str(e)}
        record.save()
        return f"the suite was not logged to MLflow ({e}); its results are in {outcome.out_dir}"
    record.data["mlflow"] = {
        "suite_run_id": run_id,
        "url": tracking.run_url(tracker, run_id),
        "uri": tracker.uri,
        "experiment_id": tracker.experiment_id,
    }
    record.save()
    return None
