"""The MLflow suite run: the runs table shows its duration and its verdict, as it does a gate run's.

Logged to MLflow's embedded SQLite store (real MLflow, the store `benchgate suite run` uses without a
server). The suite records are what suite/runner.py and kfp/suite/task.py write into suite.json.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness import make_config

from benchgate.kit.files import write_json
from benchgate.results.bundle import PUBLISHED_FILE
from benchgate.tracking.client import TAG_KIND, TAG_PARENT, TAG_VERDICT, Tracker, connect
from benchgate.tracking.suite_record import log_suite


def entry(name: str, verdict: str | None, exit_code: int, seconds: float | None) -> dict[str, Any]:
    return {
        "name": name, "workload": "my_bench:make_workload", "args": {}, "variant": {}, "out": name,
        "state": "done" if verdict else "error", "verdict": verdict, "exit_code": exit_code,
        "error": None if verdict else f"{name}: failed", "seconds": seconds,
    }  # fmt: skip


def record(*entries: dict[str, Any], exit_code: int) -> dict[str, Any]:
    return {
        "suite": "models", "suite_file": "suite.toml", "started": "2026-11-28T00:00:00+00:00",
        "entries": list(entries), "exit_code": exit_code,
    }  # fmt: skip


def tracker(tmp_path: Path) -> Tracker:
    return connect(make_config(tmp_path, tracking={"enabled": True}))


def test_a_local_suite_run_lasts_the_suite_and_carries_its_worst_verdict(tmp_path: Path) -> None:
    store = tracker(tmp_path)
    suite = record(entry("small", "PASS", 0, 30.0), entry("large", "FAIL", 1, 31.0), exit_code=1)
    before_ms = int(time.time() * 1e3)
    run = store.client.get_run(log_suite(store, tmp_path, suite, seconds=61.5))
    assert run.info.end_time - run.info.start_time == 61_500  # not 0 ms
    assert before_ms - 61_500 <= run.info.start_time <= int(time.time() * 1e3) - 61_500
    assert run.data.tags[TAG_VERDICT] == "FAIL"  # the runs table's verdict column
    assert run.data.tags[TAG_KIND] == "suite"


def test_a_suite_whose_entries_ran_before_it_was_logged_starts_with_the_first_of_them(tmp_path: Path) -> None:
    """On a cluster the suite gate logs the parent after every entry ran, and its `seconds` are its own:
    the parent starts where its earliest entry's gate run did, and nests it."""
    store = tracker(tmp_path)
    first_ms = int(time.time() * 1e3) - 300_000
    gate = store.client.create_run(store.experiment_id, start_time=first_ms, tags={TAG_KIND: "gate"})
    store.client.set_terminated(gate.info.run_id, "FINISHED", first_ms + 40_000)
    write_json(tmp_path / "small" / PUBLISHED_FILE, {"mlflow_run_id": gate.info.run_id})
    suite = record(entry("small", "WARN", 0, 40.0), entry("broken", None, 3, None), exit_code=3)
    run = store.client.get_run(log_suite(store, tmp_path, suite, seconds=2.0))
    assert run.info.start_time == first_ms
    assert run.info.end_time - run.info.start_time >= 300_000
    assert run.data.tags[TAG_VERDICT] == "WARN"
    assert store.client.get_run(gate.info.run_id).data.tags[TAG_PARENT] == run.info.run_id
