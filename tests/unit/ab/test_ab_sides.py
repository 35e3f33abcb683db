"""The A/B's two sides as the baseline of memory and loss (ab/sides.py), on a real run's files.

tests/unit/ab/ab_sides_run/ is the result directory of a real `benchgate run --base HEAD~1` with an empty
baseline store (a pull request on a fresh CI runner), CPU, the tests' stack workload (stack_repo.py),
then copied here whole but for the logs and pipeline folders: the candidate commit keeps a 64 MiB
buffer on its model and trains with a tenth of the learning rate. bench.toml was conftest's
REPO_AB_CONFIG; the command `--steps 20 --warmup 3 --no-eval --no-trace --world-sizes 1 --baseline-dir
baselines --no-tracking --no-update-baseline`. Its A/B ran the 5 rounds gate.ab.max_rounds allows and
ended UNKNOWN. compare.json is what benchgate wrote then, before the A/B compared memory and loss: its
memory row NEW, and the compare stage's "nothing to compare against" note under the A/B's row.

Expectations are read from the round files here, independently of the code under test.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchgate.ab.rows import apply_ab
from benchgate.ab.sides import Sides, apply_sides, rewrite_baseline_note
from benchgate.ab.stage import read_sides
from benchgate.checks.compare import compare
from benchgate.config import RunConfig, Tolerances
from benchgate.kit.files import read_json
from benchgate.measure.steps import memory_block
from benchgate.publish.ci_report import summary_markdown
from benchgate.results.bundle import load_bundle
from benchgate.results.comparison import Comparison, load_comparison

RUN = Path(__file__).parent / "ab_sides_run"
MIB = 2**20


def rounds(side: str) -> list[dict[str, Any]]:
    return [read_json(p) for p in sorted(RUN.glob(f"ab/ws1/round*/{side}/metrics-ws1.json"))]


def gated(tol: Tolerances | None = None, sides: Sides | None = None) -> Comparison:
    """The run's comparison as the stages make it: compare (no stored baseline), the A/B's decision,
    then its sides."""
    tol = tol or Tolerances()
    config = RunConfig.model_validate(read_json(RUN / "config.json"))
    bundle = load_bundle(RUN)
    outcome = read_json(RUN / "ab" / "ws1" / "ab.json")
    comparison = apply_ab(compare(None, bundle, tol), outcome, tol, config.gate.ab)
    sides = sides or read_sides(RUN, 1, len(outcome["rounds"]))
    comparison = apply_sides(comparison, 1, sides, outcome["base"]["description"], tol, bundle.metrics[1])
    return rewrite_baseline_note(comparison, outcome["base"]["description"])


def row(comparison: Comparison, name: str) -> Any:
    return next(c for c in comparison.checks if c.name == name)


def test_the_run_as_benchgate_wrote_it_compared_timing_only() -> None:
    written = load_comparison(RUN / "compare.json")
    assert row(written, "peak memory (ws=1)").status == "NEW"
    assert any("nothing to compare against" in note for note in written.notes)


def test_without_a_stored_baseline_the_ab_base_is_the_baseline_of_memory() -> None:
    comparison = gated()
    base = statistics.median(m["memory"]["peak_bytes"] for m in rounds("A")) / MIB
    candidate = statistics.median(m["memory"]["peak_bytes"] for m in rounds("B")) / MIB
    assert candidate - base == pytest.approx(64, abs=2)  # the candidate's buffer, on every round
    memory = row(comparison, "peak memory (ws=1)")
    assert (memory.ab_base, memory.ab_candidate) == pytest.approx((base, candidate))
    assert memory.change == pytest.approx(100 * (candidate / base - 1))
    assert memory.status == "WARN" and memory.rule == "WARN if increase > 10%"  # a stored row's rule
    assert memory.decided_by == "ab" and memory.baseline is None  # no stored baseline's figure
    assert memory.current == read_json(RUN / "metrics-ws1.json")["memory"]["peak_bytes"] / MIB  # the bench's
    assert "A/B vs base 1f2ba9848e46: each side's max_rss (max over ranks), the median over 5 rounds" in (
        memory.note
    )
    # The tolerance is the baseline comparison's: 25% lets the buffer pass.
    assert row(gated(Tolerances(memory_increase_pct=25.0)), "peak memory (ws=1)").status == "PASS"
    assert not any(c.name.startswith("peak reserved") for c in comparison.checks)  # CPU: no reserved bytes


def test_the_loss_slope_is_judged_beside_the_bases_and_the_final_loss_is_shown() -> None:
    comparison = gated()
    bench_row = row(compare(None, load_bundle(RUN), Tolerances()), "loss slope (ws=1)")
    slope = row(comparison, "loss slope (ws=1)")
    curves = {side: np.mean([m["samples"]["loss"] for m in rounds(side)], axis=0) for side in "AB"}
    fitted = {side: np.polyfit(np.arange(len(curve)), curve, 1)[0] for side, curve in curves.items()}
    assert (slope.ab_base, slope.ab_candidate) == pytest.approx((fitted["A"], fitted["B"]))
    assert slope.current == bench_row.current and slope.baseline is None  # this run's own figure
    assert slope.ci_low < fitted["B"] < slope.ci_high  # the interval is the candidate's in the rounds
    assert slope.status == "PASS" and slope.decided_by == "ab"
    assert f"this run's bench {bench_row.current:.3g} [{bench_row.ci_low:.3g}, " in slope.note
    # The rule is the baseline comparison's own tolerance: a loss rising faster than it FAILs.
    strict = gated(Tolerances(loss_slope_max=-0.01))
    assert row(strict, "loss slope (ws=1)").status == "FAIL"
    assert (
        "loss rises over the measured window (its bench and its A/B rounds)"
        in row(strict, "loss slope (ws=1)").note
    )
    final = row(comparison, "final loss (ws=1)")
    assert final.status == "INFO" and final.decided_by == "ab"
    assert (final.ab_base, final.ab_candidate) == pytest.approx((curves["A"][-1], curves["B"][-1]))
    assert final.current == read_json(RUN / "metrics-ws1.json")["samples"]["loss"][-1]


def test_the_nothing_to_compare_note_says_what_the_ab_base_stood_in_for() -> None:
    comparison = gated()
    assert not any("nothing to compare against" in note for note in comparison.notes)
    assert comparison.notes[0] == (
        "no stored baseline for machine profile 'cpu-Intel-Xeon-x2_torch2.13.0' and workload 'stack': the "
        "A/B's base (base 1f2ba9848e46) is the baseline of tokens/s, peak memory and the loss slope at ws=1"
    )
    summary = summary_markdown(comparison, {}, Path("/home/runner/work/app/app/benchgate-out"))
    assert "nothing to compare against" not in summary
    assert "| peak memory (ws=1) | — | " in summary and "**WARN**: A/B: paired +19." in summary
    assert "| ↳ peak memory (ws=1), A/B | A/B base 324." in summary
    # A run with an eval: its rows still have no baseline, and the note names them.
    with_eval = replace(
        comparison,
        checks=[
            *comparison.checks,
            replace(comparison.checks[0], name="perplexity (held-out)", status="NEW"),
        ],
    )
    text = rewrite_baseline_note(with_eval, "base 1f2ba9848e46").notes[0]
    assert text.endswith("; nothing to compare perplexity (held-out) with (the A/B runs no eval)")


def test_same_sides_pass_and_applying_again_replaces_the_rows() -> None:
    base = rounds("A")
    same = gated(sides=Sides(base, copy.deepcopy(base)))
    memory = row(same, "peak memory (ws=1)")
    assert memory.status == "PASS" and memory.change == 0.0
    assert row(same, "final loss (ws=1)").change == 0.0
    # A resumed A/B applies its sides again, over more rounds: one row each, the newer figures.
    bench = load_bundle(RUN).metrics[1]
    again = apply_sides(same, 1, read_sides(RUN, 1, 5), "base 1f2ba9848e46", Tolerances(), bench)
    assert [c.name for c in again.checks].count("final loss (ws=1)") == 1
    assert row(again, "peak memory (ws=1)").status == "WARN"
    assert row(again, "loss slope (ws=1)").note.count("A/B vs") == 1
    assert row(again, "loss slope (ws=1)").ab_candidate != row(same, "loss slope (ws=1)").ab_candidate
    assert read_sides(RUN, 1, 3).base == base[:3]


def test_a_stored_baseline_keeps_its_rows() -> None:
    bundle = load_bundle(RUN)
    stored = compare(bundle, bundle, Tolerances())
    applied = apply_sides(
        stored, 1, read_sides(RUN, 1, 5), "base 1f2ba9848e46", Tolerances(), bundle.metrics[1]
    )
    assert applied == stored


def test_on_cuda_the_reserved_bytes_are_compared_too() -> None:
    """Both sides' memory blocks as the bench writes them on CUDA (measure/steps.memory_block)."""

    def on_cuda(metrics: dict[str, Any], allocated: int, reserved: int) -> dict[str, Any]:
        phase = {"allocated": allocated, "reserved": reserved}
        gathered = [{"rss": 2**30, "cuda_memory": {"warmup": phase, "measured": phase}}]
        return {**metrics, "memory": memory_block("cuda", gathered)}

    base = [on_cuda(m, 900 * MIB, 1000 * MIB) for m in rounds("A")]
    candidate = [on_cuda(m, 920 * MIB, 1200 * MIB) for m in rounds("B")]
    comparison = gated(sides=Sides(base, candidate))
    assert row(comparison, "peak memory (ws=1)").status == "PASS"  # allocated +2.2%
    reserved = row(comparison, "peak reserved memory (ws=1)")
    assert (reserved.ab_base, reserved.ab_candidate, reserved.status) == (1000.0, 1200.0, "WARN")
    assert reserved.change == pytest.approx(20.0)
