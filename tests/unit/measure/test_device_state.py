"""Device state from NVML (measure/device.py) against the fake NVML (tests/support/fake_nvml), which
answers from a recording of an NVIDIA H200 (the GPU check's machine, 2026-11-28); and
benchmarks/record_nvml.py, which writes such recordings."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fake_nvml import use_fake_nvml

from benchgate.measure import device
from benchgate.measure.device import (
    INSTALL_HINT,
    NvmlUnavailable,
    WindowRecorder,
    current_state,
    identity,
    nvml_index_for_uuid,
)
from benchgate.measure.device_state import device_state_block, reason_names

REPO = Path(__file__).resolve().parents[3]
RECORDING = REPO / "tests" / "data" / "nvml-h200.json"
UUID = "GPU-4a170c9a-0f4f-c4f1-a51d-5c938aeb3497"
# Long enough that the sampling thread never runs within a test: the samples are the two at the ends.
NO_THREAD_SAMPLES = 60.0


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return use_fake_nvml(monkeypatch)


def window(recorder: WindowRecorder, during: Any = None, sleep_s: float = 0.0) -> dict[str, Any]:
    recorder.start()
    if during is not None:
        during()
    time.sleep(sleep_s)
    return recorder.stop()


def test_identity_reads_the_recorded_h200(nvml: ModuleType) -> None:
    found = identity()
    assert found["available"] is True and found["why"] is None
    assert found["driver"] == "580.159.04" and found["nvml_version"] == "13.580.159.04"
    # What identity() returned on the H200 itself (benchmarks/gpu_check.py S0, docs/benchmarks.md "GPU").
    assert found["gpus"] == [
        {
            "index": 0,
            "uuid": UUID,
            "name": "NVIDIA H200",
            "serial": "1654124006944",
            "pci_bus_id": "00000000:00:06.0",
            "memory_total_bytes": 150754820096,
            "memory_free_bytes": 150106472448,
            "mig_mode": "disabled",
            "ecc_mode": "enabled",
            "compute_mode": "default",
            "persistence_mode": "enabled",
            "power_limit_w": 700.0,
            "default_power_limit_w": 700.0,
            "max_sm_clock_mhz": 1980,
            "max_mem_clock_mhz": 3201,
            "application_sm_clock_mhz": 1980,
            "vbios": "96.00.A5.00.1A",
        }
    ]
    assert nvml._refcount == 0  # every session shut NVML down again


def test_a_field_the_board_does_not_support_is_none(nvml: ModuleType) -> None:
    nvml.unsupported("nvmlDeviceGetMigMode", "nvmlDeviceGetSerial", "nvmlDeviceGetApplicationsClock")
    gpu = identity()["gpus"][0]
    assert gpu["mig_mode"] is None and gpu["serial"] is None and gpu["application_sm_clock_mhz"] is None
    assert gpu["ecc_mode"] == "enabled"


def test_exclusive_process_compute_mode_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = json.loads(RECORDING.read_text())
    data["devices"][0]["nvmlDeviceGetComputeMode"] = 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    (tmp_path / "nvml.json").write_text(json.dumps(data))
    use_fake_nvml(monkeypatch, FAKE_NVML_DATA=str(tmp_path / "nvml.json"))
    assert identity()["gpus"][0]["compute_mode"] == "exclusive_process"


def test_without_nvidia_ml_py_nothing_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError, as uninstalled
    assert identity() == {
        "available": False,
        "why": INSTALL_HINT,
        "driver": None,
        "nvml_version": None,
        "gpus": [],
    }
    assert nvml_index_for_uuid(UUID) is None
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py is not installed"):
        WindowRecorder(0).start()


def test_without_a_driver_nothing_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvml(monkeypatch, FAKE_NVML_NO_DRIVER="1")
    found = identity()
    assert found["available"] is False
    assert found["why"] == "NVML could not start: Driver Not Loaded"
    assert nvml_index_for_uuid(UUID) is None
    with pytest.raises(NvmlUnavailable, match="NVML could not start: Driver Not Loaded"):
        current_state(0)


def test_current_state_of_an_idle_gpu(nvml: ModuleType) -> None:
    assert current_state(0) == {
        "sm_clock_mhz": 345,
        "mem_clock_mhz": 3201,
        "power_w": 80.518,
        "temperature_c": 40,
        "throttle_reasons": ["gpu_idle"],
    }
    with pytest.raises(ValueError, match=r"NVML device index: got 1, but NVML sees 1 GPU\(s\)"):
        current_state(1)


def test_a_window_without_throttling(nvml: ModuleType) -> None:
    measured = window(WindowRecorder(0, NO_THREAD_SAMPLES), lambda: nvml.advance(10.0, power_w=400.0))
    assert measured["energy_j"] == pytest.approx(4000.0)
    assert measured["throttled"] is False and measured["throttled_by"] == []
    assert measured["throttle_reasons"] == ["gpu_idle"]  # idle is a reason, not throttling
    assert measured["power_violation_s"] == 0.0 and measured["thermal_violation_s"] == 0.0
    assert measured["samples"] == 2
    assert measured["sm_clock_mhz"] == {"min": 345.0, "mean": 345.0, "max": 345.0}
    assert measured["power_w"] == {"mean": 80.518, "max": 80.518}
    assert measured["temperature_c"] == {"max": 40.0}
    assert measured["uuid"] == UUID and measured["nvml_index"] == 0
    assert nvml._refcount == 0


def test_a_window_throttled_by_the_power_cap(nvml: ModuleType) -> None:
    measured = window(WindowRecorder(0, NO_THREAD_SAMPLES), lambda: nvml.throttle("power", seconds=0.5))
    assert measured["throttled"] is True and measured["throttled_by"] == ["power cap"]
    assert measured["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]  # idle at the start only
    assert measured["power_violation_s"] == pytest.approx(0.5)


def test_the_violation_counter_alone_marks_a_throttled_window(nvml: ModuleType) -> None:
    # Throttled between two samples: no sample saw the reason, the counter did.
    def between() -> None:
        nvml.throttle("thermal", seconds=0.2)
        nvml.unthrottle()

    measured = window(WindowRecorder(0, NO_THREAD_SAMPLES), between)
    assert measured["throttle_reasons"] == ["gpu_idle"]
    assert measured["throttled_by"] == ["thermal"]


def test_violation_under_one_percent_of_the_window_is_not_throttling(nvml: ModuleType) -> None:
    def between() -> None:
        nvml.throttle("power", seconds=0.001)
        nvml.unthrottle()

    measured = window(WindowRecorder(0, NO_THREAD_SAMPLES), between, sleep_s=0.2)
    assert measured["power_violation_s"] == pytest.approx(0.001)
    assert measured["throttled"] is False


def test_the_thread_samples_and_the_real_time_hooks_advance(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a torchrun worker sees: hooks by environment, counters moving with the clock.
    use_fake_nvml(monkeypatch, FAKE_NVML_POWER_W="350", FAKE_NVML_THROTTLE="thermal")
    measured = window(WindowRecorder(0, interval_s=0.02), sleep_s=0.3)
    assert measured["samples"] > 3
    assert measured["power_w"] == {"mean": 350.0, "max": 350.0}
    assert measured["energy_j"] == pytest.approx(350 * measured["seconds"], rel=0.02)
    assert measured["throttled_by"] == ["thermal"] and "sw_thermal_slowdown" in measured["throttle_reasons"]


def test_a_board_without_an_energy_counter(nvml: ModuleType) -> None:
    nvml.unsupported("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetViolationStatus")
    measured = window(WindowRecorder(0, NO_THREAD_SAMPLES), lambda: nvml.advance(1.0))
    assert measured["energy_j"] is None and measured["power_violation_s"] is None
    block = device_state_block([measured], tokens=1000)
    assert block["available"] is True and block["energy_j"] is None and block["energy_j_per_token"] is None


def test_energy_per_token_sums_every_rank(nvml: ModuleType) -> None:
    nvml.set_gpu_count(2)
    recorders = [WindowRecorder(i, NO_THREAD_SAMPLES) for i in (0, 1)]
    for recorder in recorders:
        recorder.start()
    nvml.advance(10.0, power_w=300.0, index=0)
    nvml.advance(10.0, power_w=500.0, index=1)
    nvml.throttle("power", index=1)
    block = device_state_block([r.stop() for r in recorders], tokens=1_000_000)
    assert block["available"] is True and block["why"] is None
    assert block["energy_j"] == pytest.approx(8000.0)
    assert block["energy_j_per_token"] == pytest.approx(0.008)
    assert (block["windows_measured"], block["throttled_windows"]) == (2, 1)
    assert block["throttled_by"] == ["power cap"]
    assert [w["nvml_index"] for w in block["windows"]] == [0, 1]


def test_ranks_sharing_one_gpu_count_its_energy_once(nvml: ModuleType) -> None:
    recorders = [WindowRecorder(0, NO_THREAD_SAMPLES) for _ in range(2)]
    for recorder in recorders:
        recorder.start()
    nvml.advance(1.0, power_w=700.0)
    block = device_state_block([r.stop() for r in recorders], tokens=7)
    assert block["energy_j_per_token"] == pytest.approx(100.0)


def test_the_block_of_ranks_without_nvml(nvml: ModuleType) -> None:
    measured = window(WindowRecorder(0, NO_THREAD_SAMPLES), lambda: nvml.advance(1.0))
    partial = device_state_block([measured, None], tokens=100)
    assert partial["available"] is True and partial["energy_j"] is None  # a partial sum would mislead
    assert partial["why"] == "rank(s) 1 could not read NVML: energy is not summed"
    assert partial["windows_measured"] == 1 and partial["windows"][1] is None
    none = device_state_block([None, None], tokens=100)
    assert none["available"] is False and none["why"] == "no rank could read NVML"
    assert (none["windows_measured"], none["throttled_windows"], none["throttled_by"]) == (0, 0, [])
    with pytest.raises(ValueError, match=r"tokens: got 0 \(expected the tokens trained"):
        device_state_block([measured], tokens=0)


def test_uuid_maps_to_the_nvml_index(nvml: ModuleType) -> None:
    nvml.set_gpu_count(3)
    uuids = [gpu["uuid"] for gpu in identity()["gpus"]]
    assert len(set(uuids)) == 3 and uuids[0] == UUID
    assert nvml_index_for_uuid(uuids[2]) == 2
    assert nvml_index_for_uuid(uuids[1].removeprefix("GPU-")) == 1  # as torch may print it
    assert nvml_index_for_uuid(uuids[1].upper()) == 1
    assert nvml_index_for_uuid("GPU-00000000-0000-0000-0000-000000000000") is None
    assert nvml_index_for_uuid("MIG-9221d5d1-b60b-a624-bf14-0a1819cfda3b") is None
    with pytest.raises(ValueError, match="uuid: got ''"):
        nvml_index_for_uuid("")


def test_reasons_are_named_from_an_older_nvidia_ml_py(
    nvml: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in dir(nvml) if n.startswith("nvmlClocksEventReason")]:
        monkeypatch.delattr(nvml, name)
    monkeypatch.delattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
    nvml.throttle("power")
    assert current_state(0)["throttle_reasons"] == ["sw_power_cap"]
    table = device._reason_table(nvml)
    assert table[0x200] == "board_limit" and table[0x2] == "applications_clocks_setting"
    assert reason_names(0x4 | 0x1000, table) == ["sw_power_cap", "unknown_0x1000"]


def test_recorder_misuse_names_the_problem(nvml: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"interval_s: got 0"):
        WindowRecorder(0, interval_s=0)
    recorder = WindowRecorder(0, NO_THREAD_SAMPLES)
    with pytest.raises(RuntimeError, match=r"stop\(\) without start\(\)"):
        recorder.stop()
    recorder.start()
    with pytest.raises(RuntimeError, match="called twice"):
        recorder.start()
    recorder.stop()
    with pytest.raises(ValueError, match="NVML device index: got 3"):
        WindowRecorder(3).start()
    assert nvml._refcount == 0


def record(tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "recorded.json"
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "record_nvml.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return dict(json.loads(out.read_text()))


def test_recording_the_fake_reproduces_its_recording(nvml: ModuleType, tmp_path: Path) -> None:
    recorded, seed = record(tmp_path), json.loads(RECORDING.read_text())
    assert recorded["recorded"] is True and recorded["date"] and recorded["driver"] == "580.159.04"
    assert (recorded["system"], recorded["devices"]) == (seed["system"], seed["devices"])


def test_a_recorded_error_round_trips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = json.loads(RECORDING.read_text())
    data["devices"][0]["nvmlDeviceGetTotalEnergyConsumption"] = {"nvml_error": "NVMLError_NotSupported"}
    (tmp_path / "no-energy.json").write_text(json.dumps(data))
    use_fake_nvml(monkeypatch, FAKE_NVML_DATA=str(tmp_path / "no-energy.json"))
    assert record(tmp_path)["devices"] == data["devices"]
    assert window(WindowRecorder(0, NO_THREAD_SAMPLES))["energy_j"] is None


def test_the_recording_is_a_real_gpus() -> None:
    # Recorded by benchmarks/record_nvml.py on the GPU check's machine, not written by hand.
    seed = json.loads(RECORDING.read_text())
    assert seed["recorded"] is True and seed["date"] and seed["nvidia_ml_py"]
    assert seed["source"] == {"*": "recorded from NVML: GPU 0"}
