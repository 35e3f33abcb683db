"""One tokens/s per run wherever it is read, an A/B's pair shown as the A/B's own, and report.html showing
each A/B: over the files of real runs.

tests/unit/ab/ab_run/ holds what `benchgate run` wrote in a stack repository (tests/support/stack_repo.py;
`--steps 20 --warmup 3 --world-sizes 1 --no-eval --no-trace`, [gate.ab] as each config.json says) on a busy
2-core host:

    baseline/  the stored baseline: 12 layers, on main, `--update-baseline`
    slower/    16 layers, `--base HEAD~1` (the 12 layers): the A/B FAILed it at its first look (3 rounds,
               -36.1%); the screen against the one stored run had said UNKNOWN (+91.2%)
    same/      the same 16 layers in a docs-only commit, `--base HEAD~1`, 10% tolerance and up to 8 rounds:
               undecided until its last look, round 8 (round-to-round sd 15.1%), which decides by the
               estimate inside the indifference zone: PASS (+1.9%); the screen had said UNKNOWN (-35.7%)

Each ab.json's "decision" is the rule's over its saved rounds (ab/decision.decide_rounds): the rounds are
the run's; the decision is recomputed whenever the rule changes (the A/B rule v3 moved `same/` from
UNKNOWN to PASS and widened `slower/`'s first-look interval).

Each compare.json is as the A/B stage wrote it before a row kept the run's own figures: its timing row
holds the A/B's base and candidate (7,073 and 4,541 tok/s in slower/) where the stored baseline's
(3,296) and the run's bench figure (6,302, what MLflow and `benchgate history` show) belong.
`decided_by_ab` repeats what the A/B stage does after its rounds (ab/stage.py) on those saved rounds.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
from harness import TESTS_DIR, make_config
from mlflow_runs import logged

from benchgate.ab.decision import decide_rounds, look_rounds
from benchgate.ab.rows import apply_ab, apply_ab_scaling
from benchgate.ab.stage import fingerprints_unseen_by_ab, stored_baseline
from benchgate.checks import scaling
from benchgate.checks.compare import compare, scaling_row
from benchgate.checks.stage import stage_compare, write_comparison
from benchgate.checks.tables import footnote_lines, markdown, rows, table_rows
from benchgate.cli.history import HISTORY_COLUMNS
from benchgate.config import RunConfig, Tolerances
from benchgate.kit.files import read_json, write_json
from benchgate.publish.ab_report import ab_looks, read_ab
from benchgate.publish.plots import current_point, step_time_figure
from benchgate.publish.stage import write_report
from benchgate.results.bundle import Bundle, load_bundle
from benchgate.results.comparison import Check, Comparison, load_comparison
from benchgate.results.figures import (
    RUN_TOKENS_PER_S,
    bench_figures,
    run_figures,
    run_rate,
    run_tokens_per_s,
    scaling_efficiency,
)
from benchgate.store.baseline import save_baseline
from benchgate.tracking.read import history_point

AB_RUN = Path(__file__).with_name("ab_run")
STACK_RUN = TESTS_DIR / "data" / "stack_run"  # ws=1 and ws=2 of one real run (test_creep.py)


def run_config(tmp_path: Path, name: str) -> RunConfig:
    """The settings the run was judged by (its config.json's tolerances and A/B rounds), stores in
    tmp_path."""
    gate = read_json(AB_RUN / name / "config.json")["gate"]
    ab = {key: gate["ab"][key] for key in ("steps", "warmup", "min_rounds", "max_rounds", "min_measured_s")}
    return make_config(
        tmp_path,
        gate={"baseline_dir": str(tmp_path / "store"), "tolerances": gate["tolerances"], "ab": ab},
    )


def decided_by_ab(tmp_path: Path, name: str, stored: bool = True) -> tuple[RunConfig, Path]:
    """The run `name` compared with the stored baseline (none when not `stored`), then its saved A/B
    applied and written as the A/B stage does: the run's directory, and its config."""
    run = tmp_path / name
    shutil.copytree(AB_RUN / name, run)
    (run / "compare.json").unlink()  # the compare stage writes it anew, the A/B stage over it
    config = run_config(tmp_path, name)
    if stored:
        save_baseline(load_bundle(AB_RUN / "baseline"), config.gate.baseline_dir, "the 12-layer commit")
    comparison, current, _ = stage_compare(config, run)
    outcome = read_json(run / "ab" / "ws1" / "ab.json")
    unseen = fingerprints_unseen_by_ab(stored_baseline(config, current), current)
    comparison = apply_ab(comparison, outcome, config.gate.tolerances, config.gate.ab, unseen)
    write_comparison(run, apply_ab_scaling(comparison, {1: outcome}, config.gate.tolerances))
    return config, run


def rates(name: str) -> tuple[float, float, float, float]:
    """(stored baseline, this run's bench, A/B base, A/B candidate) tokens/s of run `name`."""
    stored = run_rate(read_json(AB_RUN / "baseline" / "metrics-ws1.json"))
    bench = run_rate(read_json(AB_RUN / name / "metrics-ws1.json"))
    rounds = read_json(AB_RUN / name / "ab" / "ws1" / "ab.json")["rounds"]
    base = statistics.fmean(r["base_tokens_per_s"] for r in rounds)
    candidate = statistics.fmean(r["candidate_tokens_per_s"] for r in rounds)
    return stored, bench, base, candidate


@pytest.mark.parametrize("name", ["slower", "same"])
def test_an_ab_row_keeps_the_stored_baseline_and_the_run_and_shows_the_ab_pair_beside_them(
    tmp_path: Path, name: str
) -> None:
    _, run = decided_by_ab(tmp_path, name)
    decision = read_json(run / "ab" / "ws1" / "ab.json")["decision"]
    row = load_comparison(run / "compare.json").timing(1)
    stored, bench, base, candidate = rates(name)
    assert row is not None and row.decided_by == "ab" and row.status == decision["status"]
    # The columns mean one thing: the stored baseline, this run's bench; the A/B's pair beside them.
    assert row.baseline == pytest.approx(stored) and row.current == pytest.approx(bench)
    assert row.ab_base == pytest.approx(base) and row.ab_candidate == pytest.approx(candidate)
    # What decided stays the A/B's paired change and interval.
    assert (row.change, row.ci_low, row.ci_high) == pytest.approx(
        (decision["change_pct"], decision["ci_low_pct"], decision["ci_high_pct"])
    )
    main, pair = (r for r in rows(load_comparison(run / "compare.json")) if "tokens/s (ws=1)" in r[0])
    assert main[1:3] == [f"{stored:,.0f} tok/s", f"{bench:,.0f} tok/s"]
    assert main[3] == f"{100 * (bench / stored - 1):+.2f}%"  # the change between the two figures shown
    assert pair[:3] == [
        "↳ tokens/s (ws=1), A/B",
        f"A/B base {base:,.0f} tok/s",
        f"A/B candidate {candidate:,.0f} tok/s",
    ]
    assert pair[3:] == [
        f"{decision['change_pct']:+.2f}%",
        f"[{decision['ci_low_pct']:+.1f}, {decision['ci_high_pct']:+.1f}]%",
        "—",
    ]


def test_the_ab_row_says_in_itself_that_the_ab_decided_and_its_footnote_starts_with_the_ab_rule(
    tmp_path: Path,
) -> None:
    _, run = decided_by_ab(tmp_path, "slower")
    comparison = load_comparison(run / "compare.json")
    stored, bench, _, _ = rates("slower")
    # +91% against the stored baseline, and FAIL: the row says why.
    line = next(
        line for line in markdown(comparison).splitlines() if line.startswith("| tokens/s (ws=1) [1]")
    )
    assert line == (
        f"| tokens/s (ws=1) [1] | {stored:,.0f} tok/s | {bench:,.0f} tok/s | +91.23% | — | "
        "FAIL: A/B decided: paired -36.1% [-43.6, -23.5]% |"
    )
    assert footnote_lines(comparison)[0].startswith("[1] tokens/s (ws=1): FAIL. rule: A/B, rounds of")
    assert (
        "| ↳ tokens/s (ws=1), A/B | A/B base 7,073 tok/s | A/B candidate 4,541 tok/s | -36.09% |"
        in (run / "compare.md").read_text()
    )


def test_without_a_stored_baseline_the_baseline_column_is_empty_never_the_ab_base(tmp_path: Path) -> None:
    _, run = decided_by_ab(tmp_path, "slower", stored=False)
    row = load_comparison(run / "compare.json").timing(1)
    _, bench, base, _ = rates("slower")
    assert row is not None and row.baseline is None and row.current == pytest.approx(bench)
    assert row.ab_base == pytest.approx(base)


def test_a_compare_json_written_before_never_shows_its_ab_pair_as_baseline_and_current() -> None:
    # As the A/B stage wrote it then: no ab_base field, the pair in baseline and current.
    written = read_json(AB_RUN / "slower" / "compare.json")
    assert "ab_base" not in written["checks"][0] and written["checks"][0]["baseline"] == pytest.approx(
        7072.5, abs=1
    )
    comparison = load_comparison(AB_RUN / "slower" / "compare.json")
    main, pair = table_rows(comparison)[:2]
    assert main.cells[1:4] == ["—", "—", "—"] and main.status == "FAIL"
    assert pair.cells[1:3] == ["A/B base 7,073 tok/s", "A/B candidate 4,541 tok/s"]


def test_one_tokens_per_s_in_the_table_mlflow_history_baseline_show_and_the_report(tmp_path: Path) -> None:
    _, run = decided_by_ab(tmp_path, "slower")
    comparison = load_comparison(run / "compare.json")
    bundle = load_bundle(run)
    table = comparison.timing(1).current  # type: ignore[union-attr]
    figure = f"ws1/{RUN_TOKENS_PER_S}"
    mlflow = run_figures(bundle, comparison)  # the parent run's metrics
    child = bench_figures(bundle.metrics[1])  # the `bench ws=1` child's
    point = history_point(logged(mlflow))  # what `benchgate history` and the report's history read
    history_column = next(key for name, key, _ in HISTORY_COLUMNS if name == "tok/s ws1")
    shown = {
        "verdict table": table,
        "MLflow ws1/tokens_per_s_mean": mlflow[figure],
        "MLflow bench child": child[RUN_TOKENS_PER_S],
        "benchgate history": point.figures[history_column],
        "baseline show": run_tokens_per_s(mlflow)[1],
        "report.html (this run's point)": current_point(bundle, comparison).figures[figure],
    }
    assert all(value == pytest.approx(table) for value in shown.values()), shown
    # The figure is tokens per step over the mean step time: the table's, as the gate judges it.
    assert table == pytest.approx(
        bundle.metrics[1]["tokens_per_step_global"] / (mlflow["ws1/step_time_ms_mean"] / 1e3)
    )
    # A run logged before the figure existed shows the same statistic, from the figures it has.
    older = {k: v for k, v in mlflow.items() if k != figure}
    assert history_point(logged(older)).figures[figure] == pytest.approx(table, rel=1e-3)
    assert run_tokens_per_s(older)[1] == pytest.approx(table, rel=1e-3)
    assert history_point(logged(older)).workload == "stack"


@pytest.mark.parametrize(
    ("name", "said"), [("slower", ["FAIL"]), ("same", ["CONTINUE", "CONTINUE", "PASS"])]
)
def test_the_looks_recomputed_from_the_saved_rounds_end_in_the_ab_decision(
    tmp_path: Path, name: str, said: list[str]
) -> None:
    outcome = read_json(AB_RUN / name / "ab" / "ws1" / "ab.json")
    looks = ab_looks(outcome, run_config(tmp_path, name).gate)
    assert [look.status for look in looks] == said
    decision, last = outcome["decision"], looks[-1]
    assert last.rounds == decision["rounds"]
    assert (last.change_pct, last.ci_low_pct, last.ci_high_pct) == pytest.approx(
        (decision["change_pct"], decision["ci_low_pct"], decision["ci_high_pct"])
    )


def test_a_last_look_the_time_budget_called_between_planned_looks_ends_the_looks(tmp_path: Path) -> None:
    outcome = read_json(AB_RUN / "same" / "ab" / "ws1" / "ab.json")
    gate = run_config(tmp_path, "same").gate
    tol, ab = gate.tolerances, gate.ab
    assert look_rounds(ab.min_rounds, ab.max_rounds)[:3] == [3, 5, 8]
    rounds = outcome["rounds"][:7]  # the time budget ended after round 7, between the looks at 5 and 8
    decision = decide_rounds(
        rounds, tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds, out_of_time=True
    )
    looks = ab_looks({**outcome, "rounds": rounds, "decision": decision.to_dict()}, gate)
    assert [look.rounds for look in looks] == [3, 5, 7]
    assert looks[-1].status == decision.status != "CONTINUE"
    assert "gate.ab.max_seconds" in decision.reason


def test_the_report_shows_the_ab_rounds_looks_decision_and_both_sides_steps(tmp_path: Path) -> None:
    config, run = decided_by_ab(tmp_path, "same")
    page = write_report(config, run).read_text()
    outcome = read_json(run / "ab" / "ws1" / "ab.json")
    assert "<h2>A/B at world size 1: base vs candidate</h2>" in page
    assert f"<b>Decision: PASS</b>: {outcome['decision']['reason']}" in page
    assert "at the last look, within -10% by the estimate" in outcome["decision"]["reason"]
    section = page.split("<h3>Rounds</h3>", 1)[1].split("<h3>Looks</h3>", 1)[0]
    for i, r in enumerate(outcome["rounds"], start=1):
        change = f"{100 * math.expm1(r['change_log']):+.2f}%"
        base, candidate = f"{sum(r['base_step_s']):.3f}", f"{sum(r['candidate_step_s']):.3f}"
        assert f"<tr><td>{i}</td><td>40</td>" in section and change in section, (i, change)
        assert f"<td>{base}</td><td>{candidate}</td>" in section
    looks = page.split("<h3>Looks</h3>", 1)[1].split("<h3>", 1)[0]
    said = [cell for cell in ("another round", "PASS") for _ in range(looks.count(f"<td>{cell}</td>"))]
    assert said == ["another round", "another round", "PASS"]
    assert "<td>3</td>" in looks and "<td>5</td>" in looks and "<td>8</td>" in looks
    assert 'alt="A/B step times of both sides"' in page
    # The table in the report is the verdict table's: the stored baseline, the run, the A/B's pair.
    stored, bench, base, _ = rates("same")
    assert f"<td>{stored:,.0f} tok/s</td><td>{bench:,.0f} tok/s</td>" in page
    assert f"<td>A/B base {base:,.0f} tok/s</td>" in page


def test_the_step_time_plot_compares_with_the_ab_base_where_no_baseline_is_stored(tmp_path: Path) -> None:
    config, run = decided_by_ab(tmp_path, "slower", stored=False)
    (report,) = read_ab(run, config.gate)
    figure = step_time_figure(load_bundle(run), None, {1: (report.label("base"), report.steps("base"))})
    assert figure._suptitle is not None and "no baseline" not in figure._suptitle.get_text()
    (ax,) = figure.axes
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend[0].startswith("A/B base b41da440 (in turns): p50") and legend[0].endswith("n=120")
    assert legend[1].startswith("this run: p50")
    assert "vs the A/B base" in ax.get_title()
    page = write_report(config, run).read_text()
    assert "the A/B base is the comparison" in page


def test_unchanged_code_passes_and_its_row_and_footnote_say_that_decided_it(tmp_path: Path) -> None:
    # The baseline's own commit, 21% slower on a busy host: unchanged code PASSes, and says so.
    base = load_bundle(STACK_RUN)
    slowed = {ws: slow(m, 1 / 0.79) for ws, m in base.metrics.items()}
    current = dataclasses.replace(base, metrics=slowed)
    comparison = compare(base, current, Tolerances())
    row = comparison.timing(1)
    assert row is not None and (row.status, row.decided_by) == ("PASS", "unchanged")
    assert row.change is not None and row.change < -15.0
    main = next(r for r in table_rows(comparison) if r.cells[0].startswith("tokens/s (ws=1)"))
    assert main.status_text() == "PASS: unchanged code: the baseline's own commit and setup"
    note = next(line for line in footnote_lines(comparison) if "tokens/s (ws=1)" in line)
    assert note.startswith(
        "[1] tokens/s (ws=1): PASS. rule: unchanged code: a run of the baseline's own commit"
    )


def slow(metrics: dict[str, Any], factor: float) -> dict[str, Any]:
    samples = dict(metrics["samples"])
    samples["step_time_s"] = [t * factor for t in samples["step_time_s"]]
    samples["tokens_per_s"] = [r / factor for r in samples["tokens_per_s"]]
    return {**metrics, "samples": samples}


def test_a_pass_beyond_its_tolerance_says_within_noise_in_its_row() -> None:
    # The real run's efficiency, 12 points lower, against three earlier runs that spread by 10 points:
    # beyond the 10-point tolerance, and the noise cannot tell: INFO, not a PASS (its interval straddles).
    tol = Tolerances()
    _, base = scaling_efficiency(load_bundle(STACK_RUN).metrics)  # type: ignore[misc]
    now = base - 0.12
    result = scaling.from_history(
        base, now, [base - 0.1, base, base + 0.1], tol.scaling_efficiency_drop_points, tol.confidence
    )
    row = scaling_row("scaling efficiency (1->2)", now, base, result, tol)
    assert (
        row.status == "INFO" and row.change is not None and row.change < -tol.scaling_efficiency_drop_points
    )
    assert row.ci_low is not None and row.ci_high is not None
    assert row.ci_low < -tol.scaling_efficiency_drop_points < row.ci_high
    (line,) = table_rows(Comparison("p", "w", None, [row]))
    assert line.status_text().startswith("INFO")
    # Within its tolerance, with confidence, a PASS needs no word.
    near = scaling_row(
        "scaling efficiency (1->2)",
        base - 0.02,
        base,
        scaling.from_history(base, base - 0.02, [base - 0.001, base, base + 0.001], 10.0, 0.95),
        tol,
    )
    assert table_rows(Comparison("p", "w", None, [near]))[0].status_text() == "PASS"


def test_rows_of_a_suite_keep_the_status_alone_in_its_cell(tmp_path: Path) -> None:
    _, run = decided_by_ab(tmp_path, "slower")
    statuses = [r[-1] for r in rows(load_comparison(run / "compare.json"))]
    assert statuses[:2] == ["FAIL", "—"] and set(statuses[2:]) <= {"PASS", "NEW", "INFO", "WARN"}


def test_a_row_written_without_the_later_fields_reads_back_with_them_empty(tmp_path: Path) -> None:
    data = read_json(AB_RUN / "same" / "compare.json")
    write_json(tmp_path / "compare.json", data)
    checks = load_comparison(tmp_path / "compare.json").checks
    assert all(c.ab_base is None and c.ab_candidate is None and c.tolerance is None for c in checks)
    data["checks"][0]["ab_base"] = "7000"  # a later field is as strict as the others
    write_json(tmp_path / "compare.json", data)
    with pytest.raises(Exception, match=r"checks\[0\]\.ab_base: got '7000'"):
        load_comparison(tmp_path / "compare.json")
    assert Check("x", "", 1.0).ab_base is None
    assert isinstance(load_bundle(AB_RUN / "baseline"), Bundle)


def test_an_ab_judged_scaling_row_keeps_the_runs_efficiencies_and_shows_the_ab_pair(tmp_path: Path) -> None:
    # The compare stage's row: the real run's efficiency against itself stored (NEW without history).
    tol = Tolerances()
    run = load_bundle(STACK_RUN)
    compared = compare(run, run, tol)
    before = next(c for c in compared.checks if c.metric == "scaling_efficiency")
    # A/B rounds at both world sizes judge it (ab/rows.apply_ab_scaling builds its row so): their pair.
    result = scaling.from_ab(0.40, [-0.01, 0.0, 0.01], [-0.05, -0.04, -0.06], 10.0, tol.confidence)
    assert result is not None
    judged = scaling_row(before.name, 0.40 + result.change_pts / 100, 0.40, result, tol)
    assert judged.decided_by == "ab"
    checks = [judged if c is before else c for c in compared.checks]

    def written() -> Check:
        return next(
            c for c in load_comparison(tmp_path / "compare.json").checks if c.metric == "scaling_efficiency"
        )

    # Written where no compare.json was before: the run's figures are not known, and never the A/B's.
    write_comparison(tmp_path, dataclasses.replace(compared, checks=checks))
    assert (written().baseline, written().current, written().ab_base) == (None, None, pytest.approx(40.0))
    # Written over the compare stage's compare.json, as the A/B stage writes: its figures are kept.
    write_json(tmp_path / "compare.json", compared.to_dict())
    write_comparison(tmp_path, dataclasses.replace(compared, checks=checks))
    row = written()
    assert (row.baseline, row.current) == pytest.approx((before.baseline, before.current))
    assert (row.ab_base, row.ab_candidate) == pytest.approx((40.0, 40.0 + result.change_pts))
    assert row.change == pytest.approx(result.change_pts)
