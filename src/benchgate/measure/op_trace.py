"""The profiled steps of an A/B's explaining round: the measured steps run under torch.profiler.

An A/B that decides FAIL (or is asked to explain) runs extra rounds whose sides profile their measured
steps (ab/explain.py). Each step is one `benchgate.step#<i>` range (attribution/trace_ops.STEP_RANGE),
around the training step only: the waits for the other side's turn fall outside every step, so they are
attributed to nothing. Host operators always; CUDA kernels where the step runs on a GPU; allocations
(profile_memory) where the memory view is asked for (a memory row that grew). Shapes and Python stacks
are not recorded: they multiply the profiler's cost per operator, and operators are paired by name.

Each rank writes `<dir>/rank<r>.pt.trace.json.gz`, which Perfetto and TensorBoard open as they are,
after the last step: the export times nothing. In an A/B round it waits for both sides' last steps
(`before_export`, the turn client's finish): the profiler's processing and the export take a core for a
second or more, and beside the other side's last step they slowed that step threefold (a base step of
355 ms among steps of 120 ms, measured in benchmarks/attribution.py's traces).
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchgate.attribution.trace_ops import STEP_RANGE, TRACE_SUFFIX


def trace_path(trace_dir: Path, rank: int) -> Path:
    return trace_dir / f"rank{rank}{TRACE_SUFFIX}"


def step_range(i: int) -> contextlib.AbstractContextManager[object]:
    """The range that marks measured step `i` in a profiled launch."""
    return record_function(f"{STEP_RANGE}{i}")


@contextlib.contextmanager
def profiled(
    trace_dir: Path | None,
    rank: int,
    device: torch.device,
    memory: bool = False,
    before_export: Callable[[], None] | None = None,
) -> Iterator[bool]:
    """Profile the block into `trace_dir`'s rank trace; yields whether it profiles (no dir: it does not).
    `memory`: record allocations too (the memory view; it adds an event per allocation).
    `before_export`: called after the block, before the profiler stops and processes what it recorded
    (an A/B side waits there for the other side's last step; module docstring)."""
    if trace_dir is None:
        yield False
        return
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, profile_memory=memory) as prof:
        yield True
        if before_export is not None:
            before_export()
    trace_dir.mkdir(parents=True, exist_ok=True)
    target = trace_path(trace_dir, rank)
    # torch's own .gz export compresses at gzip's slowest level: 3-4 s a trace of 12 small steps, where
    # the plain JSON and a level-1 gzip take 0.3 s (measured on the 2-core host, gpt-tiny).
    plain = target.with_suffix("")  # rank<r>.pt.trace.json, written here and removed here
    prof.export_chrome_trace(str(plain))
    with open(plain, "rb") as source, gzip.open(target, "wb", compresslevel=1) as sink:
        shutil.copyfileobj(source, sink)
    plain.unlink()
