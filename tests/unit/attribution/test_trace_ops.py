"""A real profiler trace read as time per entry per step (attribution/trace_ops.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from traces import profile_steps

from benchgate.attribution.trace_ops import STEP_RANGE, Entry, load_trace_events, read_trace, steps_of
from benchgate.errors import BadInputError


def test_self_times_partition_each_step(tmp_path: Path) -> None:
    path, times = profile_steps(tmp_path / "t", steps=5)
    assert path.name == "rank0.pt.trace.json.gz" and path.is_file()
    steps = read_trace(path)
    assert steps.steps == 5
    spans = {
        int(e["name"][len(STEP_RANGE) :]): e["dur"] / 1e3
        for e in load_trace_events(path)
        if e.get("cat") == "user_annotation" and e["name"].startswith(STEP_RANGE)
    }
    for i, row in enumerate(steps.ms):
        # Self times add up to the step's range: every microsecond is somebody's, none twice.
        assert sum(row.values()) == pytest.approx(spans[i], rel=0.02)
        assert spans[i] <= 1e3 * times[i] * 1.05
        assert row[Entry("aten::addmm", "cpu")] > 0
        # Optimizer.step is a range of torch's own; its Python between operators is an entry.
        assert any(e.kind == "python" and e.name.startswith("Optimizer.step") for e in row)
    assert Entry("step", "python") in steps.ms[0]  # the step's own Python, between its ranges
    assert not any(e.kind == "cuda" for row in steps.ms for e in row)  # no GPU here: no kernels
    assert steps.allocated == [{} for _ in range(5)]  # allocations are recorded only when asked


def test_allocations_go_to_the_operator_that_made_them(tmp_path: Path) -> None:
    path, _ = profile_steps(tmp_path / "t", steps=3, memory=True)
    steps = read_trace(path)
    for row in steps.allocated:
        # addmm's output: 256 x 256 floats of the first layer, at least.
        assert row.get("aten::addmm", 0) >= 256 * 256 * 4


def test_a_file_that_is_no_trace_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "rank0.pt.trace.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(BadInputError, match=r"rank0\.pt\.trace\.json\.gz: cannot be read"):
        read_trace(bad)
    other = tmp_path / "other.json.gz"
    with gzip.open(other, "wt") as f:
        json.dump({"rows": []}, f)
    with pytest.raises(BadInputError, match="no traceEvents list"):
        read_trace(other)


def test_a_trace_without_step_ranges_is_refused(tmp_path: Path) -> None:
    path, _ = profile_steps(tmp_path / "t", steps=2)
    events = [e for e in load_trace_events(path) if not str(e.get("name", "")).startswith(STEP_RANGE)]
    with pytest.raises(BadInputError, match=r"no benchgate\.step#<i> ranges"):
        steps_of(events, "trimmed")
