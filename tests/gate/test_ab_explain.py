"""A FAIL names its cause, with real runs: two commits of a git repository (tests/support/stack_repo.py),
the candidate's only change an operator planted in its forward (a cumulative sum over a copy of the
output, a metric nobody reads), real torchrun launches on this CPU, and the A/B stage a gate run calls
(`stage_env`, `stage_bench`, `stage_compare`, then `stage_ab`).

The A/B decides FAIL, then its explaining round runs (gate.ab.explain = "fail", the default): both sides
profile their measured steps, taking turns as the deciding rounds did, and the attribution names
`aten::cumsum` first, new in the candidate, with an interval above zero. compare.json, compare.md and
ab.json carry it; the traces are kept, gzipped, where the block says.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import make_config
from stack_repo import checked_out_side, commit, gate_run_through_ab

from benchgate.ab.runner import AB_FILE
from benchgate.attribution.trace_ops import read_trace
from benchgate.kit.files import read_json
from benchgate.results.comparison import load_comparison

PLANTED = "\n    ".join(
    [
        "class Planted(Stack):",
        "    def forward(self, model, batch):",
        "        out = model(batch)",
        "        wide = out.detach().repeat(64, 1)",
        "        for _ in range(10):",
        "            torch.cumsum(wide, dim=1)",
        "        return out",
        "return Planted()",
    ]
)


@pytest.mark.slow
@pytest.mark.serial
def test_a_fail_names_the_planted_operator(repo: Path, tmp_path: Path) -> None:
    base = commit(repo, "base", layers=8)
    planted = commit(repo, "a cumulative sum nobody reads", layers=8, body=PLANTED)
    config = make_config(
        tmp_path,
        bench={"workload": "stackwork:make_workload", "steps": 12, "warmup": 2},
        gate={"ab": {"steps": 12, "warmup": 2, "min_measured_s": 0.3, "min_rounds": 2, "max_rounds": 6}},
    )
    run_dir = tmp_path / "run"
    base_side = checked_out_side(repo, base, "base", tmp_path)
    comparison = gate_run_through_ab(
        config, repo, run_dir, base_side, checked_out_side(repo, planted, "candidate", tmp_path)
    )
    row = comparison.timing(1)
    assert row is not None and row.status == "FAIL", row

    block = comparison.attribution["1"]
    assert block["decision"] == "FAIL" and block["layout"] == "interleaved" and block["rounds"] == 1
    first = block["entries"][0]
    assert first["op"] == "aten::cumsum" and first["only_in"] == "candidate", block["entries"][:3]
    assert first["ci"][0] > 0 and first["base_ms_per_step"] == 0
    # The deciding rounds' change is what the shares divide; cumsum is most of it.
    assert block["shared_change_ms_per_step"] > 0 and first["share_pct"] > 30
    assert block["seconds"] > 0 and block["decision_seconds"] > 0
    # Whole, the bench's forward range holds the planted operator: the range that carries most.
    forward = block["ranges"][0]
    assert forward["op"] == "forward" and forward["ci"][0] > 0, block["ranges"][:3]

    # Kept where the block says: one trace per side (ws=1), each a real profile of the profiled steps.
    assert sorted(block["traces"]) == [
        f"ab/ws1/explain/round1/{label}/op-trace/rank0.pt.trace.json.gz" for label in ("A", "B")
    ]
    for path in block["traces"]:
        assert read_trace(run_dir / path).steps == block["steps_per_round"]

    # Every view the run writes carries it: compare.json read back, ab.json, compare.md.
    assert load_comparison(run_dir / "compare.json").attribution["1"] == block
    assert read_json(run_dir / "ab" / "ws1" / AB_FILE)["attribution"] == block
    markdown = (run_dir / "compare.md").read_text()
    assert "Why ws=1 is slower: 1 profiled round(s) per side" in markdown
    assert "  1. aten::cumsum  +" in markdown and "(new: only the candidate runs it)" in markdown
    assert "  whole ranges (operators inside included): forward +" in markdown
    # The deciding rounds are untouched by the explaining one: it is a round of its own.
    saved = read_json(run_dir / "ab" / "ws1" / AB_FILE)
    assert len(saved["rounds"]) == saved["decision"]["rounds"] >= 2


@pytest.mark.slow
@pytest.mark.serial
def test_an_explanation_that_fails_says_why_and_costs_nothing(tmp_path: Path) -> None:
    """A candidate whose workload no longer imports (decided FAIL earlier, say, by a flaky module):
    the profiled round's launch fails as a real torchrun launch does, and the block says why instead of
    raising, so the decision it explains stands."""
    from benchgate.ab.decision import ABDecision
    from benchgate.ab.explain import explain_or_why
    from benchgate.ab.runner import ABOutcome, Side

    good, broken = tmp_path / "good", tmp_path / "broken"
    for path, text in (
        (good, "from bg_test_workloads import sleepy as make_workload\n"),
        (broken, "raise ImportError('gone')\n"),
    ):
        path.mkdir()
        (path / "sidework.py").write_text(text)
    config = make_config(tmp_path, bench={"workload": "sidework:make_workload", "steps": 4, "warmup": 1})
    decided = ABDecision("FAIL", 4, -20.0, -25.0, -15.0, 0.95, 8.0, 2.0, "slower beyond -5% with confidence")
    outcome = ABOutcome(1, decided)
    block = explain_or_why(
        config,
        outcome,
        tmp_path / "ab" / "ws1",
        Side("base", None, (good,)),
        Side("candidate", None, (broken,)),
        0,
    )
    assert block["entries"] == [] and block["world_size"] == 1
    assert block["why"].startswith("the profiled rounds failed: A/B candidate: "), block["why"]
