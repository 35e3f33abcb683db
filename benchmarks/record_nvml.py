"""Record one GPU's NVML answers for the fake NVML of the tests.

benchgate's tests run against tests/support/fake_nvml/pynvml.py, which answers each pynvml call that
benchgate makes from a JSON recording. Run this on a GPU machine and the fake answers as that GPU did:
every call the fake answers is made here once, for GPU `--index`, and written down with its answer (or
the NVMLError it raised, as {"nvml_error": "NVMLError_NotSupported"}), `"recorded": true`, the driver
and the date. A call with an argument is keyed by the argument's constant name. Needs only python3
and nvidia-ml-py (no benchgate, no pydantic), so it runs on a bare GPU image:

    python3 benchmarks/record_nvml.py [--index 0] [--out tests/data/nvml-h200.json]

Another GPU model belongs in its own file (`--out tests/data/nvml-<model>.json`); the fake reads the one
named by FAKE_NVML_DATA. The tests run it against the fake itself: a recording of the fake reproduces
the recording the fake read.
"""

from __future__ import annotations

import argparse
import datetime
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import pynvml

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "nvml-h200.json"
SYSTEM_CALLS = ("nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion")
# Every per-GPU call the fake answers, with the constants it is called with (none: called on the handle).
DEVICE_CALLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nvmlDeviceGetUUID", ()),
    ("nvmlDeviceGetName", ()),
    ("nvmlDeviceGetSerial", ()),
    ("nvmlDeviceGetVbiosVersion", ()),
    ("nvmlDeviceGetPciInfo", ()),
    ("nvmlDeviceGetMemoryInfo", ()),
    ("nvmlDeviceGetMigMode", ()),
    ("nvmlDeviceGetEccMode", ()),
    ("nvmlDeviceGetComputeMode", ()),
    ("nvmlDeviceGetPersistenceMode", ()),
    ("nvmlDeviceGetPowerManagementLimit", ()),
    ("nvmlDeviceGetPowerManagementDefaultLimit", ()),
    ("nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM", "NVML_CLOCK_MEM")),
    ("nvmlDeviceGetApplicationsClock", ("NVML_CLOCK_SM",)),
    ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM", "NVML_CLOCK_MEM")),
    ("nvmlDeviceGetPowerUsage", ()),
    ("nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)),
    ("nvmlDeviceGetUtilizationRates", ()),
    ("nvmlDeviceGetCurrentClocksEventReasons", ()),
    ("nvmlDeviceGetTotalEnergyConsumption", ()),
    ("nvmlDeviceGetViolationStatus", ("NVML_PERF_POLICY_POWER", "NVML_PERF_POLICY_THERMAL")),
)
# nvidia-ml-py before 12.535 has the reasons call under its older name only.
OLDER_NAMES = {"nvmlDeviceGetCurrentClocksEventReasons": "nvmlDeviceGetCurrentClocksThrottleReasons"}


def plain(value: Any) -> Any:
    """An answer as JSON: a ctypes structure as its fields, bytes (older nvidia-ml-py) as str."""
    if hasattr(value, "_fields_"):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def answer(call: str, *args: Any) -> Any:
    function = getattr(pynvml, call, None) or getattr(pynvml, OLDER_NAMES.get(call, ""), None)
    if function is None:
        return {"nvml_error": "NVMLError_FunctionNotFound"}  # as the driver says of a call it lacks
    try:
        return plain(function(*args))
    except pynvml.NVMLError as e:
        return {"nvml_error": type(e).__name__}


def record(index: int) -> dict[str, Any]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise SystemExit(f"NVML could not start: {e} (run this on a machine with an NVIDIA driver)") from None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if not 0 <= index < count:
            raise SystemExit(f"--index: got {index}, but NVML sees {count} GPU(s)")
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        device: dict[str, Any] = {}
        for call, constants in DEVICE_CALLS:
            if constants:
                device[call] = {c: answer(call, handle, getattr(pynvml, c)) for c in constants}
            else:
                device[call] = answer(call, handle)
        system: dict[str, Any] = {call: answer(call) for call in SYSTEM_CALLS}
    finally:
        pynvml.nvmlShutdown()
    try:
        version: str | None = metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        version = None
    return {
        "format": "benchgate-nvml-recording/1",
        "recorded": True,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "driver": system["nvmlSystemGetDriverVersion"],
        "nvidia_ml_py": version,
        "gpus_on_machine": count,
        "note": f"Recorded by benchmarks/record_nvml.py from NVML, GPU {index} of {count}.",
        "source": {"*": f"recorded from NVML: GPU {index}"},
        "system": {**system, "nvmlDeviceGetCount": 1},  # the fake's GPUs are copies of the one recorded
        "devices": [device],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=int, default=0, help="NVML index of the GPU to record")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON file to write")
    args = parser.parse_args()
    recording = record(args.index)
    args.out.write_text(json.dumps(recording, indent=2) + "\n")
    device = recording["devices"][0]
    name, uuid = device["nvmlDeviceGetName"], device["nvmlDeviceGetUUID"]
    print(f"{args.out}: {name} ({uuid}), driver {recording['driver']}")


if __name__ == "__main__":
    main()
