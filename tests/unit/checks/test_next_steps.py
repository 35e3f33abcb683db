"""next_steps on comparisons built by the gate's own producers: each way a row becomes UNKNOWN gets the
action that decides it, and a reworded note in a producer breaks a test here."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from ab_outcomes import outcome, straddling
from bundles import bench, bundle

from benchgate.ab.rows import apply_ab
from benchgate.checks.compare import compare, without_reachable_baseline
from benchgate.checks.next_steps import next_steps
from benchgate.config import ABConfig, Tolerances
from benchgate.measure import fingerprint
from benchgate.results.comparison import Comparison

OUT = Path("/runs/r1")


def screen_unknown() -> Comparison:
    result = compare(bundle(1), bundle(2, step_s=0.105), Tolerances())
    assert result.verdict == "UNKNOWN" and result.timing(1).decided_by == "screen"  # type: ignore[union-attr]
    return result


def test_pass_and_warn_need_nothing() -> None:
    assert next_steps(compare(bundle(1), bundle(2), Tolerances()), OUT) == []
    warned = compare(bundle(1), bundle(2, ws1=bench(1, 0.1, 2, memory_mib=460)), Tolerances())
    assert warned.verdict == "WARN"
    assert next_steps(warned, OUT) == []


def test_screen_undecided_without_ab_says_run_with_a_base() -> None:
    steps = next_steps(screen_unknown(), OUT)
    assert len(steps) == 1
    assert "`benchgate run --base origin/main`" in steps[0]
    assert "could not decide (ws=1)" in steps[0]


def test_unknown_noise_is_named_as_the_reason() -> None:
    fresh = bundle(1)
    fresh.history = []  # no earlier baseline runs: the screen cannot know the noise
    result = compare(fresh, bundle(2), Tolerances())
    assert {c.status for c in result.checks if c.metric == "tokens_per_s"} == {"UNKNOWN"}
    (step,) = next_steps(result, OUT)
    assert step.startswith("the run-to-run noise is not known yet (ws=1,2)")
    assert "--base origin/main" in step


def test_ab_out_of_rounds_says_resume_with_a_larger_max_rounds() -> None:
    decided = apply_ab(screen_unknown(), outcome(straddling(27)), Tolerances(), ABConfig())
    assert decided.timing(1).status == "UNKNOWN"  # type: ignore[union-attr]
    (step,) = next_steps(decided, OUT)
    assert "`benchgate run --resume /runs/r1`" in step
    assert "gate.ab.max_rounds" in step
    assert "`[gate.ab] max_rounds` above 27" in step
    assert "--config FILE" in step


def test_ab_out_of_time_names_the_time_budget() -> None:
    # Five rounds: between the looks at 4 and 6, when the time budget ended.
    decided = apply_ab(screen_unknown(), outcome(straddling(5), out_of_time=True), Tolerances(), ABConfig())
    assert "gate.ab.max_seconds" in decided.timing(1).note  # type: ignore[union-attr]
    (step,) = next_steps(decided, None)
    assert "`benchgate run --resume DIR`" in step
    assert "`[gate.ab] max_seconds`" in step and "max_rounds" not in step


def test_a_pass_over_a_changed_setup_needs_nothing() -> None:
    # Both A/B sides ran the new packages: the PASS is the code's, and nothing waits for a person.
    unseen = ["packages"]
    decided = apply_ab(screen_unknown(), outcome([0.0, 0.001, -0.001, 0.0]), Tolerances(), ABConfig(), unseen)
    row = decided.timing(1)
    assert row is not None and (row.status, row.decided_by) == ("PASS", "ab")
    assert row.note.startswith(fingerprint.describe(unseen))
    assert decided.verdict == "PASS" and next_steps(decided, OUT) == []


def test_unreachable_mlflow_without_a_cached_baseline_says_fix_it_or_no_tracking() -> None:
    first = compare(None, bundle(2), Tolerances())
    blind = without_reachable_baseline(first, "connection refused")
    assert blind.verdict == "UNKNOWN"
    (step,) = next_steps(blind, OUT)  # one step, though every row (timing included) is UNKNOWN
    assert "MLflow may hold this profile's baseline" in step
    assert "`--no-tracking`" in step and "MLFLOW_TRACKING_URI" in step


def test_each_cause_gets_its_own_step_unreachable_first() -> None:
    screened = apply_ab(screen_unknown(), outcome(straddling(27)), Tolerances(), ABConfig())
    ws2 = screened.timing(2)
    assert ws2 is not None
    # ws=2 left to the screen, undecided; ws=1 decided by A/B that ran out of rounds.
    checks = [replace(ws2, status="UNKNOWN") if c is ws2 else c for c in screened.checks]
    mixed = replace(screened, checks=checks)
    blind = without_reachable_baseline(
        replace(mixed, checks=[*checks, replace(checks[-1], name="probe x", status="NEW")]), "down"
    )
    steps = next_steps(blind, OUT)
    assert len(steps) == 3
    assert "MLflow" in steps[0]
    assert "--resume /runs/r1" in steps[1] and "(ws=1)" in steps[1]
    assert "--base origin/main" in steps[2] and "(ws=2)" in steps[2]


def test_fail_points_at_its_evidence() -> None:
    slower = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    assert slower.verdict == "FAIL"
    (screen_step,) = next_steps(slower, OUT)
    assert "--base origin/main" in screen_step
    by_ab = apply_ab(slower, outcome([math.log(0.8)] * 4), Tolerances(), ABConfig())
    assert by_ab.timing(1).status == "FAIL"  # type: ignore[union-attr]
    (ab_step,) = next_steps(by_ab, OUT)
    assert "/runs/r1/ab/ws1/ab.json" in ab_step
    # An eval that is worse on every seed (eval.json's `seeds`, as stage_eval writes them) FAILs on its own
    # evidence: nothing to run next.
    base_eval = bundle(1).eval
    seeds = [{"seed": 1234 + k, "perplexity": p, "probes": {}} for k, p in enumerate((2.50, 2.52, 2.48))]
    worse = [{**seed, "perplexity": 3.0 + 0.01 * k} for k, seed in enumerate(seeds)]
    eval_only = compare(
        bundle(1, eval={**base_eval, "perplexity": 2.50, "seeds": seeds}),  # type: ignore[dict-item]
        bundle(2, eval={**base_eval, "perplexity": 3.0, "seeds": worse}),  # type: ignore[dict-item]
        Tolerances(),
    )
    assert eval_only.verdict == "FAIL" and next_steps(eval_only, OUT) == []


def test_an_explained_fail_points_at_its_operators_and_traces() -> None:
    decided = apply_ab(screen_unknown(), outcome([-0.2] * 4), Tolerances(), ABConfig())
    assert decided.timing(1).status == "FAIL"  # type: ignore[union-attr]
    (before,) = next_steps(decided, OUT)
    assert before.startswith("the A/B rounds behind the FAIL are in /runs/r1/ab/ws1/ab.json")
    decided.attribution["1"] = {"entries": [{"op": "aten::cumsum"}]}  # the step reads only that it exists
    (step,) = next_steps(decided, OUT)
    assert step.startswith('read "Why ws=1 is slower" under the table: the operators the slowdown is made of')
    assert "traces are in /runs/r1/ab/ws1/explain/ (Perfetto or TensorBoard)" in step
    (in_ci,) = next_steps(decided, None, artifact="benchgate-out")
    assert "ab/ws1/explain/ (download the `benchgate-out` artifact of this job)" in in_ci
