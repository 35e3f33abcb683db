"""Creep decided by A/B (ab/creep_ab.py): which creep rows go to an A/B, and what its outcome makes of them.

The runs are tests/data/stack_run/'s real files (tests/support/creep_runs.py, as test_creep.py uses
them: every step of a later commit slower by a factor); the A/B outcomes are real ab.json files that
`benchgate run` wrote (tests/unit/ab/ab_run/: `slower` FAILed in 3 rounds, `same` stayed UNKNOWN after
8). That the A/B really runs from the A/B stage and its FAIL fails the gate is
tests/gate/test_creep_scenario.py's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from creep_runs import ANCHOR, BEFORE, NOW, gate, real_run, rows, store

from benchgate.ab import creep_ab
from benchgate.ab.runner import Side
from benchgate.ab.stage import worlds_for_ab
from benchgate.checks.creep import ANCHOR_COMMIT, NO_AB
from benchgate.checks.stage import stage_compare
from benchgate.errors import BenchgateError
from benchgate.kit.files import read_json, write_json
from benchgate.results.comparison import CREEP, TIMING, Comparison

AB_RUN = Path(__file__).with_name("ab_run")


def screened(tmp_path: Path, anchor_commit: str = ANCHOR) -> Comparison:
    """Two commits each 7% slower than the one before, tolerance 10%: timing PASS, creep screen FAIL."""
    config = gate(tmp_path, tolerance=10.0)
    anchor = real_run(tmp_path / "anchor", anchor_commit)
    if not anchor_commit:
        env = read_json(anchor / "env.json")
        del env["git"]["commit"]
        write_json(anchor / "env.json", env)
    before = real_run(tmp_path / "before", BEFORE, slower=1 / 0.93)
    now = real_run(tmp_path / "now", NOW, slower=1 / 0.93**2)
    store(config, tmp_path, before, anchor)
    comparison, _, _ = stage_compare(config, now)
    return comparison


def outcome(name: str, world_size: int = 1) -> dict[str, object]:
    saved = read_json(AB_RUN / name / "ab" / "ws1" / "ab.json")
    return saved | {"world_size": world_size}


def test_a_screen_fail_names_the_anchor_commit_and_sends_the_row_to_an_ab(tmp_path: Path) -> None:
    comparison = screened(tmp_path)
    creep = rows(comparison, CREEP)
    assert {ws: (c.status, c.decided_by) for ws, c in creep.items()} == {
        1: ("FAIL", "screen"),
        2: ("FAIL", "screen"),
    }
    assert f"{ANCHOR_COMMIT}{ANCHOR}" in creep[1].note
    assert creep_ab.pending(comparison) == {1: ANCHOR, 2: ANCHOR}
    # The timing rows PASSed: the A/B stage runs for the creep rows alone, and no per-commit A/B is redone.
    assert {c.status for c in rows(comparison, TIMING).values()} == {"PASS"}
    assert worlds_for_ab(comparison, None, base_available=True) == [1, 2]
    assert creep_ab.timing_worlds(comparison, [1, 2]) == []
    # The A/B stage needs the per-commit base checked out to start at all.
    assert worlds_for_ab(comparison, None, base_available=False) == []


def test_ab_fail_fails_the_row_pass_passes_it_unknown_is_info(tmp_path: Path) -> None:
    comparison = screened(tmp_path)
    config = gate(tmp_path, tolerance=10.0)
    failed = creep_ab.apply_creep_ab(comparison, outcome("slower"), config)
    row = rows(failed, CREEP)[1]
    assert (row.status, row.decided_by) == ("FAIL", "ab") and failed.verdict == "FAIL"
    assert row.note.startswith(f"since the anchor (commit {ANCHOR[:12]}): -13.5%")  # next_steps reads it
    assert "by A/B" in row.note and "the screen said FAIL (-13.5%)" in row.note
    assert row.change == pytest.approx(read_json(AB_RUN / "slower/ab/ws1/ab.json")["decision"]["change_pct"])
    assert rows(failed, CREEP)[2].decided_by == "screen"  # ws=2 is its own A/B's

    # The A/B that could not decide: the same run's rounds, as an UNKNOWN (their saved decision is the
    # rule's, which now answers by the estimate at the last look).
    unknown = outcome("same")
    unknown["decision"] = unknown["decision"] | {"status": "UNKNOWN", "reason": "undecided after 8 rounds"}
    both = creep_ab.apply_creep_ab(comparison, unknown, config)
    both = creep_ab.apply_creep_ab(both, unknown | {"world_size": 2}, config)
    undecided = rows(both, CREEP)
    assert {ws: (c.status, c.decided_by) for ws, c in undecided.items()} == {
        1: ("INFO", "ab"),
        2: ("INFO", "ab"),
    }
    assert "undecided by A/B, shown for information (not gated)" in undecided[1].note
    assert both.verdict == "PASS" and creep_ab.pending(both) == {}

    passed_outcome = outcome("same")
    passed_outcome["decision"] = passed_outcome["decision"] | {"status": "PASS", "reason": "within -10%"}
    passed = rows(creep_ab.apply_creep_ab(comparison, passed_outcome, config), CREEP)[1]
    assert passed.status == "PASS" and "within -10% of the anchor's code with confidence" in passed.note


def test_without_an_ab_the_screen_fail_stands_and_says_why(tmp_path: Path) -> None:
    comparison = screened(tmp_path)
    config = gate(tmp_path, tolerance=10.0)
    tried: list[str] = []

    def cannot(sha: str) -> Side:
        tried.append(sha)
        raise BenchgateError(f"file:///nowhere does not hold the anchor's commit {sha[:12]}")

    decided = creep_ab.decide_creep(config, tmp_path / "now", comparison, [1, 2], Side("candidate"), cannot)
    assert tried == [ANCHOR]  # one checkout for both world sizes
    for row in rows(decided, CREEP).values():
        assert row.status == "FAIL" and row.decided_by == "screen"
        assert f"{NO_AB}: file:///nowhere does not hold the anchor's commit {ANCHOR[:12]}" in row.note
        assert "the screen's FAIL stands" in row.note and ANCHOR_COMMIT not in row.note
    assert creep_ab.pending(decided) == {}  # not sent again


def test_an_anchor_without_a_commit_fails_by_the_screen_and_says_so(tmp_path: Path) -> None:
    comparison = screened(tmp_path, anchor_commit="")
    row = rows(comparison, CREEP)[1]
    assert row.status == "FAIL" and f"{NO_AB}: the anchor recorded no commit" in row.note
    assert creep_ab.pending(comparison) == {}


def test_anchor_checkout_refuses_what_it_cannot_check_out(tmp_path: Path) -> None:
    with pytest.raises(BenchgateError, match="names no repository"):
        creep_ab.anchor_checkout({}, tmp_path)(ANCHOR)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with pytest.raises(BenchgateError, match=f"does not hold the anchor's commit {ANCHOR[:12]}"):
        creep_ab.anchor_checkout({"source": {"repository": f"file://{repo}"}}, tmp_path / "ws")(ANCHOR)
