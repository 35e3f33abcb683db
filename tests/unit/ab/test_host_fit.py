"""Which world sizes a CPU host can A/B (ab/host_fit.py), and what the rows of the others say."""

from __future__ import annotations

from benchgate.ab.host_fit import cpu_ab_worlds, host_ab_worlds, mark_not_measured
from benchgate.checks.tables import why
from benchgate.results.comparison import SCALING, TIMING, Check, Comparison


def screened(ws: int, status: str, change: float | None = -3.0) -> Check:
    # As checks/compare.py writes a screened timing row.
    return Check(
        name=f"tokens/s (ws={ws})",
        unit="tok/s",
        current=1000.0,
        baseline=1030.0,
        change=change,
        rule="drop > 5% at 95% confidence",
        status=status,  # type: ignore[arg-type]
        note="over 3 earlier runs",
        metric=TIMING,
        world_size=ws,
        decided_by="screen",
    )


def comparison(*checks: Check) -> Comparison:
    return Comparison("cpu-X-x2_torch2.13.0", "stackwork", None, list(checks), [], "fail")


def test_a_two_core_host_ab_s_ws1_and_not_ws2() -> None:
    kept, skipped = cpu_ab_worlds([1, 2], "cpu", 2, 2)
    assert kept == [1] and list(skipped) == [2]
    assert "wants 2 x 2 = 4 cores and this host has 2" in skipped[2]


def test_enough_cores_a_gpu_an_unknown_count_or_zero_per_rank_keep_every_world_size() -> None:
    assert cpu_ab_worlds([1, 2], "cpu", 4, 2) == ([1, 2], {})
    assert cpu_ab_worlds([1, 8], "cuda", 2, 2) == ([1, 8], {})
    assert cpu_ab_worlds([1, 2], "cpu", None, 2) == ([1, 2], {})
    assert cpu_ab_worlds([1, 2], "cpu", 2, 0) == ([1, 2], {})
    assert cpu_ab_worlds([1, 2], "cpu", 2, 1) == ([1, 2], {})


def test_host_ab_worlds_reads_the_device_and_cores_from_env_json() -> None:
    cpu_env = {"gpu": {"count": 0, "devices": []}, "cpu": {"usable_cores": 2}}
    gpu_env = {"gpu": {"count": 8, "devices": [{}] * 8}, "cpu": {"usable_cores": 2}}
    assert host_ab_worlds([1, 2], cpu_env, 2)[0] == [1]
    assert host_ab_worlds([1, 2], gpu_env, 2)[0] == [1, 2]


def test_an_undecided_row_becomes_info_and_a_screen_fail_a_warn_with_the_reason() -> None:
    _, skipped = cpu_ab_worlds([2], "cpu", 2, 2)
    scaling = Check(
        "scaling efficiency (ws=2)",
        "%",
        80.0,
        85.0,
        -5.0,
        "pts",
        status="UNKNOWN",
        metric=SCALING,
        decided_by="screen",
    )
    marked = mark_not_measured(comparison(screened(1, "PASS"), screened(2, "UNKNOWN"), scaling), skipped)
    one, two, eff = marked.checks
    assert one == screened(1, "PASS")
    assert two.status == "INFO" and two.decided_by == "host"
    assert two.note.startswith("not decided here: an A/B at ws=2")
    assert why(two) == "not A/B'd: too few cores for ws=2"  # in the row's status cell, not only its note
    assert "the screen said UNKNOWN (-3.0%)" in two.note
    assert eff.status == "INFO" and marked.verdict == "PASS"
    failed = mark_not_measured(comparison(screened(2, "FAIL", -12.0)), skipped)
    assert failed.checks[0].status == "WARN" and "the screen said FAIL (-12.0%)" in failed.checks[0].note


def test_a_row_needing_no_decision_keeps_its_status_and_says_why_no_ab_ran() -> None:
    _, skipped = cpu_ab_worlds([2], "cpu", 2, 2)
    new = screened(2, "NEW", None)
    (marked,) = mark_not_measured(comparison(new), skipped).checks
    assert marked.status == "NEW" and marked.note.startswith("not decided here: an A/B at ws=2")
    assert "the screen said NEW;" in marked.note
    assert mark_not_measured(comparison(new), {}).checks == [new]
