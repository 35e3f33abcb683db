"""Environment capture and the machine profile: the key that decides which results may be compared.

Machine profile grammar (tokens joined by '_', characters limited to [A-Za-z0-9.-]):

    gpu host:  <gpu-model>x<count>_drv<driver-major>_cu<cuda-major.minor>_torch<version>_nccl<major.minor>
               e.g. H100-80GB-HBM3x8_drv550_cu12.4_torch2.4.0_nccl2.21
    cpu host:  cpu-<cpu-model>-x<usable-cores>_torch<version>
               e.g. cpu-AMD-EPYC-7763-x2_torch2.13.0

On a GPU host <count> is the GPUs one launch of the run uses, its largest on one node (`launch_gpus`:
the largest world size, or a node's GPUs where that one spans nodes), not what this process sees: on a
cluster the env task's pod holds N GPUs and the ws=1 bench pod one, and both must write the same
profile. A caller that does not know the run's world sizes gets the count it sees.

Usable cores are the affinity mask capped by the cgroup CPU quota (benchgate.kit.cpus), so a pod limited to
4 CPUs on a 96-core node says x4; a quota below one CPU is written as itself (x0.5), since such a pod
is slower than a 1-CPU one.

A token whose value is unknown is written as 'unknown' rather than dropped, so the profile keeps its
shape. Two runs share a profile exactly when the hardware and the performance-relevant software agree;
the git state of the code under test is captured too but is deliberately not part of the profile.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchgate._version import __version__
from benchgate.kit.cpus import HOST_CGROUP, CgroupPaths, cpu_budget

_NOISE_WORDS = re.compile(r"\(R\)|\(TM\)|\bCPU\b|\bProcessor\b|\b\d+-Core\b|@.*$|\bNVIDIA\b", re.IGNORECASE)


def _slug(text: str) -> str:
    cleaned = _NOISE_WORDS.sub(" ", text)
    return "-".join(re.sub(r"[^A-Za-z0-9.]+", " ", cleaned).split()) or "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def usable_cpu_cores(cgroup: CgroupPaths = HOST_CGROUP) -> int:
    """The affinity mask capped by the cgroup CPU quota (benchgate.kit.cpus): what a run really gets."""
    return cpu_budget(cgroup).usable


def _cpu_section(cgroup: CgroupPaths) -> dict[str, Any]:
    budget = cpu_budget(cgroup)
    return {
        "model": _cpu_model(),
        "usable_cores": budget.usable,
        "logical_cores": os.cpu_count(),  # the machine's, so a reader sees what the limits cut it down from
        "affinity_cores": budget.affinity,
        "quota_cores": budget.quota,  # the cgroup CPU limit (a pod's resources.limits.cpu); None: none
    }


def _nvidia_smi_driver() -> str | None:
    """The driver version from nvidia-smi, where NVML's Python binding is not installed."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip().splitlines()[0] or None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def capture_git(cwd: Path, branch: str | None = None) -> dict[str, Any]:
    """Commit, branch and dirty state of the code under test; CI may override the branch (detached HEAD)."""
    commit = _git(["rev-parse", "HEAD"], cwd)
    branch = branch or os.environ.get("BENCHGATE_BRANCH") or _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
    return {
        "commit": commit,
        "branch": None if branch == "HEAD" else branch,
        "dirty": None if status is None else bool(status),
    }


def launch_gpus(world_sizes: Sequence[int] | None, gpus_per_node: int | None = None) -> int | None:
    """The GPUs the run's largest launch on one node uses: its largest world size, or `gpus_per_node`
    where that world size spans nodes. None when the world sizes are not known yet."""
    if not world_sizes:
        return None
    largest = max(world_sizes)
    return min(largest, gpus_per_node) if gpus_per_node else largest


def gpu_section(
    devices: Sequence[dict[str, Any]], driver: str | None, per_launch: int | None
) -> dict[str, Any]:
    """env.json's "gpu": the devices this process sees (name, memory, SMs), the driver, and the GPUs one
    launch of the run uses (None: unknown, the profile then counts the devices seen)."""
    return {
        "count": len(devices),
        "devices": list(devices),
        "driver": driver if devices else None,
        "per_launch": per_launch if devices else None,
    }


def capture_environment(
    cwd: Path | None = None,
    branch: str | None = None,
    *,
    cgroup: CgroupPaths = HOST_CGROUP,
    per_launch: int | None = None,
) -> dict[str, Any]:
    """Everything that can change a benchmark's numbers, plus the machine profile derived from it.

    `cwd` is the checkout of the code under test; `branch` overrides what git says (CI checks out a
    detached HEAD); `cgroup` is where the CPU quota is read (tests point it at a tree of their own);
    `per_launch` the GPUs one launch of the run uses (`launch_gpus`), which the profile names.
    """
    import torch  # here, not at the top: light pipeline tasks import this module without needing torch

    cuda_ok = torch.cuda.is_available()
    gpus = []
    if cuda_ok:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append(
                {
                    "name": props.name,
                    "memory_bytes": props.total_memory,
                    "sms": props.multi_processor_count,
                    # NVML's devices are matched by it: CUDA_VISIBLE_DEVICES renumbers CUDA's, never NVML's.
                    "uuid": str(props.uuid),
                }
            )
    nccl = None
    if cuda_ok and torch.distributed.is_nccl_available():
        nccl = ".".join(str(p) for p in torch.cuda.nccl.version())
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    env: dict[str, Any] = {
        "benchgate_version": __version__,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "os": platform.platform(),
        "torch": {
            "version": torch.__version__,
            "git_version": getattr(torch.version, "git_version", None),
            "cuda": torch.version.cuda,
            "cudnn": cudnn,
            "nccl": nccl,
            "debug": bool(torch.version.debug),
        },
        "cpu": _cpu_section(cgroup),
        "gpu": gpu_section(gpus, None, per_launch),
        "git": capture_git(Path(cwd or Path.cwd()), branch),
    }
    if gpus:
        from benchgate.measure.device import identity

        # Which physical cards, at what power limit, ECC, MIG and compute mode (NVML; absent: why).
        nvml = identity()
        env["gpu"]["nvml"] = nvml
        env["gpu"]["driver"] = nvml["driver"] or _nvidia_smi_driver()
    env["machine_profile"] = machine_profile(env)
    return env


def machine_profile(env: dict[str, Any]) -> str:
    """The machine profile of an environment `capture_environment` captured: which results may be compared.

    Two runs are compared only within one profile (the grammar is this module's docstring): the GPU
    model and the GPUs one launch uses, driver, CUDA, torch and NCCL, or a CPU host's model, usable cores
    and torch. The git state is not part of it. For example ``machine_profile(capture_environment())``
    is "cpu-AMD-EPYC-7763-x2_torch2.13.0" on a 2-core CPU host.
    """
    torch_version = str(env["torch"]["version"]).split("+")[0]
    gpu = env["gpu"]
    if gpu["count"]:
        names = sorted({d["name"] for d in gpu["devices"]})
        model = "+".join(_slug(n) for n in names).replace("+", "-")
        driver = (gpu["driver"] or "unknown").split(".")[0]
        cuda = env["torch"]["cuda"] or "unknown"
        nccl = ".".join((env["torch"]["nccl"] or "unknown").split(".")[:2])
        # The run's launch size where it is known (env.json of older runs lacks it): see the docstring.
        count = gpu.get("per_launch") or gpu["count"]
        return f"{model}x{count}_drv{driver}_cu{cuda}_torch{torch_version}_nccl{nccl}"
    cpu = env["cpu"]
    return f"cpu-{_slug(cpu['model'])}-x{_cpu_count_token(cpu)}_torch{torch_version}"


def _cpu_count_token(cpu: dict[str, Any]) -> str:
    # The usable cores, except under a quota below one CPU: usable is still 1 there (one thread must
    # run), but a 500m pod runs at half the speed of a 1-CPU one and must not share its profile.
    quota = cpu.get("quota_cores")  # absent from env.json files written before quotas were read
    if quota is not None and quota < 1:
        return f"{quota:.3g}"  # millicores exactly: 500m -> 0.5, 333m -> 0.333
    return str(cpu["usable_cores"])
