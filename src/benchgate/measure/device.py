"""Device state from NVML, as data: which physical GPU measured, at what clocks and power, and whether it
was throttled while it did.

Step times alone hide both: a GPU held at its power cap or slowed by heat runs the same code slower,
and a different card of the same model (another VBIOS, a lower power limit, ECC off) measures a
different machine. This module reads NVML for them; it is the only importer of pynvml (nvidia-ml-py,
the `gpu` extra), and imports it inside functions, so that CPU hosts and the light tasks never need it.

What needs no NVML is pure and tested on its own in `device_state` (the throttle classification, the
window summary, the block rank 0 writes into a metrics file). The NVML calls here are kept thin:
`identity`, `current_state`, `nvml_index_for_uuid`, `WindowRecorder` and the sampler's `gpu_probe`.
NVML speaks milliwatts, millijoules and nanoseconds; everything here is W, J and s. A figure a board
does not report is None, never an exception.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchgate.errors import RunFailedError
from benchgate.measure.device_state import reason_names, summarize_window

INSTALL_HINT = "nvidia-ml-py is not installed (pip install 'benchgate[gpu]')"
# Newer nvidia-ml-py (12.535 on) names the reason bits nvmlClocksEventReason*, older ones
# nvmlClocksThrottleReason* (kept, deprecated, in 13.x with two more bits): both are read, newer first.
_REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
_NOT_REASONS = {"None", "All", "UserDefinedClocks"}  # no bit, every bit, an alias of an applications clock


Probe = Callable[[], dict[str, float]]


class NvmlUnavailable(RunFailedError):
    """NVML cannot be used here; the message says why (no nvidia-ml-py, or no driver)."""


@contextlib.contextmanager
def _session() -> Iterator[Any]:
    """pynvml, initialised for the block. NVML counts its inits, so nested sessions are cheap."""
    try:
        import pynvml
    except ImportError as e:
        raise NvmlUnavailable(INSTALL_HINT) from e
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise NvmlUnavailable(f"NVML could not start: {e}") from e
    try:
        yield pynvml
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _optional(nvml: Any, names: str | tuple[str, ...], *args: Any) -> Any:
    """The first of `names` this nvidia-ml-py has, called; None where the board or driver cannot say
    (NotSupported, or a driver older than the call)."""
    for name in (names,) if isinstance(names, str) else names:
        call = getattr(nvml, name, None)
        if call is not None:
            try:
                return call(*args)
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
                return None
    return None


def _text(value: Any) -> str | None:
    # nvidia-ml-py before 11.5 returned bytes
    return value.decode() if isinstance(value, bytes) else value


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1e3


def _mode(current_pending: Any) -> str | None:
    """MIG, ECC and persistence modes: NVML's current mode (of [current, pending] where it has both)."""
    if current_pending is None:
        return None
    current = current_pending[0] if isinstance(current_pending, list | tuple) else current_pending
    return "enabled" if current else "disabled"


def _compute_mode(nvml: Any, value: int | None) -> str | None:
    names = {
        getattr(nvml, c): c.removeprefix("NVML_COMPUTEMODE_").lower()
        for c in dir(nvml)
        if c.startswith("NVML_COMPUTEMODE_") and c != "NVML_COMPUTEMODE_COUNT"
    }
    return None if value is None else names.get(value, f"unknown ({value})")


def _reason_table(nvml: Any) -> dict[int, str]:
    """Reason bit -> snake_case name, from this nvidia-ml-py's constants (both spellings)."""
    table: dict[int, str] = {}
    for prefix in _REASON_PREFIXES:
        for constant in sorted(c for c in dir(nvml) if c.startswith(prefix)):
            suffix, bit = constant.removeprefix(prefix), getattr(nvml, constant)
            if suffix not in _NOT_REASONS and bit > 0 and bit & (bit - 1) == 0:
                table.setdefault(bit, re.sub(r"(?<!^)(?=[A-Z])", "_", suffix).lower())
    return table


def _handle(nvml: Any, index: int) -> Any:
    count = nvml.nvmlDeviceGetCount()
    if not 0 <= index < count:
        raise ValueError(f"NVML device index: got {index!r}, but NVML sees {count} GPU(s)")
    return nvml.nvmlDeviceGetHandleByIndex(index)


def _gpu_identity(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = _optional(nvml, "nvmlDeviceGetMemoryInfo", handle)
    pci = _optional(nvml, "nvmlDeviceGetPciInfo", handle)
    return {
        "index": index,
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "name": _text(_optional(nvml, "nvmlDeviceGetName", handle)),
        "serial": _text(_optional(nvml, "nvmlDeviceGetSerial", handle)),
        "pci_bus_id": None if pci is None else _text(pci.busId),
        "memory_total_bytes": None if memory is None else int(memory.total),
        "memory_free_bytes": None if memory is None else int(memory.free),
        "mig_mode": _mode(_optional(nvml, "nvmlDeviceGetMigMode", handle)),
        "ecc_mode": _mode(_optional(nvml, "nvmlDeviceGetEccMode", handle)),
        "compute_mode": _compute_mode(nvml, _optional(nvml, "nvmlDeviceGetComputeMode", handle)),
        "persistence_mode": _mode(_optional(nvml, "nvmlDeviceGetPersistenceMode", handle)),
        "power_limit_w": _watts(_optional(nvml, "nvmlDeviceGetPowerManagementLimit", handle)),
        "default_power_limit_w": _watts(_optional(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)),
        "max_sm_clock_mhz": _optional(nvml, "nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_SM),
        "max_mem_clock_mhz": _optional(nvml, "nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_MEM),
        "application_sm_clock_mhz": _optional(
            nvml, "nvmlDeviceGetApplicationsClock", handle, nvml.NVML_CLOCK_SM
        ),
        "vbios": _text(_optional(nvml, "nvmlDeviceGetVbiosVersion", handle)),
    }


def identity() -> dict[str, Any]:
    """The driver and every GPU NVML sees, by NVML index (not CUDA's: see `nvml_index_for_uuid`). Never
    raises: without nvidia-ml-py or a driver, `available` is False and `why` says which."""
    try:
        with _session() as nvml:
            try:
                return {
                    "available": True,
                    "why": None,
                    "driver": _text(_optional(nvml, "nvmlSystemGetDriverVersion")),
                    "nvml_version": _text(_optional(nvml, "nvmlSystemGetNVMLVersion")),
                    "gpus": [_gpu_identity(nvml, i) for i in range(nvml.nvmlDeviceGetCount())],
                }
            except nvml.NVMLError as e:
                why = f"NVML failed while reading the GPUs: {e}"
    except NvmlUnavailable as e:
        why = str(e)
    return {"available": False, "why": why, "driver": None, "nvml_version": None, "gpus": []}


def _read_state(nvml: Any, handle: Any, table: dict[int, str]) -> dict[str, Any]:
    reasons = _optional(
        nvml, ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), handle
    )
    return {
        "sm_clock_mhz": _optional(nvml, "nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM),
        "mem_clock_mhz": _optional(nvml, "nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_MEM),
        "power_w": _watts(_optional(nvml, "nvmlDeviceGetPowerUsage", handle)),
        "temperature_c": _optional(nvml, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
        "throttle_reasons": None if reasons is None else reason_names(int(reasons), table),
    }


def current_state(index: int) -> dict[str, Any]:
    """NVML device `index` now: clocks, power, temperature and the active clock event reasons (None
    where the board does not report them). Raises NvmlUnavailable without NVML."""
    with _session() as nvml:
        return _read_state(nvml, _handle(nvml, index), _reason_table(nvml))


def _uuid_key(uuid: str | None) -> str:
    return str(uuid or "").strip().lower().removeprefix("gpu-")


def nvml_index_for_uuid(uuid: str) -> int | None:
    """The NVML index of the GPU with this UUID (`GPU-…` or without the prefix, as torch's
    `get_device_properties(i).uuid` prints it); None without NVML or where no GPU has it (a MIG
    instance's `MIG-…`). CUDA_VISIBLE_DEVICES renumbers CUDA devices, never NVML's: match, never assume."""
    wanted = _uuid_key(uuid)
    if not wanted:
        raise ValueError(f"uuid: got {uuid!r} (expected a GPU UUID such as GPU-9221d5d1-b60b-...)")
    try:
        with _session() as nvml:
            for i in range(nvml.nvmlDeviceGetCount()):
                if _uuid_key(_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))) == wanted:
                    return i
    except NvmlUnavailable:
        return None
    return None


def _counters(nvml: Any, handle: Any) -> dict[str, int | None]:
    """The cumulative counters a window is the growth of: energy since the driver loaded (mJ) and the
    time clocks were held down by the power cap and by heat (ns)."""

    def violation(policy: int) -> int | None:
        status = _optional(nvml, "nvmlDeviceGetViolationStatus", handle, policy)
        return None if status is None else int(status.violationTime)

    return {
        "energy_mj": _optional(nvml, "nvmlDeviceGetTotalEnergyConsumption", handle),
        "power_ns": violation(nvml.NVML_PERF_POLICY_POWER),
        "thermal_ns": violation(nvml.NVML_PERF_POLICY_THERMAL),
    }


def _growth(start: int | None, end: int | None, scale: float) -> float | None:
    # A counter that went back was reset (the driver reloaded): its growth is unknown, not negative.
    return None if start is None or end is None or end < start else (end - start) * scale


class WindowRecorder:
    """One window of NVML device `index`: `start()` before the measured steps, `stop()` after them.

    The cumulative counters are read at both ends (exact over the window, however short); clocks,
    power, temperature and reasons are sampled every `interval_s` by a daemon thread, and once at each
    end, so even a window shorter than the interval has two samples. NVML stays initialised from start
    to stop. `start()` raises NvmlUnavailable where NVML cannot be used (the rank's window is then None).
    """

    def __init__(self, index: int, interval_s: float = 0.1) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s: got {interval_s!r} (expected seconds > 0)")
        self.index = index
        self.interval_s = interval_s
        self._stack: contextlib.ExitStack | None = None
        self._samples: list[dict[str, Any]] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._stack is not None:
            raise RuntimeError(f"WindowRecorder(index={self.index}): start() called twice without stop()")
        with contextlib.ExitStack() as stack:
            self._nvml = stack.enter_context(_session())
            self._handle = _handle(self._nvml, self.index)
            self._uuid = _text(self._nvml.nvmlDeviceGetUUID(self._handle))
            self._table = _reason_table(self._nvml)
            self._samples = [_read_state(self._nvml, self._handle, self._table)]
            self._start = _counters(self._nvml, self._handle)
            self._stack = stack.pop_all()  # NVML stays initialised until stop()
        self._t0 = time.perf_counter()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._sample, name="benchgate-nvml-window", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                self._samples.append(_read_state(self._nvml, self._handle, self._table))
            except self._nvml.NVMLError:
                continue  # a failed reading is a missing sample; a thread must not die of it

    def stop(self) -> dict[str, Any]:
        if self._stack is None or self._thread is None:
            raise RuntimeError(f"WindowRecorder(index={self.index}): stop() without start()")
        self._stopping.set()
        self._thread.join()
        try:
            end = _counters(self._nvml, self._handle)
            seconds = time.perf_counter() - self._t0  # the span the counters grew over, to microseconds
            self._samples.append(_read_state(self._nvml, self._handle, self._table))
        finally:
            self._stack.close()
            self._stack, self._thread = None, None
        return summarize_window(
            seconds,
            self._samples,
            energy_j=_growth(self._start["energy_mj"], end["energy_mj"], 1e-3),
            power_violation_s=_growth(self._start["power_ns"], end["power_ns"], 1e-9),
            thermal_violation_s=_growth(self._start["thermal_ns"], end["thermal_ns"], 1e-9),
            nvml_index=self.index,
            uuid=self._uuid,
        )


def gpu_probe() -> Probe | None:
    """The system-metrics sampler's readings of every GPU NVML sees (utilisation, memory used, power),
    under MLflow's system-metric names; None without nvidia-ml-py, a driver or a GPU. NVML stays
    initialised for the sampler's life: one reading is tens of microseconds."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError:
        return None
    if not handles:
        return None

    def probe() -> dict[str, float]:
        values: dict[str, float] = {}
        for i, handle in enumerate(handles):
            utilization = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            values[f"gpu_{i}_utilization_percentage"] = float(utilization)
            values[f"gpu_{i}_memory_usage_megabytes"] = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
            power = _optional(pynvml, "nvmlDeviceGetPowerUsage", handle)  # not every board reports power
            if power is not None:
                values[f"gpu_{i}_power_usage_watts"] = power / 1e3
        return values

    return probe
