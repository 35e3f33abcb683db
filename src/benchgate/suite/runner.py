"""The entries of a suite, run one at a time through an injected gate function; suite.json after each.

Pure orchestration: how one entry is gated is the caller's (`benchgate suite run` passes the local
pipeline), so a suite runs entries exactly as `benchgate run` runs one, each into its own result
directory <out>/<entry name>. Entries never run side by side: a timed step must not share the machine
with another entry's.

An entry that fails with a BenchgateError (its workload does not import: exit 2; a rank crashed: exit
3) is recorded with its message and exit code, and the next entry runs. suite.json is written
atomically after every entry (and once before the first), so a suite that is killed keeps what finished.

The suite's exit code: 2 if any entry had bad input, else 3 if any failed to run, else the worst
verdict's (FAIL 1, then UNKNOWN 4, then 0 for PASS and WARN). Since any entry's FAIL is the suite's, the
entries run at their share of the suite's error budget (suite/family.py), planned before the first
runs and recorded as suite.json's "family".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from benchgate.config import RunConfig
from benchgate.errors import (
    EXIT_BAD_INPUT,
    EXIT_PASS,
    EXIT_REGRESSION,
    EXIT_RUN_FAILED,
    EXIT_UNKNOWN,
    BenchgateError,
)
from benchgate.kit.files import write_json
from benchgate.kit.progress import Reporter
from benchgate.suite.family import FamilyPlan, apply_family, plan_family
from benchgate.suite.incremental import KEY_FIELD
from benchgate.suite.spec import PlannedEntry, SuiteSpec, entry_config, shown_entry

SUITE_FILE = "suite.json"
# Which entry exit code decides the suite's, first found first: bad input, a failed run, then verdicts.
EXIT_PRECEDENCE = (EXIT_BAD_INPUT, EXIT_RUN_FAILED, EXIT_REGRESSION, EXIT_UNKNOWN)
State = Literal["pending", "running", "done", "skipped", "error"]
SKIPPED = "measured before, in this --out, with this machine profile and the same settings"


@dataclass(frozen=True)
class EntryOutcome:
    """What gating one entry gave: its verdict, exit code and result directory."""

    verdict: str
    exit_code: int
    out_dir: Path


# Gates one entry's config, reporting its stages; raises a BenchgateError where it cannot.
RunEntry = Callable[[RunConfig, Reporter], EntryOutcome]


class SuiteProgress(Protocol):
    """What a suite tells its watcher: an entry starts, its stages (a Reporter), an entry ends."""

    def entry_started(self, position: int, total: int, name: str) -> Reporter: ...
    def entry_finished(self, position: int, total: int, record: dict[str, Any]) -> None: ...


class QuietProgress:
    def entry_started(self, position: int, total: int, name: str) -> Reporter:
        from benchgate.kit.progress import SilentReporter

        return SilentReporter()

    def entry_finished(self, position: int, total: int, record: dict[str, Any]) -> None:
        pass


@dataclass
class SuiteRecord:
    """suite.json's content (docs/suites.md), kept in memory and written after every change."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def entries(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.data["entries"]
        return entries

    def save(self) -> None:
        write_json(self.path, self.data)


def suite_exit_code(entries: list[dict[str, Any]]) -> int:
    codes = {e["exit_code"] for e in entries if e["exit_code"] is not None}
    return next((code for code in EXIT_PRECEDENCE if code in codes), EXIT_PASS)


def new_record(spec: SuiteSpec, out_dir: Path) -> SuiteRecord:
    """Every entry pending (or already in error, for one that cannot run), written before the first runs."""
    entries = []
    for planned in spec.entries:
        runnable = planned.entry is not None
        entries.append(
            {
                "name": planned.name,
                **shown_entry(planned),
                # Relative to the suite's --out; an entry refused before it ran has no directory there.
                "out": planned.name,
                "state": "pending" if runnable else "error",
                "verdict": None,
                "exit_code": None if runnable else EXIT_BAD_INPUT,
                "error": planned.error,
                "seconds": None if runnable else 0.0,
            }
        )
    data = {
        "suite": spec.name,
        "suite_file": str(spec.path),
        "incremental": spec.incremental,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "entries": entries,
        "exit_code": None,
    }
    return SuiteRecord(out_dir / SUITE_FILE, data)


def run_entries(
    spec: SuiteSpec,
    out_dir: Path,
    run_entry: RunEntry,
    overrides: Mapping[str, Any] | None = None,
    progress: SuiteProgress | None = None,
    keys: Mapping[str, dict[str, Any]] | None = None,
    carried: Mapping[str, dict[str, Any]] | None = None,
) -> SuiteRecord:
    """Gate every runnable entry of `spec` in file order into `out_dir`/<name>; returns suite.json's
    content, written after each entry, with the suite's exit code set.

    An incremental suite (suite/incremental.py) passes each entry's measurement key (`keys`, recorded in
    its row once it is done) and the previous rows of the entries measured before under the same key
    (`carried`): those are not run again, their rows kept and marked skipped."""
    watcher = progress or QuietProgress()
    record = new_record(spec, out_dir)
    plan = family_plan(spec, out_dir, overrides)
    record.data["family"] = plan.to_dict()
    record.save()
    total = len(spec.entries)
    for position, (planned, row) in enumerate(zip(spec.entries, record.entries, strict=True), start=1):
        before = (carried or {}).get(planned.name)
        if planned.entry is not None and before is not None:
            row.update({**before, "state": "skipped", "skipped": SKIPPED})
            record.save()
        elif planned.entry is not None:
            row["state"] = "running"
            record.save()
            reporter = watcher.entry_started(position, total, planned.name)
            row.update(_gate(spec, planned, out_dir, run_entry, overrides, reporter, plan))
            key = (keys or {}).get(planned.name)
            if key is not None and row["state"] == "done":
                row[KEY_FIELD] = key
            record.save()
        watcher.entry_finished(position, total, row)
    record.data["exit_code"] = suite_exit_code(record.entries)
    record.save()
    return record


def family_plan(spec: SuiteSpec, out_dir: Path, overrides: Mapping[str, Any] | None = None) -> FamilyPlan:
    """The suite's family plan over the entries that can run (an entry whose config is refused runs no
    decision, and its error is reported when its turn comes)."""
    configs = []
    for planned in spec.entries:
        if planned.entry is None:
            continue
        try:
            configs.append(entry_config(spec, planned, out_dir, overrides))
        except BenchgateError:
            continue
    return plan_family(configs, spec.family)


def _gate(
    spec: SuiteSpec,
    planned: PlannedEntry,
    out_dir: Path,
    run_entry: RunEntry,
    overrides: Mapping[str, Any] | None,
    reporter: Reporter,
    plan: FamilyPlan,
) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        config = apply_family(entry_config(spec, planned, out_dir, overrides), plan)
        outcome = run_entry(config, reporter)
    except BenchgateError as e:
        message = str(e)
        if not message.startswith(planned.where):
            message = f"{planned.where}: {message}"
        return {
            "state": "error",
            "verdict": None,
            "exit_code": e.exit_code,
            "error": message,
            "seconds": round(time.perf_counter() - started, 3),
        }
    return {
        "state": "done",
        "verdict": outcome.verdict,
        "exit_code": outcome.exit_code,
        "error": None,
        "seconds": round(time.perf_counter() - started, 3),
        "confidence": config.gate.tolerances.confidence,  # its share of the family's budget
    }
