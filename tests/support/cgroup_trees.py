"""Fake cgroup trees laid out as the kernel does: a directory standing for /sys/fs/cgroup plus a file
standing for /proc/self/cgroup, with the contents the kernel writes (trailing newline included)."""

from __future__ import annotations

from pathlib import Path

from benchgate.kit.cpus import CgroupPaths

# What the kernel lists for a process in a v1 (hybrid) hierarchy: one line per mounted hierarchy.
V1_MEMBERSHIP = (
    "12:pids:{path}\n11:memory:{path}\n4:cpu,cpuacct:{path}\n3:cpuset:{path}\n"
    "1:name=systemd:{path}\n0::/system.slice/containerd.service\n"
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v2_tree(tmp_path: Path, cgroup: str, cpu_max: dict[str, str]) -> CgroupPaths:
    """A cgroup v2 mount with `cpu.max` per cgroup path ("" is the mount root); the process is in `cgroup`."""
    root = tmp_path / "sys-fs-cgroup"
    (root / cgroup.lstrip("/")).mkdir(parents=True, exist_ok=True)
    write(root / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    for path, text in cpu_max.items():
        write(root / path.lstrip("/") / "cpu.max", text)
    write(tmp_path / "proc-self-cgroup", f"0::{cgroup}\n")
    return CgroupPaths(root=root, membership=tmp_path / "proc-self-cgroup")


def v1_tree(tmp_path: Path, cgroup: str, cfs: dict[str, tuple[str, str]]) -> CgroupPaths:
    """A cgroup v1 layout as Docker and the kubelet see it: cpu,cpuacct mounted, cpu and cpuacct linked to it.

    `cfs` maps a cgroup path ("" is the mount root) to (cpu.cfs_quota_us, cpu.cfs_period_us).
    """
    root = tmp_path / "sys-fs-cgroup"
    mount = root / "cpu,cpuacct"
    (mount / cgroup.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "cpu").symlink_to("cpu,cpuacct")
    (root / "cpuacct").symlink_to("cpu,cpuacct")
    for path, (quota, period) in cfs.items():
        write(mount / path.lstrip("/") / "cpu.cfs_quota_us", quota)
        write(mount / path.lstrip("/") / "cpu.cfs_period_us", period)
    write(tmp_path / "proc-self-cgroup", V1_MEMBERSHIP.format(path=cgroup))
    return CgroupPaths(root=root, membership=tmp_path / "proc-self-cgroup")
