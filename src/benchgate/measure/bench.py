"""The benchmark worker that torchrun starts on every rank: `torchrun ... -m benchgate.measure.bench`.

Per rank: join the launch's process group (every launch has one, ws=1 included: a step may run a
collective, and a workload's `parallelize` gets a device mesh), build the workload's model as it trains
(workloads/parallel.py: its own parallelism, else DDP above one rank), count one training step's
FLOPs on every rank at once (`measure/mfu.py`), run `warmup` steps, then time `steps` steps
(`measure/steps.py`: CUDA events and one sync per window on GPU, the host clock on CPU). At the end
every rank's samples are gathered and rank 0 writes one metrics file. A step's global time is the
slowest rank's time for that step, because a synchronous data-parallel step finishes only when its
last rank does.

In an A/B round (benchgate.ab.runner) two worker groups, base and candidate, run at once and take
turns window by window through a coordinator (benchgate.measure.turns), so the host's drift hits both alike.

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
from torch.distributed import HashStore  # type: ignore[attr-defined]  # not in torch's stubs' __all__

from benchgate.config import RunConfig
from benchgate.errors import BenchgateError
from benchgate.kit import lifeline, stats
from benchgate.kit.files import write_json
from benchgate.measure import fingerprint
from benchgate.measure.device_state import device_state_block
from benchgate.measure.divergence import finite_measured_steps, first_non_finite
from benchgate.measure.env import capture_environment, launch_gpus
from benchgate.measure.gpu_required import require_visible_gpu
from benchgate.measure.launch import resolve_threads
from benchgate.measure.mfu import count_flops_or_why, launch_count, mfu_block
from benchgate.measure.op_trace import profiled
from benchgate.measure.steps import (
    DriftReference,
    StepTimer,
    cuda_memory_peaks,
    memory_block,
    run_steps,
)
from benchgate.measure.sysmetrics import device_window, sampling
from benchgate.measure.turns import SIDES, TurnClient
from benchgate.results.figures import mean_step_time
from benchgate.workloads.base import load_workload
from benchgate.workloads.flops import PeakFlops, resolve_peak
from benchgate.workloads.origin import confine_to
from benchgate.workloads.training import build_trainer, resolve_device, resolve_precision

SCHEMA_VERSION = 1


def _gather(obj: Any, world_size: int) -> list[Any]:
    if world_size == 1:
        return [obj]
    out: list[Any] = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


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
    config: RunConfig,
    out: Path,
    turn_taking: TurnTaking | None = None,
    source_paths: Sequence[str] = (),
    per_launch: int | None = None,
    count_flops: bool = True,
    op_trace: Path | None = None,
    op_trace_memory: bool = False,
) -> dict[str, Any] | None:
    """Run this rank's benchmark; rank 0 returns (and writes) the metrics, other ranks return None.

    `source_paths` hold the code under test. They go first on the import path only now, after benchgate
    itself is imported, so the harness is the same for both sides of an A/B round and only the
    workload comes from the checkout. `per_launch`: the GPUs the run's largest launch uses, which the
    machine profile names (env.json's, so that every bench task writes the profile the env task did).
    `op_trace`: profile the measured steps into this directory, one trace per rank (measure/op_trace.py),
    with allocations where `op_trace_memory`.
    """
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    bench = config.bench
    require_visible_gpu(bench.device)  # a GPU pod whose torch sees none never measures the CPU instead
    device = resolve_device(bench.device, local_rank)
    cuda = device.type == "cuda"
    precision = resolve_precision(bench.precision, device)
    # The cores are shared by this node's ranks only: across nodes, torchrun's LOCAL_WORLD_SIZE is fewer.
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    threads = resolve_threads(bench.threads_per_rank, device.type, local_world_size)
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=bench.timeout_s)
    if "MASTER_ADDR" in os.environ:  # torchrun's rendezvous
        dist.init_process_group(backend, timeout=timeout)
    else:  # called in this process alone (tests, tools): a group of one, nothing outside takes part
        dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1, timeout=timeout)

    sys.path[:0] = list(source_paths)
    confine_to(source_paths)  # an A/B side's checkout is where its workload comes from
    workload = load_workload(bench.workload, dict(bench.workload_args))
    counting: dict[str, Any] = {}
    ab_round = turn_taking is not None or not count_flops
    if ab_round:
        # An A/B round's metrics are read for their step times only; counting would lengthen each
        # launch (the first count in a process imports torch._dynamo: seconds on a busy host).
        counting["skipped"] = "an A/B round: only its step times are read"

    def count(model: torch.nn.Module) -> None:
        counting.update(count_flops_or_why(workload, model, device, precision, bench.seed))

    # Every rank counts one training step at once, after the parallelism and before the warmup: a
    # collective in the step has all its ranks, and nothing timed waits.
    trainer = build_trainer(
        workload,
        device,
        precision,
        bench.seed,
        world_size=world_size,
        rank=rank,
        after_parallelize=None if counting else count,
        compile=bench.compile,
        where=f"bench.workload: {bench.workload}",
    )
    turns = None
    if turn_taking is not None:
        if device.type == "cpu" and turn_taking.pin:
            _pin_to_shared_cores(local_rank, threads)
        turns = TurnClient(turn_taking.address, turn_taking.side, rank, bench.timeout_s)
    started = time.perf_counter()
    # In an A/B round the warmup takes turns too: two groups warming up at once would compete for the
    # cores and start the measured steps from different cache and frequency states.
    warm_losses = run_steps(trainer, bench.warmup, None, False, bench.sync_every, turns=turns)
    warmup_memory = cuda_memory_peaks(device)
    timer = StepTimer(device, bench.steps)
    reference = DriftReference() if bench.drift_reference and device.type == "cpu" else None
    tracking = config.tracking
    if turns is not None:
        turns.idle_cpu_s = 0.0  # the measured steps' waits only
    with (
        sampling(rank == 0 and tracking.enabled and tracking.system_metrics) as sampler,
        device_window(str(torch.cuda.get_device_properties(device).uuid) if cuda else None) as window,
        profiled(
            op_trace, rank, device, op_trace_memory, before_export=turns.finish if turns is not None else None
        ) as marked,
    ):
        if turns is not None:
            turns.ready()  # set up: none of this side's setup overlaps the other side's first timed step
        losses = run_steps(
            trainer, bench.steps, timer, rank == 0, bench.sync_every, reference, turns, mark_steps=marked
        )
    if turns is not None:
        turns.finish()  # both sides' last steps are done: this side's teardown times nothing (a profiled
        # side has waited for them before its trace's export already)
    per_rank_times = timer.seconds()
    measured_memory = cuda_memory_peaks(device)
    rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    gathered = _gather(
        {
            "times": per_rank_times,
            "losses": losses,
            "warm_losses": warm_losses,
            "rss": rss_bytes,
            "cuda_memory": {"warmup": warmup_memory, "measured": measured_memory} if warmup_memory else None,
            "reference": reference.seconds if reference else [],
            "idle_cpu": turns.idle_cpu_s if turns is not None else None,
            "counting": counting,
            "device_window": window.result if window is not None else None,
        },
        world_size,
    )
    # A non-finite loss is recorded, not raised: the run diverged (measure/divergence.py).
    diverged = first_non_finite([g["warm_losses"] + g["losses"] for g in gathered], bench.warmup)
    wall_s = time.perf_counter() - started
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return None

    step_times = [max(g["times"][i] for g in gathered) for i in range(bench.steps)]
    # Tokens a step of the launch trains: one replica's tokens_per_step for each data-parallel replica
    # (every rank under DDP; tensor-parallel ranks of one replica share its batch).
    replicas = trainer.parallelism.replicas
    global_tokens = workload.tokens_per_step * replicas
    tokens_per_s = [global_tokens / t for t in step_times]
    kept = finite_measured_steps(diverged, bench.warmup, bench.steps)
    mean_loss = [sum(g["losses"][i] for g in gathered) / world_size for i in range(kept)]
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
    # A MIG slice's peak is its board's scaled by its SMs (workloads/flops.py): the slice's own count.
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count if cuda else None
    resolved = resolve_peak(device_name, precision, sm_count=sm_count)
    peak = (
        PeakFlops(device_name, precision, bench.peak_tflops * 1e12, "bench.peak_tflops (set by the user)")
        if bench.peak_tflops
        else resolved.peak
    )
    counted = launch_count([g["counting"] for g in gathered], global_tokens)
    profile_gpus = per_launch or launch_gpus(bench.world_sizes) or world_size
    metrics: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "stage": "bench",
        "machine_profile": capture_environment(per_launch=profile_gpus)["machine_profile"],
        # The name results are stored and compared under: bench.name where a setup has its own.
        "workload": bench.name or workload.name,
        "world_size": world_size,
        "device": device_name,
        "backend": backend if world_size > 1 else None,
        "parallelism": trainer.parallelism.describe(),
        "data_parallel_replicas": replicas,
        "precision": precision,
        "threads_per_rank": threads,
        "steps": bench.steps,
        "warmup": bench.warmup,
        "sync_every": bench.sync_every,
        "timing": "cuda_events" if device.type == "cuda" else "perf_counter",
        # What tokens_per_step counts (SupportsUnit): the rows and tables name the rate after it.
        "unit": getattr(workload, "unit", None) or "tokens",
        "tokens_per_step_per_rank": workload.tokens_per_step,
        "tokens_per_step_global": global_tokens,
        "step_time_s": stats.summarize(step_times).to_dict(),
        "tokens_per_s": tokens_summary.to_dict(),
        # MFU of the run's tokens/s (results/figures.run_rate: tokens per step over the mean step time),
        # the one figure every view shows, so the MFU beside it is of that figure.
        "mfu": mfu_block(
            workload, counted, global_tokens / mean_step_time(step_times), peak, world_size, resolved.reason
        ),
        "memory": memory_block(device.type, gathered),
        "loss_slope": stats.linear_slope(mean_loss).to_dict() if len(mean_loss) >= 3 else None,
        "diverged": diverged,
        # The workload's periodic event, every so many steps (None: none): every A/B round covers it.
        "period_steps": getattr(workload, "period_steps", None),
        "wall_s": wall_s,
        "samples": samples,
    }
    if cuda:
        windows = [g["device_window"] for g in gathered]
        metrics["device_state"] = device_state_block(windows, global_tokens * bench.steps)
    if sampler is not None:
        metrics["system"] = sampler.result()
    if not ab_round:  # the run's own bench: what it loaded is its packages fingerprint (fingerprint.of_run)
        metrics[fingerprint.LOADED] = fingerprint.record_loaded(source_paths)
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
    parser.add_argument("--per-launch", type=int, help="GPUs the run's largest launch uses (the profile's)")
    parser.add_argument("--no-count", action="store_true", help="skip the FLOP count (an A/B round's launch)")
    parser.add_argument("--op-trace", type=Path, help="profile the measured steps: one trace per rank here")
    parser.add_argument("--op-trace-memory", action="store_true", help="with --op-trace: record allocations")
    args = parser.parse_args(argv)
    # A rank outliving torchrun (killed by -9 or the OOM killer) would hold its core and its peers' port.
    lifeline.die_with_parent(signal.SIGKILL)
    try:
        config = RunConfig.model_validate(json.loads(args.config.read_text()))
        turn_taking = TurnTaking(args.turns, args.side, not args.no_pin) if args.turns else None
        run_worker(
            config,
            args.out,
            turn_taking,
            args.source_path,
            args.per_launch,
            not args.no_count,
            args.op_trace,
            args.op_trace_memory,
        )
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
