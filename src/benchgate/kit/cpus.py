"""How many CPUs this process may really use: the affinity mask, capped by the cgroup CPU quota.

A Kubernetes pod limited to 4 CPUs on a 96-core node sees all 96 cores in its affinity mask; the limit
is a CFS bandwidth quota in its cgroup. Counting the mask would start 48 threads per rank that the
kernel then throttles, and write x96 into the machine profile. Both hierarchies are read:

    cgroup v2:  /proc/self/cgroup line `0::/path`           -> <root>/path/cpu.max
                "max 100000" = no limit, "400000 100000" = 4 CPUs
    cgroup v1:  /proc/self/cgroup line `N:cpu,cpuacct:/path` -> <root>/cpu,cpuacct/path/cpu.cfs_quota_us
                and cpu.cfs_period_us; a quota of -1 = no limit

A parent cgroup's quota bounds its children, so every ancestor up to the mount root is read and the
smallest quota wins. Inside a container the path may be "/" (a cgroup namespace) or a host path that
does not exist under the container's mount (no namespace); walking up to the mount root reads the
container's own files in both cases.

This runs at every start, on hosts of every kind: a file that is missing, unreadable or malformed
means "no limit from that file", never an error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class CgroupPaths:
    """Where the cgroup files are read from; tests point this at a tree of their own."""

    root: Path
    membership: Path  # /proc/self/cgroup: which cgroup this process belongs to, per hierarchy


HOST_CGROUP = CgroupPaths(root=Path("/sys/fs/cgroup"), membership=Path("/proc/self/cgroup"))

_V1_MOUNT_NAMES = ("cpu,cpuacct", "cpuacct,cpu", "cpu")


@dataclass(frozen=True)
class CpuBudget:
    affinity: int  # CPUs in this process's affinity mask
    quota: float | None  # the tightest cgroup CPU quota, in CPUs; None: no quota

    @property
    def usable(self) -> int:
        """Threads worth running: the affinity mask, capped by the quota rounded down (at least 1).

        Down, not up: a thread count above the quota gets the group throttled. Two busy threads under
        1.5 CPUs spend the 150 ms of each 100 ms period in 75 ms and then stall for 25 ms, and a step
        that spans the stall is that much slower, which is noise in exactly what the bench measures.
        One thread is never throttled there, and the half CPU left over serves torchrun and the
        sampler. Below one CPU (a 500m limit) one thread is the least that can run at all.
        """
        if self.quota is None:
            return self.affinity
        return max(1, min(self.affinity, math.floor(self.quota)))


def affinity_cpus() -> int:
    # The affinity mask, not the host's core count: cpusets and taskset limit what a run gets.
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_budget(cgroup: CgroupPaths = HOST_CGROUP, affinity: int | None = None) -> CpuBudget:
    """The affinity mask (this process's, unless given) and the cgroup quota read under `cgroup`."""
    return CpuBudget(affinity=affinity_cpus() if affinity is None else affinity, quota=cpu_quota(cgroup))


def usable_cpus(cgroup: CgroupPaths = HOST_CGROUP) -> int:
    return cpu_budget(cgroup).usable


def threads_within(requested: int, budget: CpuBudget) -> int:
    """`requested` threads, or the budget's usable CPUs where there are fewer (at least 1).

    More threads than CPUs do not share the work, they wait for each other: each parallel region of
    torch ends at a barrier that lasts until the last thread is scheduled again, so on 2 cores with one
    kept busy by another process 2 threads ran the eval 2 to 26 times slower than 1.
    """
    return max(1, min(requested, budget.usable))


def cpu_quota(cgroup: CgroupPaths = HOST_CGROUP) -> float | None:
    """The smallest CPU quota over both hierarchies and all ancestors, in CPUs; None if there is none."""
    quotas: list[float] = []
    for hierarchy_id, controllers, path in _memberships(cgroup.membership):
        if hierarchy_id == "0" and controllers == "":
            quotas += _walk_up(cgroup.root, path, _read_cpu_max)
        elif "cpu" in controllers.split(","):
            mount = _v1_cpu_mount(cgroup.root, controllers)
            if mount is not None:
                quotas += _walk_up(mount, path, _read_cfs_quota)
    return min(quotas, default=None)


def _memberships(membership: Path) -> list[tuple[str, str, PurePosixPath]]:
    """(hierarchy id, controllers, path) per line of /proc/self/cgroup, skipping lines that do not parse."""
    text = _read(membership)
    if text is None:
        return []
    found = []
    for line in text.splitlines():
        parts = line.split(":", 2)  # the path itself may contain ':'
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        path = PurePosixPath(parts[2])
        # ".." means the cgroup lies outside this namespace's view: its files are not under the mount.
        if ".." in path.parts:
            continue
        found.append((parts[0], parts[1], path))
    return found


def _v1_cpu_mount(root: Path, controllers: str) -> Path | None:
    for name in (controllers, *_V1_MOUNT_NAMES):
        try:
            if (root / name).is_dir():
                return root / name
        except OSError:  # is_dir raises on EACCES
            continue
    return None


def _walk_up(mount: Path, path: PurePosixPath, read: Callable[[Path], float | None]) -> list[float]:
    """The quotas of the cgroup at `path` and its ancestors, down to the mount root, where they exist."""
    quotas = []
    for directory in (path, *path.parents):
        quota = read(mount.joinpath(*directory.parts[1:]))
        if quota is not None:
            quotas.append(quota)
    return quotas


def _read_cpu_max(directory: Path) -> float | None:
    fields = (_read(directory / "cpu.max") or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _read_cfs_quota(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    return _ratio(quota.strip(), period.strip())  # -1, "no limit", is not > 0 and so gives None


def _ratio(quota_us: str, period_us: str) -> float | None:
    try:
        quota, period = int(quota_us), int(period_us)
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _read(path: Path) -> str | None:
    try:
        # surrogateescape: a cgroup name is bytes to the kernel; joined onto a Path it maps back to them
        return path.read_text(encoding="utf-8", errors="surrogateescape")
    except (OSError, ValueError):  # missing, unreadable, a directory
        return None
