"""Profiler trace of a few training steps: one gzipped Chrome trace, `<out>/trace/*.pt.trace.json.gz`.

The schedule is finite (`repeat=1`): without it torch.profiler cycles forever and writes a trace per
cycle. Steps carry the record_function ranges of `workloads/training.py` (data, forward, loss, backward,
optimizer_step). The trace is written gzipped: a few steps of a small model are megabytes of JSON that
compress about tenfold, and both viewers read the .gz as it is:

- Perfetto: open https://ui.perfetto.dev and drop the .json.gz on it (nothing to install);
- TensorBoard: `tensorboard --logdir <out>/trace` (needs torch-tb-profiler), per-operator tables too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from benchgate.config import RunConfig
from benchgate.kit.files import write_json
from benchgate.measure.gpu_required import require_visible_gpu
from benchgate.workloads.base import load_workload
from benchgate.workloads.parallel import process_group
from benchgate.workloads.training import RANGES, Trainer, build_trainer, resolve_device, resolve_precision


def stage_trace(config: RunConfig, trace_dir: Path) -> dict[str, Any]:
    """Profile `wait + warmup + active` steps at world size 1; writes *.pt.trace.json.gz under `trace_dir`."""
    workload = load_workload(config.bench.workload, dict(config.bench.workload_args))
    require_visible_gpu(config.bench.device)  # a GPU node whose torch sees no GPU stops here (exit 2)
    device = resolve_device(config.bench.device)
    precision = resolve_precision(config.bench.precision, device)
    # In a process group of one and compiled as the bench's ws=1 steps are: the trace shows what was timed.
    with process_group(device):
        trainer = build_trainer(workload, device, precision, config.bench.seed, compile=config.bench.compile)
        return _profile(config, workload, trainer, device, trace_dir)


def _profile(
    config: RunConfig, workload: Any, trainer: Trainer, device: torch.device, trace_dir: Path
) -> dict[str, Any]:
    settings = config.trace
    trace_dir.mkdir(parents=True, exist_ok=True)
    for old in trace_dir.glob("*.pt.trace.json*"):
        old.unlink()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    steps = settings.wait + settings.warmup + settings.active
    started = time.perf_counter()
    with profile(
        activities=activities,
        schedule=schedule(wait=settings.wait, warmup=settings.warmup, active=settings.active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(
            str(trace_dir), worker_name=f"{config.bench.name or workload.name}-ws1", use_gzip=True
        ),
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        for _ in range(steps):
            trainer.step()
            prof.step()
    files = sorted(p.name for p in trace_dir.glob("*.pt.trace.json*"))
    summary = {
        "schema_version": 1,
        "stage": "trace",
        "workload": config.bench.name or workload.name,
        "device": str(device),
        "schedule": settings.model_dump(mode="json"),
        "ranges": list(RANGES),
        "files": files,
        "wall_s": time.perf_counter() - started,
    }
    write_json(trace_dir.parent / "trace.json", summary)
    return summary
