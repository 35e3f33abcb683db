"""Every view of a verdict prints the same attribution lines: the terminal, compare.md, summary.md (the
step summary and the PR comment) and report.html; compare.json keeps the block as written. The block is
computed from real profiled steps (traces.py), never written by hand."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from traces import profile_steps

from benchgate.attribution.attribute import ProfiledRound, ProfiledSide, attribute
from benchgate.attribution.lines import attribution_lines
from benchgate.attribution.trace_ops import read_trace
from benchgate.checks.tables import markdown, print_verdict
from benchgate.publish import html_report
from benchgate.publish.ci_report import summary_markdown
from benchgate.results.comparison import TIMING, Check, Comparison


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    root = tmp_path_factory.mktemp("views")
    base, base_s = profile_steps(root / "A", 6)
    candidate, candidate_s = profile_steps(root / "B", 6, extra_norm=12)
    block = attribute(
        [
            ProfiledRound(
                ProfiledSide([read_trace(base)], base_s), ProfiledSide([read_trace(candidate)], candidate_s)
            )
        ],
        decided_change_ms=4.0,
    )
    block |= {
        "world_size": 1,
        "rounds": 1,
        "steps_per_round": 6,
        "traces": ["ab/ws1/explain/round1/A/op-trace/rank0.pt.trace.json.gz"],
    }
    row = Check(
        "tokens/s (ws=1)",
        "tok/s",
        900.0,
        baseline=1000.0,
        change=-10.0,
        status="FAIL",
        metric=TIMING,
        world_size=1,
        decided_by="ab",
        note="A/B decided",
    )
    return Comparison("cpu-test", "net", None, [row], attribution={"1": block})


def test_compare_json_keeps_the_block(comparison: Comparison) -> None:
    again = Comparison.from_dict(comparison.to_dict())
    assert again.attribution == comparison.attribution
    assert "attribution" not in Comparison("p", "w", None).to_dict()  # absent where nothing was explained


def test_every_view_prints_the_lines(comparison: Comparison) -> None:
    lines = attribution_lines(comparison)
    assert lines[0].startswith(
        "Why ws=1 is slower: 1 profiled round(s) per side (6 steps each) against the A/B's -10.0%"
    )
    assert any(
        "aten::native_layer_norm" in line and "(new: only the candidate runs it)" in line for line in lines
    )
    buffer = io.StringIO()
    print_verdict(comparison, Console(file=buffer, width=200))
    terminal = buffer.getvalue()
    md = markdown(comparison)
    summary = summary_markdown(comparison, {})
    page = html_report._table(comparison)
    for line in lines:
        assert line in terminal
        assert line in md and line in summary
        assert line.replace(">", "&gt;") in page.replace("&#x27;", "'")
    assert "```text\n" + lines[0] in md and "```text\n" + lines[0] in summary
