"""The cgroup CPU quota caps the usable cores: read from fake cgroup trees laid out as the kernel does.

Each tree is a directory standing for /sys/fs/cgroup plus a file standing for /proc/self/cgroup, with
the contents the kernel writes (trailing newline included).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cgroup_trees import V1_MEMBERSHIP, v1_tree, v2_tree, write

from benchgate.kit.cpus import CgroupPaths, affinity_cpus, cpu_budget, cpu_quota, usable_cpus
from benchgate.measure.env import capture_environment
from benchgate.measure.launch import GPU_THREADS_WITHOUT_QUOTA, resolve_threads

POD_V2 = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3f1c.slice/cri-containerd-9ab2.scope"
POD_V1 = "/kubepods/burstable/pod3f1c/9ab2"


# --- cgroup v2 ------------------------------------------------------------------------------------------


def test_v2_pod_limited_to_4_cpus_on_a_96_core_node_gets_4(tmp_path: Path) -> None:
    cgroup = v2_tree(tmp_path, POD_V2, {POD_V2: "max 100000\n", POD_V2.rsplit("/", 1)[0]: "400000 100000\n"})
    budget = cpu_budget(cgroup, affinity=96)
    assert budget.quota == 4.0
    assert budget.usable == 4


def test_v2_no_limit_leaves_the_affinity_mask(tmp_path: Path) -> None:
    cgroup = v2_tree(tmp_path, POD_V2, {POD_V2: "max 100000\n", "/kubepods.slice": "max 100000\n"})
    assert cpu_quota(cgroup) is None
    assert cpu_budget(cgroup, affinity=96).usable == 96


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param(("max 100000\n", "200000 100000\n", "800000 100000\n"), 2.0, id="parent-tighter"),
        pytest.param(("300000 100000\n", "max 100000\n", "800000 100000\n"), 3.0, id="leaf-tighter"),
        pytest.param(("max 100000\n", "max 100000\n", "100000 50000\n"), 2.0, id="grandparent-other-period"),
    ],
)
def test_v2_nested_cgroups_take_the_tightest_ancestor(
    tmp_path: Path, limits: tuple[str, str, str], expected: float
) -> None:
    leaf = "/kubepods.slice/pod.slice/ctr.scope"
    cgroup = v2_tree(
        tmp_path,
        leaf,
        {leaf: limits[0], "/kubepods.slice/pod.slice": limits[1], "/kubepods.slice": limits[2]},
    )
    assert cpu_quota(cgroup) == expected
    assert cpu_budget(cgroup, affinity=96).usable == int(expected)


def test_v2_inside_a_cgroup_namespace_the_path_is_root(tmp_path: Path) -> None:
    cgroup = v2_tree(tmp_path, "/", {"/": "400000 100000\n"})
    assert cpu_budget(cgroup, affinity=96).usable == 4


# --- cgroup v1 ------------------------------------------------------------------------------------------


def test_v1_cfs_quota_of_4_cpus_gets_4(tmp_path: Path) -> None:
    cgroup = v1_tree(tmp_path, POD_V1, {POD_V1: ("400000\n", "100000\n"), "": ("-1\n", "100000\n")})
    budget = cpu_budget(cgroup, affinity=96)
    assert budget.quota == 4.0
    assert budget.usable == 4


def test_v1_quota_minus_one_is_no_limit(tmp_path: Path) -> None:
    cgroup = v1_tree(tmp_path, POD_V1, {POD_V1: ("-1\n", "100000\n"), "": ("-1\n", "100000\n")})
    assert cpu_quota(cgroup) is None


def test_v1_parent_quota_applies_to_the_child(tmp_path: Path) -> None:
    pod = POD_V1.rsplit("/", 1)[0]
    cgroup = v1_tree(
        tmp_path,
        POD_V1,
        {POD_V1: ("-1\n", "100000\n"), pod: ("250000\n", "100000\n"), "": ("-1\n", "100000\n")},
    )
    assert cpu_quota(cgroup) == 2.5
    assert cpu_budget(cgroup, affinity=96).usable == 2


def test_v1_inside_a_container_the_path_is_root(tmp_path: Path) -> None:
    cgroup = v1_tree(tmp_path, "/", {"": ("200000\n", "100000\n")})
    assert cpu_budget(cgroup, affinity=96).usable == 2


def test_v1_host_path_missing_under_the_container_mount_reads_the_mount_root(tmp_path: Path) -> None:
    # Docker on cgroup v1 has no cgroup namespace: /proc/self/cgroup names the host's path, but
    # /sys/fs/cgroup/cpu,cpuacct is the container's own cgroup, so its files sit at the mount root.
    cgroup = v1_tree(tmp_path, "/", {"": ("200000\n", "100000\n")})
    cgroup.membership.write_text(V1_MEMBERSHIP.format(path="/docker/4f9a0c1e"))
    assert cpu_budget(cgroup, affinity=96).usable == 2


def test_v1_cpu_mounted_alone(tmp_path: Path) -> None:
    # Some hosts mount cpu and cpuacct as separate hierarchies (this one does): `1:cpu:/`.
    root = tmp_path / "sys-fs-cgroup"
    write(root / "cpu" / "cpu.cfs_quota_us", "300000\n")
    write(root / "cpu" / "cpu.cfs_period_us", "100000\n")
    write(tmp_path / "proc-self-cgroup", "2:cpuacct:/\n1:cpu:/\n0::/\n")
    assert cpu_quota(CgroupPaths(root, tmp_path / "proc-self-cgroup")) == 3.0


# --- rounding and the affinity mask ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu_max", "usable"),
    [
        pytest.param("50000 100000\n", 1, id="500m"),
        pytest.param("10000 100000\n", 1, id="100m"),
        pytest.param("150000 100000\n", 1, id="1.5-rounds-down"),
        pytest.param("199999 100000\n", 1, id="just-under-2"),
        pytest.param("200000 100000\n", 2, id="2"),
    ],
)
def test_fractional_quotas_round_down_but_never_below_one(tmp_path: Path, cpu_max: str, usable: int) -> None:
    cgroup = v2_tree(tmp_path, "/", {"/": cpu_max})
    assert cpu_budget(cgroup, affinity=96).usable == usable


def test_affinity_smaller_than_the_quota_wins(tmp_path: Path) -> None:
    cgroup = v2_tree(tmp_path, "/", {"/": "400000 100000\n"})
    assert cpu_budget(cgroup, affinity=2).usable == 2


def test_a_real_affinity_mask_smaller_than_the_quota_wins(tmp_path: Path) -> None:
    # sched_setaffinity(0, ...) binds only the calling thread, and it is restored before the test ends.
    cgroup = v2_tree(tmp_path, "/", {"/": "400000 100000\n"})
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        assert affinity_cpus() == 1
        assert usable_cpus(cgroup) == 1
    finally:
        os.sched_setaffinity(0, before)


# --- files that are missing, unreadable or malformed: no limit, no crash ------------------------------


@pytest.mark.parametrize(
    "cpu_max",
    [
        pytest.param("", id="empty"),
        pytest.param("garbage\n", id="garbage"),
        pytest.param("400000\n", id="one-field"),
        pytest.param("400000 100000 7\n", id="three-fields"),
        pytest.param("400000 0\n", id="zero-period"),
        pytest.param("0 100000\n", id="zero-quota"),
        pytest.param("-400000 100000\n", id="negative"),
        pytest.param("4e5 100000\n", id="not-an-integer"),
        pytest.param("max\n", id="max-without-period"),
    ],
)
def test_malformed_cpu_max_is_no_limit(tmp_path: Path, cpu_max: str) -> None:
    cgroup = v2_tree(tmp_path, "/", {"/": cpu_max})
    assert cpu_quota(cgroup) is None
    assert cpu_budget(cgroup, affinity=8).usable == 8


def test_unreadable_files_are_no_limit(tmp_path: Path) -> None:
    cgroup = v2_tree(tmp_path, POD_V2, {})
    (cgroup.root / POD_V2.lstrip("/") / "cpu.max").mkdir()  # a directory where the file should be
    (cgroup.root / "cpu.max").symlink_to("cpu.max")  # a link to itself: ELOOP on open
    (cgroup.root / "kubepods.slice" / "cpu.max").write_bytes(b"\xff\xfe\x00\x01 100000\n")
    assert cpu_quota(cgroup) is None


@pytest.mark.parametrize(
    ("quota", "period"),
    [
        pytest.param("abc\n", "100000\n", id="quota-garbage"),
        pytest.param("400000\n", "\n", id="period-empty"),
        pytest.param("-2\n", "100000\n", id="negative-quota"),
    ],
)
def test_malformed_cfs_files_are_no_limit(tmp_path: Path, quota: str, period: str) -> None:
    cgroup = v1_tree(tmp_path, POD_V1, {POD_V1: (quota, period)})
    assert cpu_quota(cgroup) is None


def test_cfs_quota_without_its_period_is_no_limit(tmp_path: Path) -> None:
    cgroup = v1_tree(tmp_path, POD_V1, {})
    write(cgroup.root / "cpu,cpuacct" / POD_V1.lstrip("/") / "cpu.cfs_quota_us", "400000\n")
    assert cpu_quota(cgroup) is None


@pytest.mark.parametrize(
    "membership",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("not a cgroup line\n0:/\n", id="garbage"),
        pytest.param("0::/../outside\n", id="outside-the-namespace"),
    ],
)
def test_bad_membership_file_is_no_limit(tmp_path: Path, membership: str | None) -> None:
    cgroup = v2_tree(tmp_path, "/", {"/": "max 100000\n"})
    # A cgroup outside this namespace's view: joining "/../outside" onto the mount would land here.
    write(tmp_path / "outside" / "cpu.max", "100000 100000\n")
    cgroup.membership.unlink()
    if membership is not None:
        cgroup.membership.write_text(membership)
    assert cpu_quota(cgroup) is None


def test_missing_cgroup_mount_is_no_limit(tmp_path: Path) -> None:
    write(tmp_path / "proc-self-cgroup", "4:cpu,cpuacct:/docker/ab12\n0::/\n")
    assert cpu_quota(CgroupPaths(tmp_path / "no-such-mount", tmp_path / "proc-self-cgroup")) is None


# --- where cores are counted: env.json, the profile, threads per rank ---------------------------------


def test_env_capture_records_and_honours_the_quota(tmp_path: Path) -> None:
    cgroup = v2_tree(tmp_path, "/", {"/": "100000 100000\n"})
    cpu = capture_environment(cgroup=cgroup)["cpu"]
    assert cpu["quota_cores"] == 1.0
    assert cpu["usable_cores"] == 1
    assert cpu["affinity_cores"] == len(os.sched_getaffinity(0))
    assert cpu["logical_cores"] == os.cpu_count()  # the machine's, kept so a reader sees the cut


def test_profile_says_the_usable_count_under_a_quota(tmp_path: Path) -> None:
    env = capture_environment(cgroup=v2_tree(tmp_path, "/", {"/": "100000 100000\n"}))
    assert "-x1_torch" in env["machine_profile"]


def test_profile_of_a_500m_pod_differs_from_a_1_cpu_pod(tmp_path: Path) -> None:
    half = capture_environment(cgroup=v2_tree(tmp_path / "half", "/", {"/": "50000 100000\n"}))
    one = capture_environment(cgroup=v2_tree(tmp_path / "one", "/", {"/": "100000 100000\n"}))
    assert half["cpu"]["usable_cores"] == 1
    assert "-x0.5_torch" in half["machine_profile"]
    assert half["machine_profile"] != one["machine_profile"]


def test_resolve_threads_honours_the_quota(tmp_path: Path) -> None:
    limited = v2_tree(tmp_path / "limited", "/", {"/": "100000 100000\n"})
    unlimited = v2_tree(tmp_path / "unlimited", "/", {"/": "max 100000\n"})
    assert resolve_threads(None, "cuda", 1, unlimited) == GPU_THREADS_WITHOUT_QUOTA  # never the node's cores
    assert resolve_threads(None, "cuda", 1, limited) == 1
    assert resolve_threads(None, "cuda", 2, limited) == 1  # never 0, however many ranks share one CPU
    assert resolve_threads(3, "cuda", 1, limited) == 3  # threads_per_rank set by the user wins
    assert resolve_threads(None, "cpu", 1, unlimited) == 1  # a CPU rank stands for one device


def test_this_host_counts_its_affinity_mask() -> None:
    # No fake root: the real /proc/self/cgroup and /sys/fs/cgroup. The development host has no quota
    # (cgroup v1 `1:cpu:/`, cpu.cfs_quota_us -1), so nothing may change here, the profile included.
    affinity = len(os.sched_getaffinity(0))
    quota = cpu_quota()
    assert quota is None or quota > 0
    if quota is not None and quota < affinity:
        pytest.skip(f"this host has a CPU quota of {quota:g} CPUs")
    assert usable_cpus() == affinity
    env = capture_environment()
    assert env["cpu"]["usable_cores"] == affinity
    if not env["gpu"]["count"]:
        assert f"-x{affinity}_torch" in env["machine_profile"]
