"""The benchmark worker that torchrun starts on every rank: `torchrun ... -m benchgate.measure.bench`.

Per rank: build the workload, run `warmup` steps, then time `steps` steps. Before the warmup, rank 0
counts the FLOPs of one training step (`measure/mfu.py`), for the metrics' third MFU estimator. On
CUDA each step is bracketed by CUDA events and the device is synchronised once at the end, so timing
adds no sync per step; on CPU the host clock is exact because kernels run synchronously. At the end
every rank's samples are gathered and rank 0 writes one metrics file. A step's global time is the
slowest rank's time for that step, because a synchronous data-parallel step finishes only when its
last rank does.

In an A/B round (benchgate.ab.runner) two worker groups, base and candidate, run at once and take
turns step by step through a coordinator (benchgate.measure.turns), so the host's drift hits both alike.

A rank that fails writes `<errors-dir>/rank<N>.json` so the launcher can name the rank and the cause.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from benchgate.config import RunConfig
from benchgate.errors import BenchgateError, RunFailedError
from benchgate.kit import lifeline, stats
from benchgate.kit.files import write_json
from benchgate.kit.progress import PROGRESS_PREFIX
from benchgate.measure.env import capture_environment
from benchgate.measure.launch import resolve_threads
from benchgate.measure.mfu import count_flops_or_why, mfu_block
from benchgate.measure.sysmetrics import sampling
from benchgate.measure.turns import SIDES, TurnClient
from benchgate.workloads.base import check_loss, load_workload
from benchgate.workloads.flops import PeakFlops, lookup_peak
from benchgate.workloads.training import Trainer, build_trainer, resolve_device, resolve_precision

SCHEMA_VERSION = 1


class StepTimer:
    """Per-step durations: CUDA events on GPU (read after one final sync), the host clock on CPU."""

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


def _gather(obj: Any, world_size: int) -> list[Any]:
    if world_size == 1:
        return [obj]
    out: list[Any] = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def _check_finite(losses: list[list[float]], first_step: int, phase: str) -> None:
    for rank, values in enumerate(losses):
        for i, value in enumerate(values):
            if value != value or value in (float("inf"), float("-inf")):
                raise RunFailedError(
                    f"rank {rank}: loss is {value} at {phase} step {first_step + i}; "
                    "the workload diverged or produced invalid values"
                )


def _run_steps(
    trainer: Trainer,
    n: int,
    timer: StepTimer | None,
    report: bool,
    reference: DriftReference | None = None,
    turns: TurnClient | None = None,
) -> list[float]:
    losses = []
    every = max(1, n // 20)
    for i in range(n):
        if turns is not None:
            turns.wait()
        if timer:
            timer.start(i)
        losses.append(trainer.step())
        if timer:
            timer.stop(i)
        if reference is not None:
            reference.measure()
        if turns is not None:
            if trainer.device.type == "cuda":
                # The other side's step must not overlap this one on the device (warmup steps too).
                torch.cuda.synchronize()
            turns.done()
        if report and ((i + 1) % every == 0 or i + 1 == n):
            print(f"{PROGRESS_PREFIX} {i + 1} {n}", flush=True)
    if losses:
        # After the timed steps, and reading no value: a loss of shape [1] would stack into [n, 1]
        # and fail later as a run failure. The env task checked this workload; an A/B base has not.
        check_loss(losses[0], f"bench.workload: {trainer.workload.name}")
    return torch.stack(losses).float().cpu().tolist() if losses else []


@dataclass(frozen=True)
class TurnTaking:
    """Where to take turns with the other side of an A/B round (see benchgate.measure.turns)."""

    address: str
    side: str
    pin: bool = True  # rank r of both sides on the same cores (gate.ab.pin_cores)


def _pin_to_shared_cores(local_rank: int, threads: int) -> None:
    """Pin this rank to the cores that rank `local_rank` of the other side is pinned to as well.

    The two sides take turns, so they never compete for these cores; what they share is the core's
    speed, its neighbours' load and its caches. Left to the scheduler, A and B land on different cores
    in each round, and that difference is a per-round offset of several percent on a shared host.
    """
    allowed = sorted(os.sched_getaffinity(0))
    first = (local_rank * threads) % len(allowed)
    os.sched_setaffinity(0, {allowed[(first + i) % len(allowed)] for i in range(threads)})


def run_worker(
    config: RunConfig, out: Path, turn_taking: TurnTaking | None = None, source_paths: Sequence[str] = ()
) -> dict[str, Any] | None:
    """Run this rank's benchmark; rank 0 returns (and writes) the metrics, other ranks return None.

    `source_paths` hold the code under test. They go first on the import path only now, after benchgate
    itself is imported, so the harness is the same for both sides of an A/B round and only the
    workload comes from the checkout.
    """
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    bench = config.bench
    device = resolve_device(bench.device, local_rank)
    precision = resolve_precision(bench.precision, device)
    # The cores are shared by this node's ranks only: across nodes, torchrun's LOCAL_WORLD_SIZE is fewer.
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    threads = resolve_threads(bench.threads_per_rank, device.type, local_world_size)
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if world_size > 1:
        dist.init_process_group(backend, timeout=timedelta(seconds=bench.timeout_s))

    sys.path[:0] = list(source_paths)
    workload = load_workload(bench.workload, dict(bench.workload_args))
    counting: dict[str, Any] = {}
    if turn_taking is not None:
        # An A/B round's metrics are read for their step times only; counting would lengthen each
        # launch (the first count in a process imports torch._dynamo: seconds on a busy host).
        counting["skipped"] = "an A/B round: only its step times are read"

    def count_flops(model: torch.nn.Module) -> None:
        counting.update(count_flops_or_why(workload, model, device, precision, bench.seed))

    # Rank 0 counts one training step before the DDP wrap and before the warmup: nothing timed waits.
    trainer = build_trainer(
        workload,
        device,
        precision,
        bench.seed,
        rank=rank,
        ddp=world_size > 1,
        before_wrap=count_flops if rank == 0 and not counting else None,
        compile=bench.compile,
    )
    turns = None
    if turn_taking is not None:
        if device.type == "cpu" and turn_taking.pin:
            _pin_to_shared_cores(local_rank, threads)
        turns = TurnClient(turn_taking.address, turn_taking.side, rank, bench.timeout_s)
    started = time.perf_counter()
    # In an A/B round the warmup takes turns too: two groups warming up at once would compete for the
    # cores and start the measured steps from different cache and frequency states.
    warm_losses = _run_steps(trainer, bench.warmup, None, report=False, turns=turns)
    _check_finite(_gather(warm_losses, world_size), 0, "warmup")
    if device.type == "cuda":
        torch.cuda.synchronize()
    timer = StepTimer(device, bench.steps)
    reference = DriftReference() if bench.drift_reference and device.type == "cpu" else None
    tracking = config.tracking
    if turns is not None:
        turns.idle_cpu_s = 0.0  # the measured steps' waits only
    with sampling(rank == 0 and tracking.enabled and tracking.system_metrics) as sampler:
        losses = _run_steps(trainer, bench.steps, timer, rank == 0, reference, turns)
    if turns is not None:
        turns.close()
    per_rank_times = timer.seconds()
    rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    gathered = _gather(
        {
            "times": per_rank_times,
            "losses": losses,
            "rss": rss_bytes,
            "reference": reference.seconds if reference else [],
            "idle_cpu": turns.idle_cpu_s if turns is not None else None,
        },
        world_size,
    )
    _check_finite([g["losses"] for g in gathered], bench.warmup, "measured")
    wall_s = time.perf_counter() - started
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank != 0:
        return None

    step_times = [max(g["times"][i] for g in gathered) for i in range(bench.steps)]
    global_tokens = workload.tokens_per_step * world_size
    tokens_per_s = [global_tokens / t for t in step_times]
    mean_loss = [sum(g["losses"][i] for g in gathered) / world_size for i in range(bench.steps)]
    samples: dict[str, Any] = {
        "step_time_s": step_times,
        "tokens_per_s": tokens_per_s,
        "loss": mean_loss,
        "step_time_s_per_rank": [g["times"] for g in gathered],
    }
    if turns is not None:
        # Summed over ranks: how much CPU this side used while the other side's steps were timed.
        samples["idle_cpu_s"] = sum(g["idle_cpu"] for g in gathered)
    if reference is not None:
        # The host's speed at each step, as the mean over ranks of the reference kernel's time.
        samples["reference_s"] = [
            sum(g["reference"][i] for g in gathered) / world_size for i in range(bench.steps)
        ]
    tokens_summary = stats.summarize(tokens_per_s)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = (
        PeakFlops(device_name, precision, bench.peak_tflops * 1e12, "bench.peak_tflops (set by the user)")
        if bench.peak_tflops
        else lookup_peak(device_name, precision)
    )
    memory: dict[str, Any] = {"max_rss_bytes_per_rank": [g["rss"] for g in gathered]}
    if device.type == "cuda":
        memory["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        memory["cuda_max_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
        memory["peak_bytes"] = memory["cuda_max_allocated_bytes"]
        memory["peak_kind"] = "cuda_max_allocated (rank 0)"
    else:
        memory["peak_bytes"] = max(memory["max_rss_bytes_per_rank"])
        memory["peak_kind"] = "max_rss (max over ranks)"

    metrics: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "stage": "bench",
        "machine_profile": capture_environment()["machine_profile"],
        # The name results are stored and compared under: bench.name where a setup has its own.
        "workload": bench.name or workload.name,
        "world_size": world_size,
        "device": device_name,
        "backend": backend if world_size > 1 else None,
        "precision": precision,
        "threads_per_rank": threads,
        "steps": bench.steps,
        "warmup": bench.warmup,
        "timing": "cuda_events" if device.type == "cuda" else "perf_counter",
        "tokens_per_step_per_rank": workload.tokens_per_step,
        "tokens_per_step_global": global_tokens,
        "step_time_s": stats.summarize(step_times).to_dict(),
        "tokens_per_s": tokens_summary.to_dict(),
        "mfu": mfu_block(workload, counting, tokens_summary.p50, peak, world_size, device_name, precision),
        "memory": memory,
        "loss_slope": stats.linear_slope(mean_loss).to_dict() if bench.steps >= 3 else None,
        "wall_s": wall_s,
        "samples": samples,
    }
    if sampler is not None:
        metrics["system"] = sampler.result()
    write_json(out, metrics)
    return metrics


def _write_rank_error(errors_dir: Path, exc: BaseException) -> None:
    rank = int(os.environ.get("RANK", "0"))
    exit_code = exc.exit_code if isinstance(exc, BenchgateError) else 3
    write_json(
        errors_dir / f"rank{rank}.json",
        {
            "rank": rank,
            "type": type(exc).__name__,
            "message": str(exc),
            "exit_code": exit_code,
            "time": time.time(),
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchgate.measure.bench", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="RunConfig JSON written by the launcher")
    parser.add_argument("--out", type=Path, required=True, help="metrics JSON to write (rank 0)")
    parser.add_argument("--errors-dir", type=Path, required=True, help="where a failing rank explains why")
    parser.add_argument("--turns", help="HOST:PORT of an A/B turn coordinator (with --side)")
    parser.add_argument("--side", choices=SIDES, help="this worker group's side of the A/B round")
    parser.add_argument("--no-pin", action="store_true", help="A/B: leave core placement to the scheduler")
    parser.add_argument("--source-path", action="append", default=[], help="code under test (repeatable)")
    args = parser.parse_args(argv)
    # A rank outliving torchrun (killed by -9 or the OOM killer) would hold its core and its peers' port.
    lifeline.die_with_parent(signal.SIGKILL)
    try:
        config = RunConfig.model_validate(json.loads(args.config.read_text()))
        turn_taking = TurnTaking(args.turns, args.side, not args.no_pin) if args.turns else None
        run_worker(config, args.out, turn_taking, args.source_path)
    except BaseException as exc:  # any failure, KeyboardInterrupt included, is reported for its rank
        _write_rank_error(args.errors_dir, exc)
        print(
            f"benchgate.measure.bench rank {os.environ.get('RANK', '0')}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )
        return exc.exit_code if isinstance(exc, BenchgateError) else 3
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written and closed by now. Skipping the interpreter's teardown with torch loaded
    # saves most of a second per launch (measured on a 2-core host: 1.25 s -> 0.5 s from the worker's
    # last line to torchrun's exit), paid by every bench and by both groups of every A/B round.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
