"""One rank's profiler trace (torch.profiler's Chrome trace, gzipped) read as time per entry per step.

The bench marks each profiled step with a `benchgate.step#<i>` range (measure/op_trace.py). Inside a
step, every host operator (`cpu_op`) and every record_function range (`user_annotation`: the step's
data/forward/loss/backward/optimizer_step, and the workload's own) gets its *self* time: its duration
less that of the events nested directly inside it on the same thread. Self times partition the step's
host time, so what no operator accounts for (Python between operators) is the self time of the
innermost range around it, and is named after that range, e.g. "forward (Python outside operators)".

A blocking collective's wait is the exception: gloo's `wait()` records no event, so the time a rank
waits for the others would be its caller's Python. The gap between a collective's operator
(`c10d::allreduce_`, ...) and the next event on its thread is that wait, and is an entry of its own,
"c10d::allreduce_ (wait after the call)", flagged as communication. Where the collective does not
block the host (NCCL's), the gap is the few microseconds of Python it is.

On CUDA each kernel (and memcpy/memset) is an entry of its own, measured on the device, and belongs to
the step whose host code launched it (the launch's `correlation` id), not to the step during which the
device ran it: steps are queued ahead of the device.

Ranges whole: each record_function range's time with everything inside it (the bench's forward,
backward, optimizer_step, the workload's own ranges, torch's Optimizer.step), per step, counted once
where a range nests in one of its own name. A cause that scales every operator of the forward (the
forward run twice) is spread thin over operators and whole in its range.

Calls: how many times each operator (and kernel) ran in each step. A cause spread thin (the forward
run twice, a module repeated) reads there as every count grown, where no one operator's time stands out.

Allocations: with profile_memory on, each `[memory]` event of positive size counts toward the innermost
operator open on its thread at that instant, passing over the operators that only allocate for their
caller (aten::empty and its kind), so that a new LayerNorm's output is the LayerNorm's.

Pure: JSON in, numbers out; no torch. `read_trace` is what ab/explain.py calls per rank and round.
"""

from __future__ import annotations

import bisect
import gzip
import json
import multiprocessing
import os
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchgate.errors import BadInputError

STEP_RANGE = "benchgate.step#"
TRACE_SUFFIX = ".pt.trace.json.gz"  # a profiled launch writes rank<r> + this per rank (measure/op_trace.py)
KINDS = ("cpu", "python", "wait", "cuda")  # host operator, Python inside a range, a collective's wait, kernel
HOST_CATEGORIES = ("cpu_op", "user_annotation")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
# Collectives, host side (c10d ops, gloo's and NCCL's own ranges, DDP's comm hook) and device side
# (NCCL's kernels): their time is communication, the rest compute.
# Names only collectives carry: an operator name that merely contains "broadcast" (aten::broadcast_tensors)
# is compute.
COMMUNICATION = re.compile(
    r"^(c10d::|_?c10d_functional::|gloo:|nccl:|record_param_comms)|ncclDevKernel|ncclKernel|"
    r"^(DistributedDataParallel|DDP)\.|^ProcessGroup"
)
PYTHON_SUFFIX = " (Python outside operators)"
WAIT_SUFFIX = " (wait after the call)"
# The host operators of collectives, after which a blocking process group waits outside any operator.
COLLECTIVE_OP = re.compile(r"^_?c10d(_functional)?::")
# Operators that only allocate for the one that called them: an allocation is that caller's (the
# LayerNorm's output, not aten::empty's).
ALLOCATING_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::resize_",
    }
)


@dataclass(frozen=True)
class Entry:
    """What time is attributed to: an operator, a range's own Python time, or a kernel."""

    name: str
    kind: str  # one of KINDS

    @property
    def label(self) -> str:
        if self.kind == "python":
            return self.name + PYTHON_SUFFIX
        if self.kind == "wait":
            return self.name + WAIT_SUFFIX
        return f"{self.name} [kernel]" if self.kind == "cuda" else self.name

    @property
    def communication(self) -> bool:
        return bool(COMMUNICATION.search(self.name))


@dataclass
class TraceSteps:
    """One rank's profiled steps: per step, milliseconds per entry and bytes allocated per operator."""

    ms: list[dict[Entry, float]] = field(default_factory=list)
    allocated: list[dict[str, int]] = field(default_factory=list)
    ranges: list[dict[str, float]] = field(default_factory=list)  # per step, ms per range, whole
    calls: list[dict[Entry, int]] = field(default_factory=list)  # per step, calls per operator or kernel

    @property
    def steps(self) -> int:
        return len(self.ms)


def load_trace_events(path: Path) -> list[dict[str, Any]]:
    """The trace's events; a file that is not a profiler trace is a BadInputError naming it."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, EOFError) as e:
        raise BadInputError(f"profiler trace {path}: cannot be read ({e})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise BadInputError(f"profiler trace {path}: no traceEvents list (not a torch.profiler trace)")
    return [e for e in events if isinstance(e, dict)]


def read_trace(path: Path) -> TraceSteps:
    """`path`'s steps (see the module docstring); a trace without step ranges is a BadInputError."""
    return steps_of(load_trace_events(path), str(path))


def read_traces(paths: Sequence[Path]) -> list[TraceSteps]:
    """Each of `paths` read, in processes of their own where there are several: a trace of 12 small
    steps takes 1.5 s of Python to read, and an explaining round has one per rank and side."""
    if len(paths) < 2:
        return [read_trace(p) for p in paths]
    workers = min(len(paths), os.cpu_count() or 1)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(read_trace, paths))


def steps_of(events: list[dict[str, Any]], source: str = "trace") -> TraceSteps:
    spans = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), int(e["name"][len(STEP_RANGE) :]))
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and _is_step(e.get("name"))
    )
    if not spans:
        raise BadInputError(f"profiler trace {source}: no {STEP_RANGE}<i> ranges (not a profiled bench step)")
    starts = [s[0] for s in spans]
    out = TraceSteps([{} for _ in spans], [{} for _ in spans], [{} for _ in spans], [{} for _ in spans])

    def step_at(ts: float) -> int | None:
        i = bisect.bisect_right(starts, ts) - 1
        return i if i >= 0 and ts <= spans[i][1] else None

    _host_self_times(events, step_at, out)
    _device_times(events, step_at, out)
    return out


def _is_step(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(STEP_RANGE) and name[len(STEP_RANGE) :].isdigit()


def _host_self_times(events: list[dict[str, Any]], step_at: Any, out: TraceSteps) -> None:
    """Self time of every host event inside a step, thread by thread; allocations to the innermost op."""
    by_thread: dict[Any, list[tuple[float, int, float, dict[str, Any]]]] = {}
    for e in events:
        ph, category = e.get("ph"), e.get("cat")
        if ph == "X" and category in HOST_CATEGORIES and "ts" in e:
            # Sorted by start, then longest first: a parent precedes the children that start with it.
            item = (float(e["ts"]), 0, -float(e.get("dur", 0.0)), e)
        elif ph == "i" and e.get("name") == "[memory]" and "ts" in e:
            item = (float(e["ts"]), 1, 0.0, e)  # after the operators that open at the same instant
        else:
            continue
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(item)
    for items in by_thread.values():
        items.sort(key=lambda item: item[:3])
        # A frame: [end, entry or None (a step range), step, self_us, the collective that closed last
        # inside it and when (the wait that follows it is that collective's)].
        stack: list[list[Any]] = []
        for ts, order, negative_dur, e in items:
            while stack and stack[-1][0] <= ts and not (order == 1 and stack[-1][0] == ts):
                _close(stack, out)
            if order == 1:
                _allocation(e, stack, step_at(ts), out)
                continue
            dur = -negative_dur
            if stack:
                _end_wait(stack[-1], ts, out)
                stack[-1][3] -= dur  # a child's time is not its parent's own
            name = str(e.get("name", "?"))
            entry = None if _is_step(name) else Entry(name, "cpu" if e["cat"] == "cpu_op" else "python")
            if entry is not None and entry.kind == "python":
                _range_whole(entry.name, dur, stack, step_at(ts), out)
            stack.append([ts + dur, entry, step_at(ts), dur, None, 0.0])
        while stack:
            _close(stack, out)


def _close(stack: list[list[Any]], out: TraceSteps) -> None:
    frame = stack.pop()
    end, entry, step = frame[:3]
    _end_wait(frame, end, out)
    if stack:  # the parent's next gap, up to its next child or its end, is this collective's wait
        collective = entry is not None and entry.kind == "cpu" and COLLECTIVE_OP.match(entry.name)
        stack[-1][4:6] = [entry if collective else None, end]
    if step is None:
        return
    # The step range's own time (between its ranges) is Python too: named for the step.
    _add(out, step, entry or Entry("step", "python"), frame[3])
    if entry is not None and entry.kind == "cpu":
        _count(out, step, entry)


def _end_wait(frame: list[Any], until: float, out: TraceSteps) -> None:
    """Move the gap since the collective that closed last in `frame` from the frame's own time to
    that collective's wait."""
    collective, since = frame[4], frame[5]
    frame[4] = None
    if collective is None or frame[2] is None or until <= since:
        return
    frame[3] -= until - since
    _add(out, frame[2], Entry(collective.name, "wait"), until - since)


def _range_whole(name: str, dur: float, stack: list[list[Any]], step: int | None, out: TraceSteps) -> None:
    if step is None or any(f[1] is not None and f[1].name == name for f in stack):
        return  # outside the steps, or inside a range of its own name (its time is counted there)
    row = out.ranges[step]
    row[name] = row.get(name, 0.0) + dur / 1e3


def _add(out: TraceSteps, step: int, entry: Entry, us: float) -> None:
    row = out.ms[step]
    row[entry] = row.get(entry, 0.0) + max(us, 0.0) / 1e3


def _count(out: TraceSteps, step: int, entry: Entry) -> None:
    row = out.calls[step]
    row[entry] = row.get(entry, 0) + 1


def _allocation(e: dict[str, Any], stack: list[list[Any]], step: int | None, out: TraceSteps) -> None:
    size = (e.get("args") or {}).get("Bytes", 0)
    if step is None or not isinstance(size, int | float) or size <= 0:
        return
    owner = next(
        (f[1] for f in reversed(stack) if f[1] is not None and f[1].name not in ALLOCATING_OPS), None
    )
    name = owner.name if owner is not None else "step"
    row = out.allocated[step]
    row[name] = row.get(name, 0) + int(size)


def _device_times(events: list[dict[str, Any]], step_at: Any, out: TraceSteps) -> None:
    """Each kernel's device time, in the step whose host code launched it."""
    launched_at: dict[Any, float] = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATEGORIES and "ts" in e:
            correlation = (e.get("args") or {}).get("correlation")
            if correlation is not None:
                launched_at[correlation] = float(e["ts"])
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in DEVICE_CATEGORIES:
            continue
        launch = launched_at.get((e.get("args") or {}).get("correlation"))
        step = step_at(launch) if launch is not None else None
        if step is None:
            continue
        entry = Entry(str(e.get("name", "?")), "cuda")
        row = out.ms[step]
        row[entry] = row.get(entry, 0.0) + float(e.get("dur", 0.0)) / 1e3
        _count(out, step, entry)
