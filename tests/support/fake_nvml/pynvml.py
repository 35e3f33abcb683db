"""A FAKE pynvml (nvidia-ml-py): the one stand-in for NVML in benchgate's tests, answering from a recording.

It answers the part of pynvml that benchgate calls (benchgate/measure/device.py, and the utilisation
that measure/sysmetrics.py reads) with the real names, constants, return types (ctypes structures with
the real fields; str, not bytes) and NVMLError subclasses, built as nvidia-ml-py 13 builds them (that
vocabulary is nvml_types.py, next to this file, re-exported here as the real module has it). Its
answers come from a JSON recording of one GPU (default tests/data/nvml-h200.json), in the format
benchmarks/record_nvml.py writes on a GPU machine: {"system": {call: answer}, "devices": [{call:
answer}]}, a call with an argument keyed by the argument's constant name ({"NVML_CLOCK_SM": 1980}), a
recorded error as {"nvml_error": "NVMLError_NotSupported"}.

Use: put this folder first on sys.path and PYTHONPATH (`fake_nvml.use_fake_nvml` does both), so that
`import pynvml` finds it in a test and in the torchrun workers it starts.

Test hooks. Across processes, environment variables, read at the first nvmlInit after reset():
    FAKE_NVML_DATA=path        the recording (default tests/data/nvml-h200.json)
    FAKE_NVML_NO_DRIVER=1      nvmlInit raises NVMLError_DriverNotLoaded (a host without the driver)
    FAKE_NVML_GPUS=N           N GPUs, copies of recorded GPU 0 with their own UUID, bus id and serial
    FAKE_NVML_POWER_W=W        the power draw is W, and the energy counters advance at W in real time
    FAKE_NVML_THROTTLE=power|thermal   that reason (SW power cap, SW thermal slowdown) is active and its
                               violation counter advances in real time: throttled all the time
    FAKE_NVML_UNSUPPORTED=nvmlDeviceGetTotalEnergyConsumption,...   these raise NVMLError_NotSupported
In-process, functions (index None: every GPU):
    reset()                               forget every hook and counter
    advance(seconds, power_w=None, index=None)   counters move as if `seconds` passed at `power_w` (the
                               recorded power draw by default); a throttled GPU's violation counter too
    throttle(kind="power"|"thermal", seconds=0.0, index=None)   the reason on, its counter + seconds
    unthrottle(index=None), no_driver(on=True), unsupported(*calls), set_gpu_count(n)
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import nvml_types
from nvml_types import *  # noqa: F403 - the real module's names: constants, NVMLError_*, structures
from nvml_types import (
    NVML_CLOCK_GRAPHICS,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_CLOCK_VIDEO,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_UNKNOWN,
    NVML_PERF_POLICY_POWER,
    NVML_PERF_POLICY_SYNC_BOOST,
    NVML_PERF_POLICY_THERMAL,
    NVML_TEMPERATURE_GPU,
    NVMLError,
    c_nvmlDevice_t,
    c_nvmlMemory_t,
    c_nvmlUtilization_t,
    c_nvmlViolationTime_t,
    nvmlClocksEventReasonSwPowerCap,
    nvmlClocksEventReasonSwThermalSlowdown,
    nvmlPciInfo_t,
)

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "data" / "nvml-h200.json"

# What a call's argument is keyed by in a recording: the constant's name.
_ARGUMENTS = {
    "clock": {NVML_CLOCK_GRAPHICS: "NVML_CLOCK_GRAPHICS", NVML_CLOCK_SM: "NVML_CLOCK_SM",
              NVML_CLOCK_MEM: "NVML_CLOCK_MEM", NVML_CLOCK_VIDEO: "NVML_CLOCK_VIDEO"},
    "sensor": {NVML_TEMPERATURE_GPU: "NVML_TEMPERATURE_GPU"},
    "policy": {NVML_PERF_POLICY_POWER: "NVML_PERF_POLICY_POWER",
               NVML_PERF_POLICY_THERMAL: "NVML_PERF_POLICY_THERMAL",
               NVML_PERF_POLICY_SYNC_BOOST: "NVML_PERF_POLICY_SYNC_BOOST"},
}  # fmt: skip

_STRUCTS = {
    "nvmlDeviceGetMemoryInfo": c_nvmlMemory_t,
    "nvmlDeviceGetPciInfo": nvmlPciInfo_t,
    "nvmlDeviceGetViolationStatus": c_nvmlViolationTime_t,
    "nvmlDeviceGetUtilizationRates": c_nvmlUtilization_t,
}


# ---- the fake's state: loaded at the first nvmlInit after reset(), hooks on top ----
_refcount = 0
_state: dict[str, Any] | None = None


def _load() -> dict[str, Any]:
    global _state
    if _state is None:
        path = Path(os.environ.get("FAKE_NVML_DATA") or DEFAULT_DATA)
        data = json.loads(path.read_text())
        realtime_throttle = os.environ.get("FAKE_NVML_THROTTLE", "")
        power = os.environ.get("FAKE_NVML_POWER_W")
        _state = {
            "path": path,
            "data": data,
            "no_driver": os.environ.get("FAKE_NVML_NO_DRIVER", "") not in ("", "0"),
            "unsupported": {c for c in os.environ.get("FAKE_NVML_UNSUPPORTED", "").split(",") if c},
            "realtime_w": None if power is None else float(power),
            "realtime_throttle": realtime_throttle or None,
            "t0": time.monotonic(),
        }
        _set_count(int(os.environ.get("FAKE_NVML_GPUS", "1")))
        if realtime_throttle:
            throttle(realtime_throttle)
    return _state


def _set_count(count: int) -> None:
    state = _state
    assert state is not None
    recorded = state["data"]["devices"][0]
    state["devices"] = [_copy_of(recorded, i) for i in range(count)]


def _copy_of(recorded: dict[str, Any], i: int) -> dict[str, Any]:
    """GPU i: the recorded GPU 0 with its own UUID, serial and bus; counters and hooks at zero."""
    answers = copy.deepcopy(recorded)
    if i:
        uuid = answers["nvmlDeviceGetUUID"]
        answers["nvmlDeviceGetUUID"] = f"{uuid[:-4]}{(int(uuid[-4:], 16) + i) % 0x10000:04x}"
        serial = answers.get("nvmlDeviceGetSerial")
        if isinstance(serial, str) and serial.isdigit():
            answers["nvmlDeviceGetSerial"] = str(int(serial) + i).zfill(len(serial))
        pci = answers.get("nvmlDeviceGetPciInfo")
        if isinstance(pci, dict) and "busId" in pci:
            pci["bus"] = (pci["bus"] + i) % 256
            pci["busId"] = f"{pci['busId'][:-7]}{pci['bus']:02x}{pci['busId'][-5:]}".upper()
            pci["busIdLegacy"] = pci["busId"][4:]
    return {"answers": answers, "energy_mj": 0.0, "violation_ns": {0: 0.0, 1: 0.0}, "reasons": 0}


def _devices(index: int | None) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = _load()["devices"]
    return devices if index is None else [devices[index]]


def reset() -> None:
    global _state, _refcount
    _state, _refcount = None, 0


def no_driver(on: bool = True) -> None:
    _load()["no_driver"] = on


def unsupported(*calls: str) -> None:
    _load()["unsupported"].update(calls)


def set_gpu_count(n: int) -> None:
    _load()
    _set_count(n)


# Read at import: a test may delete the newer names from this module to play an older nvidia-ml-py.
_IDLE = nvml_types.nvmlClocksEventReasonGpuIdle
# The reason each hook turns on, by the violation counter it advances.
_POLICY_REASONS = {
    NVML_PERF_POLICY_POWER: nvmlClocksEventReasonSwPowerCap,
    NVML_PERF_POLICY_THERMAL: nvmlClocksEventReasonSwThermalSlowdown,
}


def advance(seconds: float, power_w: float | None = None, index: int | None = None) -> None:
    for device in _devices(index):
        watts = power_w if power_w is not None else device["answers"]["nvmlDeviceGetPowerUsage"] / 1e3
        device["energy_mj"] += watts * seconds * 1e3
        for policy, bit in _POLICY_REASONS.items():
            if device["reasons"] & bit:
                device["violation_ns"][policy] += seconds * 1e9


def throttle(kind: str = "power", seconds: float = 0.0, index: int | None = None) -> None:
    policy = {"power": NVML_PERF_POLICY_POWER, "thermal": NVML_PERF_POLICY_THERMAL}[kind]
    bit = _POLICY_REASONS[policy]
    for device in _devices(index):
        device["reasons"] |= bit
        device["violation_ns"][policy] += seconds * 1e9


def unthrottle(index: int | None = None) -> None:
    for device in _devices(index):
        device["reasons"] = 0


# ---- the API ----
def _ready() -> dict[str, Any]:
    if _refcount == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _load()


def _answer(where: dict[str, Any], call: str, argument: str | None = None) -> Any:
    state = _ready()
    if call in state["unsupported"]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    try:
        value = where[call] if argument is None else where[call][argument]
    except KeyError:
        raise LookupError(
            f"fake NVML: the recording {state['path']} has no answer to {call}({argument or ''})"
        ) from None
    if isinstance(value, dict) and "nvml_error" in value:
        raise getattr(nvml_types, value["nvml_error"], NVMLError)(NVML_ERROR_UNKNOWN)
    return value


def _device(handle: c_nvmlDevice_t) -> dict[str, Any]:
    return _devices(handle.index)[0]


def _argument(kind: str, value: int) -> str:
    if value not in _ARGUMENTS[kind]:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _ARGUMENTS[kind][value]


def _struct(call: str, fields: dict[str, Any]) -> Any:
    return _STRUCTS[call](**{k: v.encode() if isinstance(v, str) else v for k, v in fields.items()})


def _realtime_s() -> float:
    return time.monotonic() - _load()["t0"]


def nvmlInitWithFlags(flags: int) -> None:
    global _refcount
    if _load()["no_driver"]:
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    _refcount += 1


def nvmlInit() -> None:
    nvmlInitWithFlags(0)


def nvmlShutdown() -> None:
    global _refcount
    _ready()
    _refcount -= 1


def nvmlSystemGetDriverVersion() -> str:
    return str(_answer(_ready()["data"]["system"], "nvmlSystemGetDriverVersion"))


def nvmlSystemGetNVMLVersion() -> str:
    return str(_answer(_ready()["data"]["system"], "nvmlSystemGetNVMLVersion"))


def nvmlDeviceGetCount() -> int:
    return len(_ready()["devices"])


def nvmlDeviceGetHandleByIndex(index: int) -> c_nvmlDevice_t:
    if not 0 <= index < len(_ready()["devices"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return c_nvmlDevice_t(index)


def _simple(call: str) -> Any:
    def answer(handle: c_nvmlDevice_t) -> Any:
        value = _answer(_device(handle)["answers"], call)
        return _struct(call, value) if call in _STRUCTS else value

    answer.__name__ = call
    return answer


nvmlDeviceGetUUID = _simple("nvmlDeviceGetUUID")
nvmlDeviceGetName = _simple("nvmlDeviceGetName")
nvmlDeviceGetSerial = _simple("nvmlDeviceGetSerial")
nvmlDeviceGetVbiosVersion = _simple("nvmlDeviceGetVbiosVersion")
nvmlDeviceGetPciInfo = _simple("nvmlDeviceGetPciInfo")
nvmlDeviceGetEccMode = _simple("nvmlDeviceGetEccMode")
nvmlDeviceGetComputeMode = _simple("nvmlDeviceGetComputeMode")
nvmlDeviceGetPersistenceMode = _simple("nvmlDeviceGetPersistenceMode")
nvmlDeviceGetPowerManagementLimit = _simple("nvmlDeviceGetPowerManagementLimit")
nvmlDeviceGetPowerManagementDefaultLimit = _simple("nvmlDeviceGetPowerManagementDefaultLimit")
nvmlDeviceGetUtilizationRates = _simple("nvmlDeviceGetUtilizationRates")


def nvmlDeviceGetMemoryInfo(handle: c_nvmlDevice_t, version: int | None = None) -> c_nvmlMemory_t:
    if version:
        raise NotImplementedError("fake NVML: nvmlDeviceGetMemoryInfo's v2 (version=...) is not recorded")
    return _simple("nvmlDeviceGetMemoryInfo")(handle)


def nvmlDeviceGetMigMode(device: c_nvmlDevice_t) -> list[int]:
    return list(_answer(_device(device)["answers"], "nvmlDeviceGetMigMode"))


def nvmlDeviceGetMaxClockInfo(handle: c_nvmlDevice_t, type: int) -> int:
    return int(_answer(_device(handle)["answers"], "nvmlDeviceGetMaxClockInfo", _argument("clock", type)))


def nvmlDeviceGetApplicationsClock(handle: c_nvmlDevice_t, type: int) -> int:
    clock = _argument("clock", type)
    return int(_answer(_device(handle)["answers"], "nvmlDeviceGetApplicationsClock", clock))


def nvmlDeviceGetClockInfo(handle: c_nvmlDevice_t, type: int) -> int:
    return int(_answer(_device(handle)["answers"], "nvmlDeviceGetClockInfo", _argument("clock", type)))


def nvmlDeviceGetTemperature(handle: c_nvmlDevice_t, sensor: int) -> int:
    return int(_answer(_device(handle)["answers"], "nvmlDeviceGetTemperature", _argument("sensor", sensor)))


def nvmlDeviceGetPowerUsage(handle: c_nvmlDevice_t) -> int:
    recorded = int(_answer(_device(handle)["answers"], "nvmlDeviceGetPowerUsage"))
    watts = _load()["realtime_w"]
    return recorded if watts is None else round(watts * 1e3)


def nvmlDeviceGetTotalEnergyConsumption(handle: c_nvmlDevice_t) -> int:
    device = _device(handle)
    recorded = int(_answer(device["answers"], "nvmlDeviceGetTotalEnergyConsumption"))
    watts = _load()["realtime_w"] or 0.0
    return recorded + round(device["energy_mj"] + watts * _realtime_s() * 1e3)


def nvmlDeviceGetViolationStatus(device: c_nvmlDevice_t, perfPolicyType: int) -> c_nvmlViolationTime_t:
    state, gpu = _load(), _device(device)
    recorded = _answer(gpu["answers"], "nvmlDeviceGetViolationStatus", _argument("policy", perfPolicyType))
    extra = gpu["violation_ns"].get(perfPolicyType, 0.0)
    if state["realtime_throttle"] == {0: "power", 1: "thermal"}.get(perfPolicyType):
        extra += _realtime_s() * 1e9
    fields = {**recorded, "violationTime": recorded["violationTime"] + round(extra)}
    return _struct("nvmlDeviceGetViolationStatus", fields)


def nvmlDeviceGetCurrentClocksEventReasons(handle: c_nvmlDevice_t) -> int:
    device = _device(handle)
    recorded = int(_answer(device["answers"], "nvmlDeviceGetCurrentClocksEventReasons"))
    if device["reasons"]:  # a throttled GPU is busy: not idle
        recorded &= ~_IDLE
    return recorded | device["reasons"]


# The same NVML call under its pre-12.535 name (deprecated, still in nvidia-ml-py 13).
nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons
