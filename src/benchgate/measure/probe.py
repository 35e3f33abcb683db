"""`benchgate doctor`'s device probes: what the machine is, what state it is in, and what a plain matmul
reaches on it. The A/A rounds say how noisy it is; these say why, and whether it is the machine expected.

    CUDA   torch's view (device name, compute capability, NCCL), NVML's (which card, power limit, the
           clocks and throttle reasons now; `measure/device.py`), and the bf16 matmul ceiling: an
           8192³ matmul timed with CUDA events, the best of a few repeats, against the datasheet's dense
           peak (`workloads.flops.lookup_peak`). A card well under its usual share of peak is throttled,
           power-capped or shared.
    CPU    the CPU budget (affinity mask, cgroup quota, usable cores: `kit/cpus.py`), the load average
           against the usable cores (other processes on a shared host are the noise the A/B fights),
           and a short fp32 matmul figure on the usable cores.

torch is imported inside the functions, so importing this module (the CLI does) stays light. The
figures from timings are pure (`matmul_figure`, `load_figure`) and tested without a device.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from benchgate.kit.cpus import cpu_budget
from benchgate.workloads.flops import lookup_peak

# The CUDA ceiling's matmul: large enough to reach a datacenter GPU's peak (8192³ bf16 is ~1.1 TFLOP, a
# few ms on an H100), repeated enough that the best repeat is the clock-limited ceiling.
CUDA_MATMUL_N = 8192
CUDA_REPEATS = 5
CUDA_MATMULS_PER_REPEAT = 10
# The CPU figure's matmul: ~2 GFLOP of fp32, tens of ms on a core; only a reference for the host.
CPU_MATMUL_N = 1024
CPU_REPEATS = 5


def matmul_figure(n: int, seconds: list[float], peak_flops_per_s: float | None) -> dict[str, Any]:
    """FLOP/s of an n³ matmul timed `seconds` per matmul (one entry per repeat): the best repeat is the
    ceiling, the median the typical; against `peak_flops_per_s` where a peak is known."""
    if not seconds or min(seconds) <= 0:
        raise ValueError(f"matmul seconds: got {seconds!r}, expected one positive time per repeat")
    flops = 2.0 * n**3
    best, median = flops / min(seconds), flops / statistics.median(seconds)
    return {
        "n": n,
        "repeats": len(seconds),
        "best_tflops": best / 1e12,
        "median_tflops": median / 1e12,
        "peak_tflops": None if peak_flops_per_s is None else peak_flops_per_s / 1e12,
        "share_of_peak": None if peak_flops_per_s is None else best / peak_flops_per_s,
    }


def load_figure(loadavg: tuple[float, float, float], usable: int) -> dict[str, Any]:
    """The 1-, 5- and 15-minute load averages against the usable cores; busy when the last minute's load
    is at or above them (every core had a runnable process besides what is measured)."""
    one, five, fifteen = loadavg
    return {
        "load_1m": one,
        "load_5m": five,
        "load_15m": fifteen,
        "usable_cores": usable,
        "load_per_core": one / usable,
        "busy": one >= usable,
    }


def cpu_probe() -> dict[str, Any]:
    """The CPU budget, the load, and an fp32 matmul figure on the usable cores."""
    import torch

    budget = cpu_budget()
    load = load_figure(os.getloadavg(), budget.usable)
    threads = torch.get_num_threads()
    torch.set_num_threads(budget.usable)
    try:
        a = torch.randn(CPU_MATMUL_N, CPU_MATMUL_N)
        b = torch.randn(CPU_MATMUL_N, CPU_MATMUL_N)
        torch.mm(a, b)  # warm: the first call allocates and picks the kernel
        seconds = []
        for _ in range(CPU_REPEATS):
            started = time.perf_counter()
            torch.mm(a, b)
            seconds.append(time.perf_counter() - started)
    finally:
        torch.set_num_threads(threads)
    matmul = matmul_figure(CPU_MATMUL_N, seconds, None)
    return {
        "type": "cpu",
        "affinity_cores": budget.affinity,
        "quota_cores": budget.quota,
        "usable_cores": budget.usable,
        "load": load,
        "matmul_fp32": {**matmul, "threads": budget.usable},
    }


def nvml_figures(uuid: str | None) -> dict[str, Any]:
    """NVML's identity of the GPU with this UUID and its state now; `available: False` and `why` where
    NVML (or benchgate's reader of it) is absent. Never raises."""
    try:
        from benchgate.measure import device
    except ImportError as e:
        return {"available": False, "why": f"benchgate.measure.device is not available ({e})"}
    identity = device.identity()
    if not identity.get("available"):
        return {"available": False, "why": identity.get("why") or "unknown"}
    gpus = identity.get("gpus") or []
    index = device.nvml_index_for_uuid(uuid) if uuid else None
    # CUDA_VISIBLE_DEVICES renumbers CUDA's devices, never NVML's: match by UUID; the first GPU otherwise.
    gpu = next((g for g in gpus if g.get("index") == index), gpus[0] if gpus else None)
    if gpu is None:
        return {"available": False, "why": "NVML sees no GPU"}
    try:
        state = device.current_state(int(gpu["index"]))
    except Exception as e:  # NVML went away between the two reads: say so, keep the identity
        state = {"error": str(e)}
    return {"available": True, "why": None, "driver": identity.get("driver"), "gpu": gpu, "state": state}


def cuda_probe(index: int = 0) -> dict[str, Any]:
    """torch's and NVML's view of CUDA device `index`, and its bf16 matmul ceiling against the datasheet."""
    import torch

    props = torch.cuda.get_device_properties(index)
    name = torch.cuda.get_device_name(index)
    nccl = None
    if torch.distributed.is_nccl_available():
        nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
    uuid = str(getattr(props, "uuid", "") or "") or None
    peak = lookup_peak(name, "bf16", props.multi_processor_count)
    seconds = _cuda_matmul_seconds(index)
    return {
        "type": "cuda",
        "torch_sees_cuda": True,
        "device_count": torch.cuda.device_count(),
        "index": index,
        "name": name,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_bytes": int(props.total_memory),
        "torch_cuda": torch.version.cuda,
        "nccl": nccl,
        "uuid": uuid,
        "nvml": nvml_figures(uuid),
        "matmul_bf16": {
            **matmul_figure(CUDA_MATMUL_N, seconds, None if peak is None else peak.flops_per_s),
            "peak_source": None if peak is None else peak.source,
        },
    }


def _cuda_matmul_seconds(index: int) -> list[float]:
    import torch

    device = torch.device("cuda", index)
    a = torch.randn(CUDA_MATMUL_N, CUDA_MATMUL_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(CUDA_MATMUL_N, CUDA_MATMUL_N, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    for _ in range(3):  # warm: cuBLAS picks its kernel, the clocks ramp up
        torch.mm(a, b, out=out)
    torch.cuda.synchronize(device)
    seconds = []
    for _ in range(CUDA_REPEATS):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CUDA_MATMULS_PER_REPEAT):
            torch.mm(a, b, out=out)
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1000.0 / CUDA_MATMULS_PER_REPEAT)
    return seconds
