"""The gate's decisions on synthetic bundles: one row per case, and the refusals."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bundles import PROFILE, bench, bundle, counting, evaluation

from benchgate.ab.rows import apply_ab, undecided_world_sizes
from benchgate.checks.compare import compare, without_reachable_baseline
from benchgate.checks.stage import write_comparison
from benchgate.config import Tolerances
from benchgate.errors import EXIT_BAD_INPUT, BaselineError
from benchgate.kit.files import read_json
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import Comparison, load_comparison
from benchgate.results.figures import scaling_efficiency


def statuses(baseline: Bundle | None, current: Bundle, tol: Tolerances | None = None) -> dict[str, str]:
    return {c.name: c.status for c in compare(baseline, current, tol or Tolerances()).checks}


def test_compare_same_code_passes() -> None:
    result = compare(bundle(1), bundle(2), Tolerances())
    assert result.verdict == "PASS"
    assert result.exit_code == 0
    assert {c.status for c in result.checks} <= {"PASS", "INFO"}


@pytest.mark.parametrize(
    ("current", "row", "status"),
    [
        pytest.param(bundle(2, step_s=0.12), "tokens/s (ws=1)", "FAIL", id="20pct-slower"),
        pytest.param(bundle(2, step_s=0.101), "tokens/s (ws=1)", "PASS", id="1pct-within-tolerance"),
        pytest.param(bundle(2, step_s=0.105), "tokens/s (ws=1)", "UNKNOWN", id="5pct-at-the-edge"),
        pytest.param(bundle(2, step_s=0.08), "tokens/s (ws=1)", "PASS", id="faster-passes"),
        pytest.param(
            bundle(2, ws1=bench(1, 0.1, 2, memory_mib=460)), "peak memory (ws=1)", "WARN", id="memory-15pct"
        ),
        pytest.param(
            bundle(2, ws1=bench(1, 0.1, 2, memory_mib=430)), "peak memory (ws=1)", "PASS", id="memory-7pct"
        ),
        pytest.param(
            bundle(2, ws1=bench(1, 0.1, 2, loss_slope=0.01)), "loss slope (ws=1)", "FAIL", id="loss-rising"
        ),
        pytest.param(bundle(2, step_s_ws2=0.13), "scaling efficiency (1->2)", "WARN", id="scaling-drop"),
        pytest.param(
            # One seed on each side: no seed-to-seed spread to judge by (checks/quality.py).
            bundle(2, eval=evaluation(perplexity=2.45)),
            "perplexity (held-out)",
            "UNKNOWN",
            id="ppl-2pct",
        ),
        pytest.param(
            bundle(2, eval=evaluation(perplexity=2.42)), "perplexity (held-out)", "PASS", id="ppl-1pct"
        ),
        # No per-item records (evals from before them): shown, not judged (tests/unit/checks/test_quality.py).
        pytest.param(bundle(2, eval=evaluation(facts=25.0)), "probe facts accuracy", "INFO", id="probe-drop"),
        pytest.param(bundle(2, eval=evaluation(facts=30.0)), "probe facts accuracy", "INFO", id="probe-1pt"),
    ],
)
def test_compare_case(current: Bundle, row: str, status: str) -> None:
    assert statuses(bundle(1), current)[row] == status


def test_compare_has_one_timing_row_per_world_size() -> None:
    names = [c.name for c in compare(bundle(1), bundle(2), Tolerances()).checks if c.metric == "tokens_per_s"]
    assert names == ["tokens/s (ws=1)", "tokens/s (ws=2)"]


def test_compare_fail_sets_verdict_and_exit_code_1() -> None:
    result = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    assert result.verdict == "FAIL"
    assert result.exit_code == 1
    row = next(c for c in result.checks if c.name == "tokens/s (ws=1)")
    assert row.change == pytest.approx(-16.7, abs=1.5)
    assert row.ci_low is not None and row.ci_high is not None and row.ci_low < row.change < row.ci_high
    assert row.ci_high < -5
    assert "FAIL if the one-sided 95% upper bound" in row.rule
    assert "PASS if" in row.rule and "UNKNOWN" in row.rule


def test_compare_without_noise_history_is_unknown_with_exit_4_not_a_pass() -> None:
    base = bundle(1)
    base.history = base.history[:1]
    result = compare(base, bundle(2, step_s=0.15), Tolerances())
    row = next(c for c in result.checks if c.name == "tokens/s (ws=1)")
    assert row.status == "UNKNOWN"
    assert "run-to-run noise unknown (1 of 3 earlier baseline runs)" in row.note
    assert result.verdict == "UNKNOWN" and result.exit_code == 4


def test_compare_a_40pct_slowdown_is_never_excused_by_noisy_history() -> None:
    # The case that once returned WARN "within run-to-run noise; noise floor +48%": a raw history
    # of 3 runs that drifted by 20%. Judged by drift-corrected figures, the slowdown is not noise.
    base = with_reference(bundle(1), 0.010)
    base.history = [
        {"p50": {"1": {"mean_step_time_s": s, "mean_step_time_per_reference": r}}}
        for s, r in ((0.08, 10.1), (0.1, 10.0), (0.12, 9.9))
    ]
    current = with_reference(bundle(2, step_s=0.14), 0.010)
    row = next(c for c in compare(base, current, Tolerances()).checks if c.name == "tokens/s (ws=1)")
    assert row.status == "FAIL"
    assert "drift-corrected mean" in row.note


def test_compare_noisy_history_makes_a_moderate_slowdown_unknown_not_pass() -> None:
    base = bundle(1)
    base.history = [{"p50": {"1": {"mean_step_time_s": s}}} for s in (0.085, 0.1, 0.115, 0.1)]
    row = next(
        c for c in compare(base, bundle(2, step_s=0.112), Tolerances()).checks if c.name == "tokens/s (ws=1)"
    )
    assert row.status == "UNKNOWN"
    assert "straddles" in row.note


def with_reference(b: Bundle, host_s: float) -> Bundle:
    for metrics in b.metrics.values():
        metrics["samples"]["reference_s"] = [host_s] * len(metrics["samples"]["step_time_s"])
    return b


def test_compare_slower_host_is_not_slower_code() -> None:
    # Steps 20% slower, and the drift reference 20% slower too: the host slowed, not the code. The
    # drift-corrected figure PASSes, but the raw one FAILs and a PASS needs both: the row is UNKNOWN
    # (for A/B to decide), never a FAIL of code that did not change.
    base = with_reference(bundle(1), 0.010)
    base.history = [
        {"p50": {"1": {"mean_step_time_s": 0.1 * f, "mean_step_time_per_reference": 10 * f}}}
        for f in (0.99, 1.0, 1.01)
    ]
    current = with_reference(bundle(2, step_s=0.12, step_s_ws2=0.132), 0.012)
    row = next(c for c in compare(base, current, Tolerances()).checks if c.name == "tokens/s (ws=1)")
    assert row.status == "UNKNOWN"
    assert "drift-corrected figure PASSes but the raw one does not (FAIL" in row.note
    assert "a PASS needs both" in row.note
    assert "decided on the drift-corrected mean over 3 earlier runs" in row.note
    assert "raw -16.9%, drift-reference kernel time +20.0% (the host)" in row.note


def test_compare_same_host_speed_passes_on_the_drift_corrected_figure() -> None:
    # The same speed and the same reference time: both figures PASS, so the row PASSes.
    base = with_reference(bundle(1), 0.010)
    base.history = [
        {"p50": {"1": {"mean_step_time_s": 0.1 * f, "mean_step_time_per_reference": 10 * f}}}
        for f in (0.99, 1.0, 1.01)
    ]
    current = with_reference(bundle(2), 0.010)
    row = next(c for c in compare(base, current, Tolerances()).checks if c.name == "tokens/s (ws=1)")
    assert row.status == "PASS", row.note
    assert "decided on the drift-corrected mean over 3 earlier runs" in row.note


def test_compare_without_baseline_reports_new_and_passes() -> None:
    result = compare(None, bundle(1), Tolerances())
    assert result.verdict == "PASS"
    assert "no baseline" in result.notes[0]
    assert statuses(None, bundle(1))["tokens/s (ws=1)"] == "NEW"


def test_compare_without_baseline_still_fails_a_rising_loss() -> None:
    result = compare(None, bundle(1, ws1=bench(1, 0.1, 1, loss_slope=0.02)), Tolerances())
    assert result.verdict == "FAIL"


def test_compare_refuses_another_machine_profile() -> None:
    with pytest.raises(BaselineError, match="different machines are never compared") as info:
        compare(
            bundle(1, profile="H100-80GB-HBM3x8_drv550_cu12.4_torch2.4.0_nccl2.21"), bundle(2), Tolerances()
        )
    assert "H100-80GB-HBM3x8" in str(info.value) and PROFILE in str(info.value)


def test_compare_refuses_another_precision() -> None:
    base = bundle(1)
    base.metrics[1] = copy.deepcopy(base.metrics[1]) | {"precision": "bf16"}
    with pytest.raises(BaselineError, match="precision='bf16'"):
        compare(base, bundle(2), Tolerances())


def test_compare_skips_eval_when_settings_differ() -> None:
    other = evaluation()
    other["settings"] = {"train_steps": 10, "seed": 1}
    result = compare(bundle(1, eval=other), bundle(2, eval=evaluation(perplexity=9.0)), Tolerances())
    assert statuses(bundle(1, eval=other), bundle(2))["perplexity (held-out)"] == "NEW"
    assert any("eval settings or device differ" in n for n in result.notes)


def test_compare_skips_eval_run_on_another_device() -> None:
    cpu, gpu = evaluation() | {"device": "cpu"}, evaluation(perplexity=9.0) | {"device": "cuda:0"}
    assert statuses(bundle(1, eval=cpu), bundle(2, eval=gpu))["perplexity (held-out)"] == "NEW"


def test_scaling_efficiency_is_throughput_ratio_over_n() -> None:
    # As bench.py writes them: 10 tokens per rank per step, 0.1 s steps at ws=1 and 0.1333 s at ws=4.
    metrics = {
        1: {"tokens_per_step_global": 10, "samples": {"tokens_per_s": [100.0] * 3, "step_time_s": [0.1] * 3}},
        4: {
            "tokens_per_step_global": 40,
            "samples": {"tokens_per_s": [300.0] * 3, "step_time_s": [0.4 / 3] * 3},
        },
    }
    assert scaling_efficiency(metrics) == (4, pytest.approx(0.75))
    # One ws=4 step in three twice as slow: tokens/s at 4 falls by a quarter, and so does the efficiency.
    metrics[4]["samples"]["step_time_s"] = [0.4 / 3, 0.4 / 3, 0.8 / 3]
    assert scaling_efficiency(metrics) == (4, pytest.approx(0.75 * 0.75))
    assert scaling_efficiency({1: metrics[1]}) is None


def test_undecided_world_sizes_are_those_the_screen_did_not_pass() -> None:
    assert undecided_world_sizes(compare(bundle(1), bundle(2, step_s=0.12), Tolerances())) == [1]
    assert undecided_world_sizes(compare(bundle(1), bundle(2), Tolerances())) == []


def ab_outcome(status: str, change: float, ws: int = 1) -> dict[str, object]:
    rounds = [
        {"base_tokens_per_s_p50": 5120.0, "candidate_tokens_per_s_p50": 5120.0 * (1 + change / 100)}
    ] * 4
    decision = {
        "status": status,
        "rounds": 4,
        "change_pct": change,
        "ci_low_pct": change - 1,
        "ci_high_pct": change + 1,
        "ci_level": 0.995,
        "mde_pct": 7.0,
        "round_sd_pct": 1.0,
        "reason": "r",
    }
    return {
        "world_size": ws,
        "base": {"description": "base 0123abcd"},
        "seconds": 61.0,
        "decision": decision,
        "rounds": rounds,
    }


def test_apply_ab_replaces_the_screen_row_and_decides_the_verdict() -> None:
    from benchgate.config import ABConfig

    screened = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    decided = apply_ab(screened, ab_outcome("PASS", -1.0), Tolerances(), ABConfig())
    rows = [c for c in decided.checks if c.name == "tokens/s (ws=1)"]
    assert len(rows) == 1 and rows[0].decided_by == "ab" and rows[0].status == "PASS"
    assert "screen: FAIL" in rows[0].note and "A/B vs base 0123abcd, 4 rounds" in rows[0].note
    assert "minimum detectable slowdown 7.0%" in rows[0].note
    assert decided.verdict == "PASS"
    assert apply_ab(screened, ab_outcome("FAIL", -12.0), Tolerances(), ABConfig()).exit_code == 1
    assert apply_ab(screened, ab_outcome("UNKNOWN", -4.0), Tolerances(), ABConfig()).exit_code == 4


def test_apply_ab_reads_the_p50_rates_of_ab_files_saved_before_whole_round_rates() -> None:
    from benchgate.config import ABConfig

    screened = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    row = apply_ab(screened, ab_outcome("FAIL", -12.0), Tolerances(), ABConfig()).timing(1)
    assert row is not None and (row.baseline, row.current) == (5120.0, pytest.approx(5120.0 * 0.88))


def test_timing_rows_show_tokens_per_s_over_the_capped_mean_step_time() -> None:
    from benchgate.results.figures import mean_step_time

    base, current = bundle(1), bundle(2)
    times = current.metrics[1]["samples"]["step_time_s"]
    times[::5] = [t * 1.5 for t in times[::5]]  # every 5th step 50% slower: tokens/s -9%, its p50 ~0
    current.metrics[1]["samples"]["tokens_per_s"] = [512 / t for t in times]
    row = compare(base, current, Tolerances()).timing(1)
    assert row is not None
    assert row.baseline == pytest.approx(512 / mean_step_time(base.metrics[1]["samples"]["step_time_s"]))
    assert row.current == pytest.approx(512 / mean_step_time(times))
    assert row.change == pytest.approx(-9.1, abs=1.0) and row.status == "FAIL"


def test_without_a_reachable_baseline_nothing_is_new() -> None:
    first = compare(None, bundle(1), Tolerances())
    new = {c.name for c in first.checks if c.status == "NEW"}
    assert first.verdict == "PASS" and "tokens/s (ws=1)" in new
    blind = without_reachable_baseline(first, "connection refused")
    assert {c.name for c in blind.checks if c.status == "UNKNOWN"} == new
    # Rows that need no baseline (the loss slope, an absolute bound) keep their status.
    assert [c.status for c in blind.checks if c.name not in new] == [
        c.status for c in first.checks if c.name not in new
    ]
    assert blind.verdict == "UNKNOWN" and blind.exit_code == 4
    assert "connection refused" in blind.notes[-1] and first.checks[0].status == "NEW"  # a copy


# ---------------------------------------------------------------- compare.json read back


def written_comparison(run_dir: Path) -> tuple[Comparison, Path]:
    """A FAIL comparison as the compare stage writes it (compare.json and compare.md)."""
    comparison = compare(bundle(1), bundle(2, step_s=0.125), Tolerances())
    assert comparison.verdict == "FAIL"
    write_comparison(run_dir, comparison)
    return comparison, run_dir / "compare.json"


def test_compare_json_reads_back_as_the_comparison_written(tmp_path: Path) -> None:
    comparison, path = written_comparison(tmp_path)
    read = load_comparison(path)
    assert read == comparison
    assert (read.verdict, read.exit_code) == ("FAIL", 1)


def cut_short(data: dict[str, Any], path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def edited(change: Any) -> Any:
    def rewrite(data: dict[str, Any], path: Path) -> None:
        change(data)
        path.write_text(json.dumps(data))

    return rewrite


def fail_row(data: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in data["checks"] if c["status"] == "FAIL")


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        pytest.param(cut_short, "not valid JSON at line", id="truncated"),
        pytest.param(lambda data, path: path.unlink(), "file not found", id="missing"),
        pytest.param(
            edited(lambda d: d.pop("checks")), "checks: got nothing (Field required)", id="no-checks"
        ),
        pytest.param(
            edited(lambda d: fail_row(d).pop("status")),
            "status: got nothing (Field required)",  # never read as Check's default, PASS
            id="row-without-status",
        ),
        pytest.param(
            edited(lambda d: fail_row(d).update(stauts=fail_row(d).pop("status"))),
            "stauts: got 'FAIL' (Extra inputs are not permitted)",
            id="misspelt-status",
        ),
        pytest.param(
            edited(lambda d: fail_row(d).update(status="MAYBE")),
            "status: got 'MAYBE' (Input should be 'PASS', 'WARN', 'UNKNOWN', 'FAIL', 'NEW' or 'INFO')",
            id="unknown-status",
        ),
        pytest.param(
            edited(lambda d: d["checks"][0].update(current="8000")),
            "checks[0].current: got '8000' (Input should be a valid number)",
            id="number-as-text",
        ),
        pytest.param(edited(lambda d: d.update(checks=[[]])), "checks[0]: got []", id="row-not-object"),
        pytest.param(edited(lambda d: d.update(notes="x")), "notes: got 'x'", id="notes-not-list"),
        pytest.param(
            lambda data, path: path.write_text("[]"), "got [] (expected a JSON object)", id="not-object"
        ),
    ],
)
def test_a_damaged_compare_json_is_bad_input_naming_the_file_and_field(
    tmp_path: Path, damage: Any, named: str
) -> None:
    _, path = written_comparison(tmp_path)
    damage(read_json(path), path)
    with pytest.raises(BaselineError) as refused:
        load_comparison(path)
    assert refused.value.exit_code == EXIT_BAD_INPUT
    message = str(refused.value)
    assert message.startswith(f"{path}: ") and named in message, message
    assert "\n" not in message


def test_compare_with_history_too_noisy_for_floats_is_unknown_and_reads_back(tmp_path: Path) -> None:
    """Earlier runs six orders of magnitude apart (history.json allows it) at confidence 0.9999: the
    interval's upper bound leaves float range. The row is UNKNOWN, not an OverflowError, and the bound
    is stored as null (JSON has no Infinity)."""
    baseline = bundle(1)
    baseline.history = [
        {"p50": {"1": {"mean_step_time_s": s}, "2": {"mean_step_time_s": s}}} for s in (1e-6, 1.0, 1e6)
    ]
    comparison = compare(baseline, bundle(2), Tolerances(confidence=0.9999))
    timing = comparison.timing(1)
    assert timing is not None and timing.status == "UNKNOWN" and timing.ci_high == float("inf")
    write_comparison(tmp_path, comparison)
    read = load_comparison(tmp_path / "compare.json")
    assert read.timing(1) == replace(timing, ci_high=None)


def test_each_mfu_row_says_which_convention_it_follows() -> None:
    current = bundle(1)
    current.metrics[1]["mfu"] = {"dense_6n": 0.40, "attention_aware": 0.44, "counted": 0.43}
    rows = {c.name: c for c in compare(None, current, Tolerances()).checks if c.name.startswith("MFU")}
    assert sorted(rows) == ["MFU attention_aware (ws=1)", "MFU counted (ws=1)", "MFU dense_6n (ws=1)"]
    assert rows["MFU counted (ws=1)"].current == pytest.approx(43.0)
    notes = {name: row.note or "" for name, row in rows.items()}
    assert "Kaplan" in notes["MFU dense_6n (ws=1)"]
    assert "PaLM" in notes["MFU attention_aware (ws=1)"]
    assert "non-causal" in notes["MFU attention_aware (ws=1)"]
    assert "FlopCounterMode" in notes["MFU counted (ws=1)"] and "half" in notes["MFU counted (ws=1)"]
    assert all(c.status == "INFO" for c in rows.values())


def test_the_timing_rows_of_an_image_workload_name_images_per_second() -> None:
    from benchgate.config import ABConfig

    base, current = counting(bundle(1), "images"), counting(bundle(2, step_s=0.12), "images")
    screened = compare(base, current, Tolerances())
    row = screened.timing(1)
    assert row is not None and (row.name, row.unit) == ("images/s (ws=1)", "images/s")
    assert not any(c.name.startswith("tokens/s") for c in screened.checks)
    new = compare(None, counting(bundle(2), "images"), Tolerances()).timing(2)
    assert new is not None and (new.name, new.unit, new.status) == ("images/s (ws=2)", "images/s", "NEW")
    decided = apply_ab(screened, ab_outcome("FAIL", -12.0), Tolerances(), ABConfig()).timing(1)
    assert decided is not None and decided.decided_by == "ab" and decided.unit == "images/s"
    assert decided.name == "images/s (ws=1)"


def test_a_baseline_written_before_units_counts_tokens_and_compares_without_a_note() -> None:
    result = compare(counting(bundle(1), None), bundle(2), Tolerances())
    assert result.verdict == "PASS" and not any("unit" in note for note in result.notes)
    row = result.timing(1)
    assert row is not None and (row.name, row.unit) == ("tokens/s (ws=1)", "tok/s")


def test_runs_that_count_different_units_are_never_compared() -> None:
    with pytest.raises(BaselineError, match=r"unit='tokens', this run has 'images'.*counts different things"):
        compare(counting(bundle(1), None), counting(bundle(2), "images"), Tolerances())
