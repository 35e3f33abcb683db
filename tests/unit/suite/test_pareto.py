"""The Pareto frontier of a suite's entries (suite/pareto.py): dominance, ties, missing figures, sentences."""

from __future__ import annotations

import math

import pytest
from harness import TESTS_DIR
from hypothesis import given
from hypothesis import strategies as st

from benchgate.suite.entry_figures import eval_mismatch, spread_pct
from benchgate.suite.pareto import OBJECTIVES, Objective, Point, Ties, dominates, frontier

MIB = 2**20


def test_the_faster_and_better_entry_dominates_and_is_named_in_a_sentence() -> None:
    fp32 = Point("gpt-tiny-fp32", 1456.0, perplexity=3.20, peak_memory_bytes=300 * MIB)
    bf16 = Point("gpt-tiny-bf16", 1234.0, perplexity=3.31, peak_memory_bytes=200 * MIB)
    panel = frontier([bf16, fp32], better="perplexity")
    assert [p.name for p in panel.frontier] == ["gpt-tiny-fp32"]
    [beaten] = panel.dominated
    assert beaten.by == fp32
    assert beaten.sentence == (
        "gpt-tiny-bf16 is dominated by gpt-tiny-fp32: slower (1,234 vs 1,456 tokens/s) and worse "
        "perplexity (3.31 vs 3.20)"
    )
    assert panel.standing("gpt-tiny-bf16") == "dominated by gpt-tiny-fp32"
    # On memory, bf16 is the lighter one: a trade-off, so both are on that frontier, slowest first.
    memory = frontier([fp32, bf16], better="peak_memory")
    assert [p.name for p in memory.frontier] == ["gpt-tiny-bf16", "gpt-tiny-fp32"]
    assert memory.dominated == []


def test_equal_points_do_not_dominate_each_other() -> None:
    a = Point("a", 1000.0, perplexity=5.0)
    b = Point("b", 1000.0, perplexity=5.0)
    assert not dominates(a, b, "perplexity") and not dominates(b, a, "perplexity")
    panel = frontier([a, b], better="perplexity")
    assert {p.name for p in panel.frontier} == {"a", "b"}
    assert panel.dominated == []


def test_equal_speed_and_equal_figure_words_say_no_faster_and_no_better() -> None:
    same_speed = frontier([Point("x", 1000.0, 4.0), Point("y", 1000.0, 5.0)], better="perplexity")
    assert same_speed.dominated[0].sentence == (
        "y is dominated by x: no faster (1,000 vs 1,000 tokens/s) and worse perplexity (5.00 vs 4.00)"
    )
    same_figure = frontier([Point("x", 1200.0, 4.0), Point("y", 1000.0, 4.0)], better="perplexity")
    assert same_figure.dominated[0].sentence == (
        "y is dominated by x: slower (1,000 vs 1,200 tokens/s) and no better perplexity (4.00 vs 4.00)"
    )


def test_figures_that_round_alike_get_more_decimals() -> None:
    exact = Ties(0.0, 0.0, 0.0)  # with no noise margin, the smallest differences count
    panel = frontier([Point("x", 1000.4, 4.001), Point("y", 1000.2, 4.004)], better="perplexity", ties=exact)
    assert panel.dominated[0].sentence == (
        "y is dominated by x: slower (1,000.2 vs 1,000.4 tokens/s) and worse perplexity (4.004 vs 4.001)"
    )


def test_memory_is_said_in_mib() -> None:
    points = [Point("x", 900.0, None, 100 * MIB), Point("y", 800.0, None, 150.5 * MIB)]
    panel = frontier(points, better="peak_memory")
    assert panel.dominated[0].sentence.endswith("and worse peak memory (150.5 MiB vs 100.0 MiB)")


def test_an_entry_without_the_figure_is_left_out_of_that_panel_only() -> None:
    gpt = Point("gpt", 1000.0, perplexity=4.0, peak_memory_bytes=300 * MIB)
    mlp = Point("mlp", 5000.0, perplexity=None, peak_memory_bytes=100 * MIB)
    quality = frontier([gpt, mlp], better="perplexity")
    assert [p.name for p in quality.left_out] == ["mlp"]
    assert [p.name for p in quality.frontier] == ["gpt"]  # mlp is faster, but cannot dominate unmeasured
    assert quality.standing("mlp") == "no perplexity (its run had no eval)"
    assert "mlp is left out of the perplexity panel: no perplexity (its run had no eval)." in quality.notes()
    memory = frontier([gpt, mlp], better="peak_memory")
    assert memory.left_out == []
    assert memory.dominated[0].by == mlp


def test_the_named_dominator_is_the_fastest_frontier_entry_that_dominates() -> None:
    slow = Point("slow", 100.0, perplexity=10.0)
    mid = Point("mid", 200.0, perplexity=3.0)
    fast = Point("fast", 300.0, perplexity=5.0)
    panel = frontier([slow, mid, fast], better="perplexity")
    assert panel.dominated[0].by == fast  # both dominate slow; fast is the strongest alternative


def test_memory_within_the_noise_is_one_memory_not_a_trade_off() -> None:
    # 0.4% more memory and 20% faster: drawn as a trade-off, it would keep the slower entry on the frontier.
    slow = Point("mlp-256", 1000.0, None, 300.0 * MIB)
    fast = Point("mlp-1024", 1200.0, None, 301.2 * MIB)
    panel = frontier([slow, fast], better="peak_memory")
    assert [p.name for p in panel.frontier] == ["mlp-1024"]
    assert panel.dominated[0].sentence == (
        "mlp-256 is dominated by mlp-1024: slower (1,000 vs 1,200 tokens/s) and peak memory within 2% "
        "(300.0 MiB vs 301.2 MiB)"
    )
    assert [p.name for p in frontier([slow, fast], "peak_memory", Ties(2.0, 0.5, 0.0)).frontier] == [
        "mlp-256",
        "mlp-1024",
    ]
    # Beyond the margin it is a trade-off again.
    heavier = Point("mlp-1024", 1200.0, None, 310.0 * MIB)
    assert len(frontier([slow, heavier], better="peak_memory").frontier) == 2


def test_speeds_within_their_measured_spread_are_tied() -> None:
    steady = Point("a", 1000.0, perplexity=4.0)
    faster = Point("b", 1040.0, perplexity=4.5)
    assert len(frontier([steady, faster], better="perplexity").frontier) == 2  # 4% faster: a trade-off
    # Each p50's 95% interval is 5% wide on either side: 4% is no difference in speed.
    noisy = [Point("a", 1000.0, 4.0, tokens_per_s_spread_pct=5.0), Point("b", 1040.0, 4.5)]
    panel = frontier(noisy, better="perplexity")
    assert [p.name for p in panel.frontier] == ["a"]
    assert panel.dominated[0].sentence == (
        "b is dominated by a: as fast within 5% (1,040 vs 1,000 tokens/s) and worse perplexity (4.50 vs 4.00)"
    )


def test_with_ties_the_entry_that_beats_one_may_be_beaten_itself() -> None:
    p = Point("p", 1000.0, perplexity=3.985)
    q = Point("q", 1021.0, perplexity=4.00)  # faster than p beyond 2%, its perplexity tied with p's
    r = Point("r", 1010.0, perplexity=3.97)  # tied with q on speed, better; tied with p on both
    assert dominates(q, p, "perplexity") and dominates(r, q, "perplexity")
    assert not dominates(r, p, "perplexity") and not dominates(p, r, "perplexity")
    panel = frontier([p, q, r], better="perplexity")
    assert [x.name for x in panel.frontier] == ["r"]
    assert {d.point.name: d.by.name for d in panel.dominated} == {"p": "q", "q": "r"}


def test_an_eval_that_did_not_measure_the_variant_gives_it_no_perplexity() -> None:
    """eval.json's settings as measure/evaluate.py writes them: EvalConfig's, and the precision where it
    is not fp32; evals before the bench's precision applied have none (they ran in fp32)."""
    from benchgate.config import EvalConfig

    settings = EvalConfig().model_dump(mode="json")  # batch_size 16
    fp32 = {"perplexity": 38.5, "settings": settings}
    bf16 = {"perplexity": 38.9, "settings": {**settings, "precision": "bf16"}}
    assert eval_mismatch({}, "fp32", fp32) is None and eval_mismatch({}, "bf16", bf16) is None
    assert eval_mismatch({"precision": "bf16"}, "bf16", fp32) == (
        "no perplexity of this variant (its eval ran in fp32, its bench in bf16)"
    )
    assert eval_mismatch({"batch_size": 4}, "fp32", fp32) == (
        "no perplexity of this variant (its eval trained on batches of 16, the variant's batch_size is 4)"
    )
    four = {"perplexity": 41.0, "settings": {**settings, "batch_size": 4}}
    assert eval_mismatch({"batch_size": 4}, "fp32", four) is None
    point = Point(
        "b4", 1000.0, None, 10 * MIB, perplexity_missing=eval_mismatch({"batch_size": 4}, "fp32", fp32)
    )
    panel = frontier([point, Point("b8", 900.0, 38.5, 12 * MIB)], better="perplexity")
    assert (
        panel.standing("b4")
        == "no perplexity of this variant (its eval trained on batches of 16, the variant's batch_size is 4)"
    )


def test_the_measured_spread_of_tokens_per_s_is_read_from_the_metrics() -> None:
    from benchgate.kit.files import read_json

    summary = read_json(TESTS_DIR / "data" / "stack_run" / "metrics-ws1.json")["tokens_per_s"]
    half = (summary["p50_ci_high"] - summary["p50_ci_low"]) / 2
    assert spread_pct(summary) == pytest.approx(100 * half / summary["p50"])
    assert spread_pct({"p50": 10.0}) is None


def test_bad_points_are_refused_with_the_entry_and_field() -> None:
    with pytest.raises(ValueError, match=r"entry 'x': perplexity: got nan"):
        Point("x", 1.0, perplexity=math.nan)
    with pytest.raises(ValueError, match=r"entry 'x': tokens_per_s: got -1.0"):
        Point("x", -1.0)
    with pytest.raises(ValueError, match="entry names must be unique; got a more than once"):
        frontier([Point("a", 1.0, 1.0), Point("a", 2.0, 2.0)], better="perplexity")


# Small integer-valued figures make ties (equal speed, equal figure, equal points) common.
_figure = st.integers(min_value=1, max_value=6).map(float)
_points = st.lists(st.tuples(_figure, st.none() | _figure, st.none() | _figure), min_size=0, max_size=12).map(
    lambda rows: [Point(f"e{i}", t, p, m) for i, (t, p, m) in enumerate(rows)]
)


@given(_points, st.sampled_from(OBJECTIVES))
def test_every_point_is_on_the_frontier_dominated_by_it_or_left_out(
    points: list[Point], objective: Objective
) -> None:
    panel = frontier(points, better=objective)
    on = [p.name for p in panel.frontier]
    beaten = [d.point.name for d in panel.dominated]
    out = [p.name for p in panel.left_out]
    assert sorted(on + beaten + out) == sorted(p.name for p in points)  # a partition, nothing lost
    assert all(p.figure(objective) is None for p in panel.left_out)
    for d in panel.dominated:
        # Ties here are only equal figures (they differ by a sixth or more), so dominance is transitive
        # and the one named is on the frontier.
        assert d.by in panel.frontier
        assert dominates(d.by, d.point, objective)
        assert f"{d.point.name} is dominated by {d.by.name}: " in d.sentence
    for p in panel.frontier:
        assert not any(dominates(q, p, objective) for q in points)
        assert not any(dominates(p, q, objective) for q in panel.frontier)
    assert [p.tokens_per_s for p in panel.frontier] == sorted(p.tokens_per_s for p in panel.frontier)


@given(_points, st.sampled_from(OBJECTIVES))
def test_dominance_is_a_strict_order(points: list[Point], objective: Objective) -> None:
    for a in points:
        assert not dominates(a, a, objective)
        for b in points:
            assert not (dominates(a, b, objective) and dominates(b, a, objective))
