"""eval.json says how many threads ran the eval: a real eval of the tiny GPT, asked for more threads than
the process may use (the cap itself is tests/unit/measure/test_eval_threads.py's)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchgate.config import MAX_THREADS
from benchgate.measure.evaluate import stage_eval

TINY = {"workload_args": {"size": "tiny"}, "workload": "benchgate.workloads.gpt:make_workload"}


@pytest.mark.slow
def test_eval_json_records_the_threads_that_ran(config_factory, tmp_path: Path) -> None:
    """Asked for 4096 threads on a process whose affinity mask holds one CPU, the eval runs one."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        config = config_factory(bench=TINY, eval={"train_steps": 2, "threads": MAX_THREADS})
        result = stage_eval(config, tmp_path / "eval.json")
    finally:
        os.sched_setaffinity(0, allowed)
    assert result["settings"]["threads"] == 1
    assert json.loads((tmp_path / "eval.json").read_text())["settings"]["threads"] == 1
