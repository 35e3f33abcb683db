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
    for row in steps.calls:  # each Linear's forward is one addmm a step; a range's Python is no call
        assert row[Entry("aten::addmm", "cpu")] == 2
        assert not any(e.kind == "python" for e in row)
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


def _late_rank(store_path: str, steps: int, late_s: float) -> None:
    """Rank 1 of a gloo pair: arrives `late_s` late at each step's all-reduce."""
    import os
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=1, world_size=2)
    for _ in range(steps):
        time.sleep(late_s)
        dist.all_reduce(torch.ones(4))
    dist.destroy_process_group()
    os._exit(0)  # a forked child leaves pytest's own teardown alone


def test_a_blocking_collectives_wait_is_an_entry_of_its_own(tmp_path: Path) -> None:
    """Rank 0 waits for a rank that arrives 80 ms late: gloo's wait records no event, and the wait is
    named after the collective it follows, not after the Python of the range around it."""
    import multiprocessing

    import torch
    import torch.distributed as dist

    from benchgate.measure.op_trace import profiled, step_range, trace_path

    steps, late_s = 4, 0.08
    store = str(tmp_path / "store")
    peer = multiprocessing.get_context("fork").Process(target=_late_rank, args=(store, steps, late_s))
    peer.start()
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=0, world_size=2)
    try:
        with profiled(tmp_path / "t", 0, torch.device("cpu")):
            for i in range(steps):
                with step_range(i), torch.profiler.record_function("forward"):
                    dist.all_reduce(torch.ones(4))
    finally:
        dist.destroy_process_group()
        peer.join(30)
    trace = read_trace(trace_path(tmp_path / "t", 0))
    wait = Entry("c10d::allreduce_", "wait")
    assert wait.label == "c10d::allreduce_ (wait after the call)" and wait.communication
    for row in trace.ms[1:]:  # the first step also waits for the peer's start
        assert row[wait] >= 0.5 * late_s * 1e3, row
        # The range's own Python is what is left: not the wait.
        assert row.get(Entry("forward", "python"), 0.0) < 0.2 * row[wait], row


def test_a_range_whole_is_its_events_time_counted_once_where_it_nests_in_itself(tmp_path: Path) -> None:
    path, _ = profile_steps(tmp_path / "t", steps=3, forwards=2)
    events = load_trace_events(path)
    steps = read_trace(path)
    spans = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith(STEP_RANGE)
    )
    for i, (start, end) in enumerate(spans):
        forward = [
            e["dur"] / 1e3
            for e in events
            if e.get("cat") == "user_annotation" and e["name"] == "forward" and start <= e["ts"] <= end
        ]
        assert len(forward) == 1 and steps.ranges[i]["forward"] == pytest.approx(forward[0])
        # Whole: its operators inside, more than their self times in it.
        assert steps.ranges[i]["forward"] >= steps.ms[i][Entry("forward", "python")]
        assert STEP_RANGE not in "".join(steps.ranges[i])  # the step is no range of its own here
    # A range inside one of its own name (a recursive module's) is counted once, in the outer one.
    import torch

    from benchgate.measure.op_trace import profiled, step_range, trace_path

    with (
        profiled(tmp_path / "nested", 0, torch.device("cpu")),
        step_range(0),
        torch.profiler.record_function("outer"),
        torch.profiler.record_function("outer"),
    ):
        torch.randn(64, 64).sum()
    nested_path = trace_path(tmp_path / "nested", 0)
    outer = [e["dur"] / 1e3 for e in load_trace_events(nested_path) if e.get("name") == "outer"]
    assert len(outer) == 2
    assert read_trace(nested_path).ranges[0] == {"outer": pytest.approx(max(outer))}
