"""How the two sides of an A/B share one machine (gate.ab.layout), and which layout `auto` picks.

    interleaved   both sides' worker groups alive at once, taking turns step by step (measure/turns.py);
                  the pairing is tightest (neighbouring steps), but the device holds both sides' memory
    sequential    one side alive at a time: each round is one launch per side, the order alternating
                  A B | B A | A B ... (ab/runner.run_sequential_round); it fits wherever the bench fits

`auto` is interleaved, except on CUDA where two sides cannot share the GPU: two times the bench's peak
reserved memory at that world size (metrics-ws<N>.json `memory.cuda_max_reserved_bytes`, the largest
rank's) is more than the GPU's free memory (env.json `gpu.nvml`, or the device's total from torch where
NVML is absent), the peak is unknown, or the GPU is in an exclusive compute mode (a second process
cannot open it at all). torch's reserved bytes leave out each process's CUDA context and NCCL's
buffers, so each side is counted PROCESS_MARGIN more (an H100's context is about half a GiB; a GPU
check measures it, `make gpu-check`). Two sides that do not fit would fail with out-of-memory exactly
when an A/B is needed. On CPU, memory is the host's and
pinning needs both sides alive, so `auto` there is always interleaved.

Pure: the choice over plain numbers (`choose_layout`), and the reading of those numbers from the env and
metrics dicts the env and bench stages write (`peak_reserved_bytes`, `device_room`, `layout_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from benchgate.errors import BadInputError

LayoutName = Literal["interleaved", "sequential"]
LAYOUTS: tuple[LayoutName, ...] = ("interleaved", "sequential")
REQUESTS = ("auto", *LAYOUTS)
# What each layout does, for the A/B row's note.
DESCRIPTIONS: dict[str, str] = {
    "interleaved": "both sides alive, taking turns",
    "sequential": "one side at a time",
}
GIB = 2**30
# What a process holds on the GPU beyond torch's reserved bytes: its CUDA context (~0.5 GiB on an H100,
# cuBLAS workspaces included) and, above one rank, NCCL's buffers. Erring high only picks sequential.
PROCESS_MARGIN = 1 * GIB
# Why auto chose sequential where a figure it needs is missing (sequential fits wherever the bench does).
UNKNOWN_PEAK = "the bench's peak reserved memory is unknown"
UNKNOWN_FREE = "the GPU's free memory is unknown"


@dataclass(frozen=True)
class Layout:
    name: LayoutName
    why: str  # short, for the A/B row's note: "2 x 61.2 GiB peak reserved > 79.1 GiB free"

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "why": self.why}

    def note(self) -> str:
        return f"{self.name} layout: {DESCRIPTIONS[self.name]} ({self.why})"


@dataclass(frozen=True)
class DeviceRoom:
    """What the A/B's GPUs hold for it, from env.json: the least free memory over the GPUs the ranks use
    and whether any of them is in an exclusive compute mode."""

    free_bytes: int | None
    free_kind: str  # what free_bytes is, as the note words it: "free", or "total, free unknown: <why>"
    compute_mode: str | None


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def choose_layout(
    requested: str,
    device_type: str,
    peak_reserved_bytes: int | None,
    free_bytes: int | None,
    compute_mode: str | None,
    *,
    free_kind: str = "free",
) -> Layout:
    """The layout an A/B runs in. `requested`: gate.ab.layout; `device_type`: "cuda" or "cpu";
    `peak_reserved_bytes`: the bench's peak reserved memory per GPU at this world size (None: unknown);
    `free_bytes`: what the least free of the A/B's GPUs holds (None: unknown); `compute_mode`: NVML's
    mode of those GPUs ("default", "exclusive_process", ...; None: unknown); `free_kind`: what
    `free_bytes` is, for the note ("free", or the device's total where NVML is absent)."""
    if requested not in REQUESTS:
        raise BadInputError(f"gate.ab.layout: got {requested!r}; expected one of {', '.join(REQUESTS)}")
    if requested != "auto":
        return Layout(requested, f"gate.ab.layout = {requested}")  # type: ignore[arg-type]
    if device_type != "cuda":
        # The host's memory holds two small CPU groups, and pinning rank r of both sides to the same
        # cores (what cut the round-to-round spread here) needs them alive together.
        return Layout("interleaved", "auto on CPU")
    if compute_mode is not None and compute_mode.startswith("exclusive"):
        return Layout("sequential", f"GPU in {compute_mode.replace('_', '-')} compute mode")
    if peak_reserved_bytes is None:
        return Layout("sequential", UNKNOWN_PEAK)
    if free_bytes is None:
        return Layout("sequential", UNKNOWN_FREE)
    side = peak_reserved_bytes + PROCESS_MARGIN
    what = f"2 x ({gib(peak_reserved_bytes)} peak reserved + {gib(PROCESS_MARGIN)} per process)"
    if 2 * side > free_bytes:
        return Layout("sequential", f"{what} > {gib(free_bytes)} {free_kind}")
    return Layout("interleaved", f"{what} ≤ {gib(free_bytes)} {free_kind}")


def _byte_count(value: Any, field: str) -> int | None:
    """A byte count read from a result file: None where absent; an error naming the field otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != value:
        raise BadInputError(f"{field}: got {value!r}; expected a number of bytes (>= 0)")
    return int(value)


def peak_reserved_bytes(metrics: Mapping[str, Any] | None, world_size: int) -> int | None:
    """The most CUDA memory one rank of the bench reserved (metrics-ws<N>.json `memory`: the measured
    steps' `cuda_max_reserved_bytes`, or the warmup's `cuda_warmup_max_reserved_bytes` where larger,
    since interleaved sides warm up together too); None where there is no such file, or it is a CPU run's."""
    memory = (metrics or {}).get("memory") or {}
    peaks = [
        _byte_count(memory.get(key), f"metrics-ws{world_size}.json memory.{key}")
        for key in ("cuda_max_reserved_bytes", "cuda_warmup_max_reserved_bytes")
    ]
    known = [p for p in peaks if p is not None]
    return max(known) if peaks[0] is not None else None


def device_room(env: Mapping[str, Any] | None, world_size: int) -> DeviceRoom:
    """The free memory and compute mode of the GPUs an A/B at `world_size` uses (ranks 0..N-1 on CUDA
    devices 0..N-1), from env.json's `gpu` section.

    NVML (`gpu.nvml`, measure/device.identity) gives free memory and the compute mode. Where it is absent
    or unavailable, the device's total from torch (`gpu.devices[i].memory_bytes`) stands in, which is an
    upper bound on what is free: the note says so."""
    gpu = (env or {}).get("gpu") or {}
    nvml = gpu.get("nvml") or {}
    listed = list(nvml.get("gpus") or []) if nvml.get("available") else []
    if listed:
        used = _gpus_in_use(listed, gpu.get("devices") or [], world_size)
        free = [
            _byte_count(
                g.get("memory_free_bytes"), f"env.json gpu.nvml.gpus[{g.get('index')}].memory_free_bytes"
            )
            for g in used
        ]
        modes = [str(g["compute_mode"]) for g in used if g.get("compute_mode") is not None]
        exclusive = [m for m in modes if m.startswith("exclusive")]
        return DeviceRoom(
            None if None in free else min(f for f in free if f is not None),
            "free",
            exclusive[0] if exclusive else (modes[0] if modes else None),
        )
    devices = list(gpu.get("devices") or [])[:world_size]
    totals = [
        _byte_count(d.get("memory_bytes"), f"env.json gpu.devices[{i}].memory_bytes")
        for i, d in enumerate(devices)
    ]
    reason = nvml.get("why") or ("NVML unavailable" if nvml else "no NVML in env.json")
    if not totals or None in totals:
        return DeviceRoom(None, "free", None)
    return DeviceRoom(min(t for t in totals if t is not None), f"total, free unknown: {reason}", None)


def _gpus_in_use(
    listed: list[dict[str, Any]], devices: list[dict[str, Any]], world_size: int
) -> list[dict[str, Any]]:
    """NVML's entries for CUDA devices 0..N-1. NVML numbers every GPU of the node while CUDA numbers only
    the visible ones (CUDA_VISIBLE_DEVICES), so the entries are matched by UUID where torch's devices
    carry one, by position where both list the same number of GPUs; otherwise every listed GPU counts,
    which can only err towards sequential (the least free memory, any exclusive mode)."""
    by_uuid = {_uuid_key(g.get("uuid")): g for g in listed if g.get("uuid")}
    keys = [_uuid_key(d.get("uuid")) for d in devices[:world_size]]
    if keys and all(k in by_uuid for k in keys):
        return [by_uuid[k] for k in keys]
    if len(listed) == len(devices):
        return sorted(listed, key=lambda g: int(g.get("index", 0)))[:world_size]
    return listed


def _uuid_key(uuid: Any) -> str:
    # NVML writes "GPU-<uuid>", torch's device properties the bare UUID.
    return str(uuid or "").strip().lower().removeprefix("gpu-")


def layout_for(
    requested: str,
    device_type: str,
    world_size: int,
    env: Mapping[str, Any] | None,
    metrics: Mapping[str, Any] | None,
) -> Layout:
    """`choose_layout` over a run's env.json and metrics-ws<N>.json (either None where the file is not
    there); a reason for sequential that is a missing figure names where it was looked for."""
    if requested != "auto" or device_type != "cuda":
        return choose_layout(requested, device_type, None, None, None)
    peak = peak_reserved_bytes(metrics, world_size)
    room = device_room(env, world_size)
    layout = choose_layout(
        requested, device_type, peak, room.free_bytes, room.compute_mode, free_kind=room.free_kind
    )
    if layout.why == UNKNOWN_PEAK:
        where = "no metrics" if metrics is None else "its metrics hold no memory.cuda_max_reserved_bytes"
        return Layout(layout.name, f"peak reserved memory at ws={world_size} unknown: {where}")
    if layout.why == UNKNOWN_FREE:
        where = "no env.json" if env is None else "env.json has no gpu.nvml free or gpu.devices total"
        return Layout(layout.name, f"{UNKNOWN_FREE}: {where}")
    return layout
