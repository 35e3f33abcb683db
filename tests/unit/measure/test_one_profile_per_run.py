"""One machine profile per run, whatever each pod sees.

On a GPU pool the env task's pod holds the run's N GPUs and the ws=1 bench pod one; before the profile
named the GPUs of a launch, env.json said `...x8_...` and metrics-ws1.json `...x1_...`, and every
cluster run after the first was refused as "results from two machines". The threads per rank came
from the node's CPU count where a pod had no CPU limit, so two nodes of one GPU type with different CPU
counts were refused too. The environments below are made by the code that writes env.json
(`capture_environment` on this host, its GPU section by `gpu_section` as torch reports an H100 SXM).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from cgroup_trees import v2_tree

from benchgate.checks.comparable import check_profiles
from benchgate.errors import BaselineError
from benchgate.measure.env import capture_environment, gpu_section, launch_gpus, machine_profile
from benchgate.measure.launch import GPU_THREADS_WITHOUT_QUOTA, resolve_threads
from benchgate.results.bundle import Bundle

# torch.cuda.get_device_properties(i) on an H100 SXM5: name, total_memory=81559MB, 132 SMs.
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 81559 * 2**20, "sms": 132}


def pod_env(gpus_seen: int, per_launch: int | None) -> dict[str, Any]:
    """env.json as a pod that sees `gpus_seen` H100s writes it (driver 570, CUDA 12.8, NCCL 2.27)."""
    env = capture_environment()
    env["torch"].update(cuda="12.8", nccl="2.27.3")
    env["gpu"] = gpu_section([H100] * gpus_seen, "570.133.20", per_launch)
    env["machine_profile"] = machine_profile(env)
    return env


def run_of(env_task: dict[str, Any], bench_pod: dict[str, Any]) -> Bundle:
    """A run whose env.json is the env task's and whose metrics-ws1.json the ws=1 bench pod's."""
    metrics = {"machine_profile": bench_pod["machine_profile"], "world_size": 1}
    return Bundle(Path("run"), env_task, {1: metrics})


def test_each_pod_counting_its_own_gpus_is_refused_as_two_machines() -> None:
    # The profile as it was: each pod named the GPUs it saw.
    env_task, bench_pod = pod_env(8, None), pod_env(1, None)
    assert env_task["machine_profile"].startswith("H100-80GB-HBM3x8_drv570_cu12.8_torch")
    assert bench_pod["machine_profile"].startswith("H100-80GB-HBM3x1_drv570_cu12.8_torch")
    with pytest.raises(BaselineError, match="mixes results from two machines"):
        check_profiles(run_of(env_task, bench_pod))


def test_every_pod_names_the_gpus_of_the_runs_largest_launch() -> None:
    per_launch = launch_gpus([1, 8])
    env_task, bench_pod = pod_env(8, per_launch), pod_env(1, per_launch)
    assert env_task["machine_profile"] == bench_pod["machine_profile"]
    assert "x8_drv570" in bench_pod["machine_profile"]
    check_profiles(run_of(env_task, bench_pod))


def test_across_nodes_the_profile_names_one_nodes_gpus() -> None:
    # ws=16 over two 8-GPU nodes: every node's bench pod sees 8, the ws=1 pod 1, and all say x8.
    per_launch = launch_gpus([1, 16], gpus_per_node=8)
    assert per_launch == 8
    profiles = {pod_env(seen, per_launch)["machine_profile"] for seen in (8, 1)}
    assert len(profiles) == 1


def test_a_cpu_host_keeps_its_profile_whatever_the_world_sizes() -> None:
    assert capture_environment(per_launch=8)["machine_profile"] == capture_environment()["machine_profile"]


def test_gpu_threads_per_rank_do_not_follow_the_nodes_cpu_count(tmp_path: Path) -> None:
    # Two nodes of one GPU type, pods without a CPU limit: different CPU counts, the same threads.
    unlimited = v2_tree(tmp_path / "unlimited", "/", {"/": "max 100000\n"})
    cores = sorted(os.sched_getaffinity(0))
    seen = []
    try:
        for mask in ({cores[0]}, set(cores)):
            os.sched_setaffinity(0, mask)
            seen.append(resolve_threads(None, "cuda", 1, unlimited))
    finally:
        os.sched_setaffinity(0, set(cores))
    assert seen == [GPU_THREADS_WITHOUT_QUOTA, GPU_THREADS_WITHOUT_QUOTA]
    # A pod's own limit is what it may use: 8 CPUs for 2 ranks give 4 threads each, on any node.
    limited = v2_tree(tmp_path / "limited", "/", {"/": "800000 100000\n"})
    assert resolve_threads(None, "cuda", 2, limited) == 4
