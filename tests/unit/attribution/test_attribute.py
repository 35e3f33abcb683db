"""Per-entry change with intervals from real profiled steps (attribution/attribute.py), and its lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed import HashStore  # type: ignore[attr-defined]
from traces import profile_steps

from benchgate.attribution.attribute import KEPT, OFFSETTING_KEPT, ProfiledRound, ProfiledSide, attribute
from benchgate.attribution.lines import block_lines
from benchgate.attribution.trace_ops import read_trace
from benchgate.measure.op_trace import profiled, step_range


def _round(tmp_path: Path, name: str, extra_norm: int, steps: int = 8) -> ProfiledRound:
    base, base_s = profile_steps(tmp_path / name / "A", steps)
    candidate, candidate_s = profile_steps(tmp_path / name / "B", steps, extra_norm=extra_norm)
    return ProfiledRound(
        ProfiledSide([read_trace(base)], base_s), ProfiledSide([read_trace(candidate)], candidate_s)
    )


def test_the_planted_operator_ranks_at_the_top_and_is_new(tmp_path: Path) -> None:
    # The sides are profiled one after the other in this process (not in turns, as an A/B's are), so a
    # busy host can lift a matmul above them: the order is held to the top three here, and to first
    # place by tests/gate/test_ab_explain.py and benchmarks/attribution.py, whose sides take turns.
    rounds = [_round(tmp_path, f"round{i}", extra_norm=12) for i in (1, 2)]
    block = attribute(rounds, confidence=0.95)
    assert block["steps"] == 16 and block["rounds"] == 2
    top = {e["op"]: e for e in block["entries"][:3]}
    for op in ("aten::native_layer_norm", "aten::native_layer_norm_backward"):
        entry = top[op]
        assert entry["only_in"] == "candidate" and entry["base_ms_per_step"] == 0
        low, high = entry["ci"]
        assert 0 < low <= entry["change_ms_per_step"] <= high
    first = block["entries"][0]
    # The shares divide the profiled steps' own change where no decided change is given.
    assert block["shared_change_ms_per_step"] == block["measured"]["change_ms_per_step"]
    assert first["share_pct"] == pytest.approx(
        100 * first["change_ms_per_step"] / block["measured"]["change_ms_per_step"]
    )
    assert block["communication"] is None  # no collective in these steps
    assert len(block["entries"]) <= KEPT + OFFSETTING_KEPT  # what moved against the change is kept too


def test_shares_divide_the_decided_change(tmp_path: Path) -> None:
    block = attribute([_round(tmp_path, "r", extra_norm=12)], decided_change_ms=10.0)
    first = block["entries"][0]
    assert block["shared_change_ms_per_step"] == 10.0
    assert first["share_pct"] == pytest.approx(10 * first["change_ms_per_step"])
    top = block["entries"][:5]
    assert block["explained_by_top_pct"] == pytest.approx(sum(e["share_pct"] for e in top))


def test_identical_code_names_no_operator_for_sure(tmp_path: Path) -> None:
    block = attribute([_round(tmp_path, "r", extra_norm=0, steps=10)])
    assert not any(e["only_in"] for e in block["entries"])
    # Same operators on both sides, paired by name: each one runs on both.
    assert all(e["base_ms_per_step"] > 0 and e["candidate_ms_per_step"] > 0 for e in block["entries"])


def test_collectives_are_summed_apart(tmp_path: Path) -> None:
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        sides = []
        for label, reduce in (("A", False), ("B", True)):
            times = []
            with profiled(tmp_path / label, 0, torch.device("cpu")):
                for i in range(6):
                    with step_range(i):
                        x = torch.randn(512, 512) @ torch.randn(512, 512)
                        if reduce:
                            for _ in range(20):
                                dist.all_reduce(x)
                    times.append(1e-3)
            sides.append(ProfiledSide([read_trace(tmp_path / label / "rank0.pt.trace.json.gz")], times))
    finally:
        dist.destroy_process_group()
    block = attribute([ProfiledRound(sides[0], sides[1])])
    communication = block["communication"]
    assert communication is not None and communication["base_ms_per_step"] == 0
    assert communication["change_ms_per_step"] > 0
    collectives = [e for e in block["entries"] if e["communication"]]
    assert collectives and all(e["only_in"] == "candidate" for e in collectives)
    lines = block_lines("1", block)
    assert any(line.strip().startswith("collectives: 0.00 -> ") for line in lines)


def test_lines_name_the_top_five_with_intervals(tmp_path: Path) -> None:
    block = attribute([_round(tmp_path, "r", extra_norm=12)], decided_change_ms=5.0)
    block["traces"] = ["ab/ws1/explain/round1/A/op-trace/rank0.pt.trace.json.gz"]
    lines = block_lines("1", block, change_pct=-9.0)
    assert lines[0].startswith("Why ws=1 is slower: 1 profiled round(s) per side")
    assert "against the A/B's -9.0% (+5.00 ms/step)" in lines[0]
    first = block["entries"][0]
    assert lines[1].startswith(f"  1. {first['op']}  {first['change_ms_per_step']:+.2f} ms/step [")
    assert any(
        "aten::native_layer_norm" in line and "(new: only the candidate runs it)" in line for line in lines
    )
    assert len([line for line in lines if line[2:3].isdigit()]) == 5
    assert (
        lines[-1]
        == "  traces (Perfetto or TensorBoard): ab/ws1/explain/round1/A/op-trace/rank0.pt.trace.json.gz"
    )


def test_a_failed_explanation_says_why() -> None:
    lines = block_lines("2", {"entries": [], "why": "the profiled rounds failed: rank 1 exited"})
    assert lines == ["Why ws=2 changed: not explained (the profiled rounds failed: rank 1 exited)"]


def test_allocations_are_recorded_where_the_memory_row_grew() -> None:
    from benchgate.ab.explain import memory_grew
    from benchgate.results.comparison import Check, Comparison

    def run(status: str) -> Comparison:
        return Comparison(
            "p", "w", None, [Check("peak memory (ws=2)", "MiB", 330.0, baseline=300.0, status=status)]
        )

    assert memory_grew(run("WARN"), 2) and not memory_grew(run("PASS"), 2)
    assert not memory_grew(run("WARN"), 1)  # another world size's row


def test_grown_allocations_are_named(tmp_path: Path) -> None:
    base, base_s = profile_steps(tmp_path / "A", 4, memory=True)
    candidate, candidate_s = profile_steps(tmp_path / "B", 4, extra_norm=4, memory=True)
    block = attribute(
        [
            ProfiledRound(
                ProfiledSide([read_trace(base)], base_s), ProfiledSide([read_trace(candidate)], candidate_s)
            )
        ]
    )
    grown = {row["op"]: row for row in block["allocations"]}
    assert "aten::native_layer_norm" in grown and grown["aten::native_layer_norm"]["base_mib_per_step"] == 0
    assert any(line.startswith("  allocates more: ") for line in block_lines("1", block))


def test_a_cause_spread_over_a_range_is_carried_by_the_range_whole(tmp_path: Path) -> None:
    """The forward run six times: every forward operator grows a little, and the forward range, with
    its operators inside, is an entry of the `ranges` list with the same figures as the operators'."""
    base, base_s = profile_steps(tmp_path / "A", 8)
    candidate, candidate_s = profile_steps(tmp_path / "B", 8, forwards=6)
    block = attribute(
        [
            ProfiledRound(
                ProfiledSide([read_trace(base)], base_s), ProfiledSide([read_trace(candidate)], candidate_s)
            )
        ]
    )
    ranges = {r["op"]: r for r in block["ranges"]}
    forward = ranges["forward"]
    # The sides ran one after the other here (not in turns), so a busy host moves any figure: the order
    # is asserted where the sides take turns (tests/gate/test_ab_explain.py), the figures' making here.
    assert forward["only_in"] is None and forward["candidate_ms_per_step"] > 0
    # Its share divides the profiled steps' own change (no decided one given), as the entries' do.
    assert forward["share_pct"] == pytest.approx(
        100 * forward["change_ms_per_step"] / block["measured"]["change_ms_per_step"]
    )
    line = next(line for line in block_lines("1", block) if "whole ranges" in line)
    assert line.startswith("  whole ranges (operators inside included): ") and "; " in line
    assert f"{block['ranges'][0]['op']} +" in line or f"{block['ranges'][0]['op']} -" in line


def test_what_went_away_from_a_slower_candidate_is_listed_apart(tmp_path: Path) -> None:
    """The candidate's GELU replaces the base's ReLU beside a new LayerNorm: the slowdown is theirs, and
    the ReLU it no longer runs (with its backward) is `offsetting`, kept in the entries and printed on a
    line of its own."""
    base, base_s = profile_steps(tmp_path / "A", 8)
    candidate, candidate_s = profile_steps(tmp_path / "B", 8, extra_norm=1, gelu=True)
    # The change as an A/B's deciding rounds give it (the sides here ran one after the other, so their
    # own change is as noisy as the host): offsetting entries carry 2% of it at least.
    block = attribute(
        [
            ProfiledRound(
                ProfiledSide([read_trace(base)], base_s), ProfiledSide([read_trace(candidate)], candidate_s)
            )
        ],
        decided_change_ms=0.5,
    )
    gone = {e["op"]: e for e in block["offsetting"]}
    backward = gone["aten::threshold_backward"]  # ReLU's backward: the larger half of it
    assert backward["only_in"] == "base" and backward["ci"][1] < 0
    assert backward["candidate_calls_per_step"] == 0 < backward["base_calls_per_step"]
    assert "aten::threshold_backward" in {e["op"] for e in block["entries"]}
    assert all(abs(e["change_ms_per_step"]) >= 0.01 for e in block["offsetting"])  # 2% of 0.5 ms
    line = next(line for line in block_lines("1", block) if "offsets part of it" in line)
    assert line.startswith("  took less time (offsets part of it): ")
    # The line names the first three, in their order: on a busy host a matmul the base side ran while
    # a neighbour spiked can rank above the ReLU's backward, so which three depends on the host.
    printed = line.removeprefix("  took less time (offsets part of it): ").split("; ")
    assert len(printed) == min(3, len(block["offsetting"]))
    for part, entry in zip(printed, block["offsetting"], strict=False):
        assert part.startswith(f"{entry['op']} -"), part
        assert part.endswith("(gone)") == (entry["only_in"] == "base"), part


def test_calls_per_step_show_a_cause_spread_thin(tmp_path: Path) -> None:
    """The forward run three times: each forward operator's calls triple, and the sides' operator
    counts say every operator ran more often."""
    base, base_s = profile_steps(tmp_path / "A", 6)
    candidate, candidate_s = profile_steps(tmp_path / "B", 6, forwards=3)
    block = attribute(
        [
            ProfiledRound(
                ProfiledSide([read_trace(base)], base_s), ProfiledSide([read_trace(candidate)], candidate_s)
            )
        ],
        # The change as an A/B's deciding rounds give it: slower. Six profiled steps alone can read
        # either way on a busy host, and the entries are ranked in the decided direction.
        decided_change_ms=1.0,
    )
    # The Net's forward operators, each run once per forward (the two Linears' twice). Which of them
    # are kept depends on the host (a busy host widens an operator's interval and it ranks below the
    # kept ones), so each one kept is checked, and at least one is.
    tripled = {"aten::addmm": (2, 6), "aten::linear": (2, 6), "aten::relu": (1, 3)}
    kept = [e for e in block["entries"] if e["op"] in tripled]
    assert kept, [e["op"] for e in block["entries"]]
    for entry in kept:
        assert (entry["base_calls_per_step"], entry["candidate_calls_per_step"]) == tripled[entry["op"]]
    calls = block["calls_per_step"]
    # Two more forwards, no more backwards or optimizer steps: a third more operators here.
    assert calls["candidate"] > 1.2 * calls["base"] > 0
    lines = block_lines("1", block)
    counted = next(line for line in lines if line.startswith("  operators run per step: "))
    assert counted.endswith(f"(x{calls['candidate'] / calls['base']:.2f})")
    for op, (before, after) in tripled.items():
        shown = [line for line in lines if f"{op} " in line and line[2:3].isdigit()]
        assert all(line.endswith(f"(calls/step {before} -> {after})") for line in shown)
