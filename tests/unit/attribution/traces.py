"""Real profiler traces for the attribution tests: a small model's training steps profiled in this process
the way a profiled A/B side does (measure/op_trace.profiled and step_range), written as the bench writes
them (rank<r>.pt.trace.json.gz). No trace is written by hand."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from benchgate.measure.op_trace import profiled, step_range, trace_path

WARMUP_STEPS = 2


class Net(nn.Module):
    """Two linear layers; `extra_norm` plants LayerNorms between them (the candidate's cause), and `gelu`
    swaps the ReLU between them for a GELU (aten::relu gone)."""

    def __init__(self, extra_norm: int = 0, gelu: bool = False) -> None:
        super().__init__()
        self.up = nn.Linear(64, 256)
        self.act = nn.GELU() if gelu else nn.ReLU()
        self.norms = nn.Sequential(*(nn.LayerNorm(256) for _ in range(extra_norm)))
        self.down = nn.Linear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.norms(self.act(self.up(x))))  # type: ignore[no-any-return]


def profile_steps(
    trace_dir: Path,
    steps: int = 6,
    extra_norm: int = 0,
    memory: bool = False,
    seed: int = 0,
    forwards: int = 1,
    gelu: bool = False,
) -> tuple[Path, list[float]]:
    """Profile `steps` training steps into `trace_dir`; the trace's path and each step's seconds.
    The forward is a `forward` range, as the bench's is; `forwards` > 1 runs it that many times (the
    extra runs' outputs unused); `gelu`: the Net's GELU instead of its ReLU."""
    # One intra-op thread: on a host busy with other work, an operator split over threads waits for the
    # slowest and its time leaps (a 0.4 ms LayerNorm measured 40 ms); the bench's A/B sides pin theirs.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _profile(trace_dir, steps, extra_norm, memory, seed, forwards, gelu)
    finally:
        torch.set_num_threads(threads)


def _profile(
    trace_dir: Path, steps: int, extra_norm: int, memory: bool, seed: int, forwards: int, gelu: bool
) -> tuple[Path, list[float]]:
    import time

    torch.manual_seed(seed)
    model = Net(extra_norm, gelu)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 64)

    def step() -> None:
        with torch.profiler.record_function("forward"):
            loss = model(x).square().mean()
            for _ in range(forwards - 1):
                model(x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    # Warmed up first, as the bench's steps are: a process's first steps (the allocator, autograd's
    # engine) run several times slower, and would make the first side profiled look the slower one.
    for _ in range(WARMUP_STEPS):
        step()
    times = []
    with profiled(trace_dir, 0, torch.device("cpu"), memory=memory):
        for i in range(steps):
            started = time.perf_counter()
            with step_range(i):
                step()
            times.append(time.perf_counter() - started)
    return trace_path(trace_dir, 0), times
