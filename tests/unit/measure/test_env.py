from __future__ import annotations

import copy
import os
import re
from typing import Any

import pytest

from benchgate.measure.env import capture_environment, machine_profile

PROFILE_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")

GPU_ENV: dict[str, Any] = {
    "torch": {"version": "2.4.0+cu124", "cuda": "12.4", "nccl": "2.21.5"},
    "cpu": {"model": "AMD EPYC 7763 64-Core Processor", "usable_cores": 128},
    "gpu": {"count": 8, "driver": "550.54.15", "devices": [{"name": "NVIDIA H100 80GB HBM3"}] * 8},
}
CPU_ENV: dict[str, Any] = {
    "torch": {"version": "2.13.0+cpu", "cuda": None, "nccl": None},
    "cpu": {"model": "AMD EPYC 7763 64-Core Processor", "usable_cores": 2},
    "gpu": {"count": 0, "driver": None, "devices": []},
}


def test_machine_profile_gpu_grammar() -> None:
    assert machine_profile(GPU_ENV) == "H100-80GB-HBM3x8_drv550_cu12.4_torch2.4.0_nccl2.21"


def test_machine_profile_cpu_grammar() -> None:
    assert machine_profile(CPU_ENV) == "cpu-AMD-EPYC-7763-x2_torch2.13.0"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param(("gpu", "driver"), "560.28.03", id="driver"),
        pytest.param(("torch", "cuda"), "12.6", id="cuda"),
        pytest.param(("torch", "version"), "2.5.0+cu124", id="torch"),
        pytest.param(("torch", "nccl"), "2.23.4", id="nccl"),
        pytest.param(("gpu", "count"), 4, id="gpu-count"),
    ],
)
def test_machine_profile_changes_when_any_component_changes(path: tuple[str, str], value: Any) -> None:
    changed = copy.deepcopy(GPU_ENV)
    changed[path[0]][path[1]] = value
    assert machine_profile(changed) != machine_profile(GPU_ENV)


def test_machine_profile_of_this_machine_is_stable_and_safe() -> None:
    first, second = capture_environment(), capture_environment()
    assert first["machine_profile"] == second["machine_profile"]
    assert PROFILE_CHARS.match(first["machine_profile"])
    assert first["torch"]["version"].startswith("2.13.0")
    assert first["cpu"]["usable_cores"] >= 1
    assert set(first["git"]) == {"commit", "branch", "dirty"}


@pytest.mark.parametrize(
    ("cpu", "token"),
    [
        pytest.param({"usable_cores": 4, "affinity_cores": 96, "quota_cores": 4.0}, "x4", id="4-cpu-pod"),
        pytest.param({"usable_cores": 1, "affinity_cores": 96, "quota_cores": 1.5}, "x1", id="1.5-cpu-pod"),
        pytest.param({"usable_cores": 1, "affinity_cores": 96, "quota_cores": 0.5}, "x0.5", id="500m-pod"),
        pytest.param({"usable_cores": 1, "affinity_cores": 96, "quota_cores": 0.333}, "x0.333", id="333m"),
        pytest.param({"usable_cores": 1, "affinity_cores": 96, "quota_cores": 0.999}, "x0.999", id="999m"),
        pytest.param({"usable_cores": 2, "affinity_cores": 2, "quota_cores": None}, "x2", id="no-quota"),
        pytest.param({"usable_cores": 2}, "x2", id="env-json-before-quotas"),
    ],
)
def test_machine_profile_cpu_count_honours_the_quota(cpu: dict[str, Any], token: str) -> None:
    env = copy.deepcopy(CPU_ENV)
    env["cpu"].update(cpu)
    assert machine_profile(env) == f"cpu-AMD-EPYC-7763-{token}_torch2.13.0"
    assert PROFILE_CHARS.match(machine_profile(env))


def test_env_json_keeps_the_machine_core_count_beside_the_limits() -> None:
    cpu = capture_environment()["cpu"]
    assert cpu["logical_cores"] == os.cpu_count()
    assert cpu["affinity_cores"] == len(os.sched_getaffinity(0))
    assert cpu["quota_cores"] is None or cpu["quota_cores"] > 0
    assert 1 <= cpu["usable_cores"] <= cpu["affinity_cores"]
