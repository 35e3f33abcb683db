"""The creep row ("tokens/s since anchor") through the compare stage, on a real run's files.

tests/data/stack_run/ holds env.json and metrics-ws1/2.json of one real run, as `benchgate run` wrote
them (tests/support/stack_repo.py's stack of 24 layers: `--steps 30 --warmup 3 --world-sizes 1,2 --no-eval`).
Slower runs are that run with every step taking longer (the drift reference untouched: the host did
not change). The baseline store's history, whose spread is the noise every row is judged by, is the
run's own figures 0.5% apart, so each case below is decided by its change, not by this host's load.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from creep_runs import ANCHOR, BEFORE, NOW, gate, real_run, rows, store
from typer.testing import CliRunner

from benchgate.ab.rows import apply_ab, undecided_world_sizes
from benchgate.checks.creep import creep_checks, with_creep
from benchgate.checks.stage import stage_compare
from benchgate.cli.main import app
from benchgate.config import ABConfig
from benchgate.errors import EXIT_BAD_INPUT, BadInputError, BaselineError
from benchgate.kit.files import read_json
from benchgate.publish.ci_report import junit_xml, summary_markdown
from benchgate.results.bundle import load_bundle
from benchgate.results.comparison import CREEP, TIMING, load_comparison
from benchgate.store.anchor import anchor_location, clear_anchor, find_anchor, save_anchor


def test_creep_fails_where_each_commit_passed(tmp_path: Path) -> None:
    # Two commits, each 7% slower in tokens/s than the one before: each within 10%, together -13.5%.
    config = gate(tmp_path, tolerance=10.0)
    anchor = real_run(tmp_path / "anchor", ANCHOR)
    before = real_run(tmp_path / "before", BEFORE, slower=1 / 0.93)
    now = real_run(tmp_path / "now", NOW, slower=1 / 0.93**2)
    store(config, tmp_path, before, anchor)
    comparison, _, _ = stage_compare(config, now)

    timing, creep = rows(comparison, TIMING), rows(comparison, CREEP)
    assert {ws: c.status for ws, c in timing.items()} == {1: "PASS", 2: "PASS"}
    assert {ws: c.status for ws, c in creep.items()} == {1: "FAIL", 2: "FAIL"}
    assert comparison.verdict == "FAIL" and comparison.exit_code == 1
    row = creep[1]
    assert row.name == "tokens/s since anchor (ws=1)" and row.decided_by == "screen"
    assert row.change == pytest.approx(-13.5, abs=0.05)
    assert row.ci_low is not None and row.ci_high is not None and row.ci_high < -10.0
    assert f"since the anchor (commit {ANCHOR[:12]}): -13.5% [" in row.note
    # Beside its world size's timing row, in the terminal's, compare.md's and compare.json's order.
    names = [c.name for c in comparison.checks]
    assert names.index("tokens/s since anchor (ws=2)") == names.index("tokens/s (ws=2)") + 1
    assert load_comparison(now / "compare.json").checks == comparison.checks
    assert "| tokens/s since anchor (ws=1) [2] | 2," in (now / "compare.md").read_text()
    assert "`benchgate baseline anchor RUN_ID`" in (now / "compare.md").read_text()
    # CI: a failed test case of its own, and the reason in the summary a pull request shows.
    junit = junit_xml(comparison)
    assert 'name="tokens/s since anchor (ws=1)"' in junit and 'failures="2"' in junit
    assert f"- tokens/s since anchor (ws=1): FAIL. since the anchor (commit {ANCHOR[:12]})" in (
        summary_markdown(comparison, {})
    )


def test_creep_passes_within_tolerance_and_the_anchors_own_code_is_unchanged(tmp_path: Path) -> None:
    config = gate(tmp_path, tolerance=10.0)
    anchor = real_run(tmp_path / "anchor", ANCHOR)
    store(config, tmp_path, anchor, anchor)
    elsewhere, _, _ = stage_compare(config, real_run(tmp_path / "now", NOW, slower=1 / 0.99))
    assert [(c.status, c.decided_by) for c in rows(elsewhere, CREEP).values()] == [("PASS", "screen")] * 2
    assert "within -10% of the anchor with confidence" in rows(elsewhere, CREEP)[1].note
    assert elsewhere.verdict == "PASS"
    # The anchor's own commit from a clean tree, same fingerprints: unchanged code, as for timing rows.
    own, _, _ = stage_compare(config, real_run(tmp_path / "own", ANCHOR, slower=1.02))
    assert [(c.status, c.decided_by) for c in rows(own, CREEP).values()] == [("PASS", "unchanged")] * 2


def test_an_undecided_creep_row_is_info_and_never_makes_the_verdict_unknown(tmp_path: Path) -> None:
    config = gate(tmp_path, tolerance=10.0)
    anchor = real_run(tmp_path / "anchor", ANCHOR)
    # 10% slower than the anchor: exactly at the tolerance, which no noise can call beyond or within.
    before = real_run(tmp_path / "before", BEFORE, slower=1 / 0.9)
    store(config, tmp_path, before, anchor)
    comparison, _, _ = stage_compare(config, real_run(tmp_path / "now", NOW, slower=1 / 0.9))
    creep = rows(comparison, CREEP)
    assert [c.status for c in creep.values()] == ["INFO", "INFO"]
    assert "undecided, shown for information (not gated): the interval straddles -10%" in creep[1].note
    assert [c.status for c in rows(comparison, TIMING).values()] == ["PASS", "PASS"]
    assert comparison.verdict == "PASS" and comparison.exit_code == 0
    assert "since anchor" not in junit_xml(comparison)  # INFO judges nothing: no test case

    # No baseline here (a profile's first run): the noise is unknown, the rows NEW, the verdict PASS.
    fresh = gate(tmp_path / "fresh", tolerance=10.0)
    store(fresh, tmp_path, None, anchor)
    first, _, _ = stage_compare(fresh, real_run(tmp_path / "first", NOW, slower=1.5))
    assert [c.status for c in rows(first, CREEP).values()] == ["INFO", "INFO"]
    assert "run-to-run noise unknown (0 of 3 earlier baseline runs)" in rows(first, CREEP)[1].note
    assert first.verdict == "PASS"


def test_no_anchor_no_creep_rows(tmp_path: Path) -> None:
    config = gate(tmp_path, tolerance=10.0)
    before = real_run(tmp_path / "before", BEFORE)
    store(config, tmp_path, before, None)
    comparison, _, baseline = stage_compare(config, real_run(tmp_path / "now", NOW, slower=1.5))
    assert rows(comparison, CREEP) == {} and rows(comparison, TIMING)
    current = load_bundle(tmp_path / "now")
    assert with_creep(comparison, None, baseline, current, config.gate.tolerances) is comparison


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"machine_profile": "gpu-H100-x8_torch2.13.0"}, "machine profile", id="profile"),
        pytest.param({"precision": "bf16"}, "precision='bf16', this run has 'fp32'", id="precision"),
        pytest.param({"tokens_per_step_global": 64}, "tokens_per_step_global=64", id="tokens-per-step"),
    ],
)
def test_an_anchor_that_measured_something_else_is_refused(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    config = gate(tmp_path, tolerance=10.0)
    anchor = load_bundle(real_run(tmp_path / "anchor", ANCHOR, **changes))
    now = real_run(tmp_path / "now", NOW)
    with pytest.raises(BaselineError) as refused:
        creep_checks(anchor, None, load_bundle(now), config.gate.tolerances)
    assert expected in str(refused.value) and refused.value.exit_code == EXIT_BAD_INPUT
    assert "the pinned anchor:" in str(refused.value)
    assert "`benchgate baseline anchor --clear` removes the anchor" in str(refused.value)
    if "machine_profile" not in changes:  # stored under this run's profile: compare itself refuses
        save_anchor(anchor, config.gate.baseline_dir, "test", time.time(), {})
        with pytest.raises(BaselineError, match=r"the pinned anchor: baseline .*/\.anchors/"):
            stage_compare(config, now)


def test_ab_replaces_timing_rows_and_leaves_creep_rows_alone(tmp_path: Path) -> None:
    config = gate(tmp_path, tolerance=10.0)
    anchor = real_run(tmp_path / "anchor", ANCHOR)
    store(config, tmp_path, real_run(tmp_path / "before", BEFORE, slower=1 / 0.93), anchor)
    comparison, _, _ = stage_compare(config, real_run(tmp_path / "now", NOW, slower=1 / 0.93**2))
    # The timing rows PASSed: nothing for A/B to decide, though the creep rows FAIL.
    assert undecided_world_sizes(comparison) == [] and undecided_world_sizes(comparison, True) == []
    screened = replace(
        comparison,
        checks=[replace(c, status="UNKNOWN") if c.metric == TIMING else c for c in comparison.checks],
    )
    assert undecided_world_sizes(screened) == [1, 2]
    outcome = {
        "world_size": 1,
        "base": {"description": f"base {BEFORE[:12]}"},
        "seconds": 60.0,
        "decision": {
            "status": "PASS",
            "rounds": 4,
            "change_pct": -6.5,
            "ci_low_pct": -8.0,
            "ci_high_pct": -5.0,
            "mde_pct": 4.0,
            "round_sd_pct": 1.0,
            "reason": "within -10% with confidence",
        },
        "rounds": [{"base_tokens_per_s": 2000.0, "candidate_tokens_per_s": 1870.0}] * 4,
    }
    decided = apply_ab(screened, outcome, config.gate.tolerances, ABConfig())
    assert decided.timing(1) is not None and decided.timing(1).decided_by == "ab"  # type: ignore[union-attr]
    assert rows(decided, CREEP) == rows(comparison, CREEP)
    assert [c.name for c in decided.checks] == [c.name for c in comparison.checks]
    assert decided.verdict == "FAIL"  # the creep rows' FAIL stands


def test_anchor_store_round_trips_and_clear_removes_only_what_it_wrote(tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    run = load_bundle(real_run(tmp_path / "anchor", ANCHOR))
    profile = run.machine_profile
    assert find_anchor(baselines, profile, "stack") is None
    location = save_anchor(run, baselines, "release 1.0", 1234.5, {"mlflow_run_id": "r1"})
    assert location == anchor_location(baselines, profile, "stack") and location.is_symlink()
    found = find_anchor(baselines, profile, "stack")
    assert found is not None and found.metrics == run.metrics and found.history == []
    meta = read_json(location / "baseline.json")
    assert (meta["anchor"], meta["mlflow_run_id"], meta["created_unix"], meta["reason"]) == (
        True,
        "r1",
        1234.5,
        "release 1.0",
    )
    # Not a baseline: the baseline store beside it is untouched.
    assert not (baselines / profile).exists()
    mine = location.parent / "notes.txt"
    mine.write_text("not benchgate's")
    assert clear_anchor(baselines, profile) == ["stack"]
    assert find_anchor(baselines, profile, "stack") is None
    assert sorted(p.name for p in location.parent.iterdir()) == [".stack.lock", "notes.txt"]
    assert clear_anchor(baselines, profile, "stack") == []
    with pytest.raises(BadInputError, match=r"--workload: got '\.\./x'"):
        clear_anchor(baselines, profile, "../x")


def test_anchor_command_refuses_what_it_cannot_do_before_any_connection(tmp_path: Path) -> None:
    runner = CliRunner()
    nothing = runner.invoke(app, ["baseline", "anchor"])
    assert nothing.exit_code == 2 and "RUN_ID: got nothing" in nothing.output
    both = runner.invoke(app, ["baseline", "anchor", "0" * 32, "--clear"])
    assert both.exit_code == 2 and "not both" in both.output
    stray = runner.invoke(app, ["baseline", "anchor", "0" * 32, "--workload", "w"])
    assert stray.exit_code == 2 and "--workload: got 'w' without --clear" in stray.output
    escape = runner.invoke(app, ["baseline", "anchor", "--clear", "--profile", "p", "--workload", "../x"])
    assert escape.exit_code == 2 and "--workload: got '../x'" in escape.output
