"""The timed step loop of the bench and of every A/B side: one clock and one synchronisation policy.

Steps run in windows of `bench.sync_every` steps (measure/turns.py, `steps_per_turn`; one by default).
On CUDA each step is bracketed by CUDA events and the device is synchronised at the end of each window,
in the bench and in the A/B alike: within a window the host may run ahead of the GPU, as a training
loop that does not read its loss does; at the window's end it waits, as one that logs the loss does.
Both sides of an A/B and the bench therefore time the same thing, so a change that only adds host-side
work (Python overhead, a slower batch) moves all three alike. In an A/B a window is one turn: the other
side's steps never overlap this side's on the device. On CPU the host clock is exact (kernels run
synchronously); the windows and turns are the same, only the synchronise is CUDA's alone.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from benchgate.kit.progress import PROGRESS_PREFIX
from benchgate.measure.op_trace import step_range
from benchgate.measure.turns import TurnClient, steps_per_turn
from benchgate.workloads.contract import check_loss
from benchgate.workloads.training import Trainer


class StepTimer:
    """Per-step durations: CUDA events on GPU (read after the last window's sync), the host clock on CPU."""

    def __init__(self, device: torch.device, steps: int) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
            self.ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
        self.host: list[tuple[int, int]] = []

    def start(self, i: int) -> None:
        if self.cuda:
            self.starts[i].record()
        else:
            self.host.append((time.perf_counter_ns(), 0))

    def stop(self, i: int) -> None:
        if self.cuda:
            self.ends[i].record()
        else:
            self.host[i] = (self.host[i][0], time.perf_counter_ns())

    def seconds(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [s.elapsed_time(e) / 1e3 for s, e in zip(self.starts, self.ends, strict=True)]
        return [(end - begin) / 1e9 for begin, end in self.host]


class DriftReference:
    """A fixed CPU matmul timed after each step: it slows down when the host does, not when code does.

    On a shared host the speed of the machine drifts by more than the tolerance between runs; dividing
    step time by this reference cut the spread of p50 across runs from 11.3% to 3.8% (docs/benchmarks.md).
    It runs outside the timed region, so step times are unaffected; it costs about 5 ms per step.
    """

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.a = torch.randn(256, 256, generator=generator)
        self.b = torch.randn(256, 256, generator=generator)
        self.seconds: list[float] = []

    def measure(self) -> None:
        start = time.perf_counter()
        for _ in range(10):
            torch.mm(self.a, self.b)
        self.seconds.append(time.perf_counter() - start)


def run_steps(
    trainer: Trainer,
    n: int,
    timer: StepTimer | None,
    report: bool,
    sync_every: int,
    reference: DriftReference | None = None,
    turns: TurnClient | None = None,
    mark_steps: bool = False,
) -> list[float]:
    """Run `n` steps in windows (see the module's docstring); returns the losses, read after the last.

    `mark_steps`: each step is a profiler range (measure/op_trace.step_range), for a profiled launch."""
    losses = []
    every = max(1, n // 20)
    cuda = trainer.device.type == "cuda"
    window = steps_per_turn(sync_every)
    for i in range(n):
        if turns is not None and i % window == 0:
            turns.wait()
        if timer:
            timer.start(i)
        with step_range(i) if mark_steps else contextlib.nullcontext():
            losses.append(trainer.step())
        if timer:
            timer.stop(i)
        if reference is not None:
            reference.measure()
        if (i + 1) % window == 0 or i + 1 == n:
            if cuda:
                torch.cuda.synchronize(trainer.device)
            if turns is not None:
                turns.done()
        if report and ((i + 1) % every == 0 or i + 1 == n):
            print(f"{PROGRESS_PREFIX} {i + 1} {n}", flush=True)
    if losses:
        # After the timed steps, and reading no value: a loss of shape [1] would stack into [n, 1]
        # and fail later as a run failure. The env task checked this workload; an A/B base has not.
        check_loss(losses[0], f"bench.workload: {trainer.workload.name}")
    return torch.stack(losses).float().cpu().tolist() if losses else []


def cuda_memory_peaks(device: torch.device) -> dict[str, int] | None:
    """This rank's peak allocated and reserved CUDA memory since the last call, then reset: one phase's
    (warmup, measured). None on CPU."""
    if device.type != "cuda":
        return None
    peaks = {
        "allocated": int(torch.cuda.max_memory_allocated(device)),
        "reserved": int(torch.cuda.max_memory_reserved(device)),
    }
    torch.cuda.reset_peak_memory_stats(device)
    return peaks


def memory_block(device_type: str, gathered: list[dict[str, Any]]) -> dict[str, Any]:
    """The metrics' "memory": per rank and phase, and the peak the memory check compares: on CUDA the
    largest rank's allocated bytes in the measured steps (sharded models differ per rank), on CPU the
    largest rank's max RSS (a process's RSS has no reset)."""
    memory: dict[str, Any] = {"max_rss_bytes_per_rank": [g["rss"] for g in gathered]}
    if device_type == "cuda":
        phases = [g["cuda_memory"] for g in gathered]
        measured = [p["measured"] for p in phases]
        memory["cuda_per_rank"] = phases
        memory["cuda_max_allocated_bytes"] = max(m["allocated"] for m in measured)
        memory["cuda_max_reserved_bytes"] = max(m["reserved"] for m in measured)
        memory["cuda_warmup_max_reserved_bytes"] = max(p["warmup"]["reserved"] for p in phases)
        memory["peak_bytes"] = memory["cuda_max_allocated_bytes"]
        memory["peak_kind"] = "cuda_max_allocated (max over ranks, measured steps)"
    else:
        memory["peak_bytes"] = max(memory["max_rss_bytes_per_rank"])
        memory["peak_kind"] = "max_rss (max over ranks)"
    return memory
