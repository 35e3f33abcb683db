"""The bench's NVML window around its measured steps (`sysmetrics.device_window`, given the UUID torch
reports for the rank's GPU), against the fake NVML (tests/support/fake_nvml): what a CUDA rank records,
reached on CPU, and what a rank records where NVML cannot read its GPU."""

from __future__ import annotations

import time

import pytest
from fake_nvml import use_fake_nvml

from benchgate.measure.device import identity
from benchgate.measure.device_state import device_state_block
from benchgate.measure.sysmetrics import device_window


def test_a_cpu_rank_has_no_window() -> None:
    with device_window(None) as window:
        pass
    assert window is None


def test_a_gpu_ranks_window_of_its_measured_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvml(monkeypatch, FAKE_NVML_POWER_W="500", FAKE_NVML_GPUS="2")
    second = identity()["gpus"][1]["uuid"]
    # torch prints the UUID without NVML's "GPU-" prefix: the window still finds NVML's index 1.
    with device_window(second.removeprefix("GPU-")) as window:
        time.sleep(0.3)
    assert window is not None and window.result is not None
    result = window.result
    assert result["nvml_index"] == 1 and result["uuid"] == second
    assert result["samples"] >= 2 and not result["throttled"]
    assert result["energy_j"] == pytest.approx(500 * result["seconds"], rel=0.2)
    block = device_state_block([result], tokens=1000)
    assert block["available"] and block["energy_j_per_token"] == pytest.approx(result["energy_j"] / 1000)


def test_a_throttled_gpu_is_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvml(monkeypatch, FAKE_NVML_THROTTLE="power")
    with device_window(identity()["gpus"][0]["uuid"]) as window:
        time.sleep(0.2)
    assert window is not None and window.result is not None
    assert window.result["throttled"] and window.result["throttled_by"] == ["power cap"]


@pytest.mark.parametrize("hook", [{"FAKE_NVML_NO_DRIVER": "1"}, {}], ids=["no driver", "a MIG instance"])
def test_where_nvml_cannot_read_the_gpu_the_window_says_so(
    monkeypatch: pytest.MonkeyPatch, hook: dict[str, str]
) -> None:
    use_fake_nvml(monkeypatch, **hook)
    # A MIG instance's UUID ("MIG-...") names no NVML device; without a driver nothing does.
    with device_window("MIG-5c1a2b9e-1d3f-4e8a-9b0c-7d6e5f4a3b2c") as window:
        pass
    assert window is not None and window.result is None
    block = device_state_block([window.result], tokens=1000)
    assert not block["available"] and block["why"] == "no rank could read NVML"
    assert block["energy_j_per_token"] is None
