"""The creep row ("tokens/s since anchor") through the compare stage, on a real run's files.

tests/unit/stack_run/ holds env.json and metrics-ws1/2.json of one real run, as `benchgate run` wrote
them (tests/support/stack_repo.py's stack of 24 layers: `--steps 30 --warmup 3 --world-sizes 1,2 --no-eval`).
Slower runs are that run with every step taking longer (the drift reference untouched: the host did
not change). The baseline store's history, whose spread is the noise every row is judged by, is the
run's own figures 0.5% apart, so each case below is decided by its change, not by this host's load.
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness import make_config
from typer.testing import CliRunner

from benchgate.ab.rows import apply_ab, undecided_world_sizes
from benchgate.checks.creep import creep_checks, with_creep
from benchgate.checks.stage import stage_compare
from benchgate.cli.main import app
from benchgate.config import ABConfig, RunConfig
from benchgate.errors import EXIT_BAD_INPUT, BadInputError, BaselineError
from benchgate.kit.files import read_json, write_json
from benchgate.publish.ci_report import junit_xml, summary_markdown
from benchgate.results.bundle import load_bundle
from benchgate.results.comparison import CREEP, TIMING, Comparison, load_comparison
from benchgate.results.figures import corrected_mean, mean_step_time
from benchgate.store.anchor import anchor_location, clear_anchor, find_anchor, save_anchor
from benchgate.store.baseline import save_baseline

REAL_RUN = Path(__file__).with_name("stack_run")
ANCHOR, BEFORE, NOW = "a" * 40, "b" * 40, "c" * 40
_TIMES = ("max", "mean", "min", "p10", "p50", "p50_ci_high", "p50_ci_low", "p90", "std")
_SWAPPED = {"max": "min", "min": "max", "p10": "p90", "p90": "p10", "p50_ci_low": "p50_ci_high"}
_SWAPPED["p50_ci_high"] = "p50_ci_low"


def slowed(metrics: dict[str, Any], factor: float) -> dict[str, Any]:
    """A metrics file of the same run with every step `factor` times as long (samples and summaries)."""
    m = copy.deepcopy(metrics)
    samples = m["samples"]
    samples["step_time_s"] = [t * factor for t in samples["step_time_s"]]
    samples["step_time_s_per_rank"] = [[t * factor for t in rank] for rank in samples["step_time_s_per_rank"]]
    samples["tokens_per_s"] = [r / factor for r in samples["tokens_per_s"]]
    m["step_time_s"] = {k: v * factor if k in _TIMES else v for k, v in m["step_time_s"].items()}
    rates = m["tokens_per_s"]
    m["tokens_per_s"] = {
        k: rates[_SWAPPED.get(k, k)] / factor if k in _TIMES and k != "std" else v for k, v in rates.items()
    }
    m["tokens_per_s"]["std"] = rates["std"] / factor
    return m


def real_run(where: Path, commit: str, slower: float = 1.0, **changes: Any) -> Path:
    """A copy of the recorded run at `commit`, every step `slower` times as long; `changes` replace
    fields of each metrics file (machine_profile goes into env.json too)."""
    where.mkdir(parents=True)
    env = read_json(REAL_RUN / "env.json")
    env["git"]["commit"] = commit
    env["machine_profile"] = changes.get("machine_profile", env["machine_profile"])
    write_json(where / "env.json", env)
    for path in sorted(REAL_RUN.glob("metrics-ws*.json")):
        write_json(where / path.name, slowed(read_json(path), slower) | changes)
    return where


def noise_history(run_dir: Path) -> list[dict[str, Any]]:
    """Three earlier baseline runs 0.5% apart: history.json rows of the run's own run-level figures."""
    run = load_bundle(run_dir)
    rows = []
    for f in (0.995, 1.0, 1.005):
        p50 = {}
        for ws, m in run.metrics.items():
            samples = m["samples"]
            figures = {"mean_step_time_s": mean_step_time(samples["step_time_s"]) * f}
            figures["mean_step_time_per_reference"] = float(corrected_mean(samples) or 0) * f
            p50[str(ws)] = figures
        rows.append({"commit": ANCHOR, "p50": p50})
    return rows


def gate(tmp_path: Path, tolerance: float) -> RunConfig:
    return make_config(tmp_path, gate={"tolerances": {"throughput_drop_pct": tolerance}})


def store(config: RunConfig, tmp_path: Path, baseline: Path | None, anchor: Path | None) -> None:
    """The baseline store as a run finds it: `baseline` (with the noise history) and the pinned `anchor`."""
    if baseline is not None:
        history = noise_history(baseline)
        save_baseline(load_bundle(baseline), config.gate.baseline_dir, "test", history=history)
    if anchor is not None:
        meta = {"mlflow_run_id": "r" * 32, "tracking_uri": "http://mlflow.example"}
        save_anchor(load_bundle(anchor), config.gate.baseline_dir, "release 1.0", time.time(), meta)


def rows(comparison: Comparison, metric: str) -> dict[int, Any]:
    return {c.world_size: c for c in comparison.checks if c.metric == metric}


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
