from __future__ import annotations

import io

from rich.console import Console

from benchgate.compare import Check, Comparison
from benchgate.report import markdown, print_verdict


def comparison() -> Comparison:
    result = Comparison("cpu-X-x2_torch2.13.0", "gpt-tiny", "/b")
    result.checks += [
        Check(
            "tokens/s p50 (ws=1)",
            "tok/s",
            8000.0,
            10000.0,
            -20.0,
            "%",
            -22.0,
            -18.0,
            1e-9,
            "FAIL if drop > 5% and p < 0.05",
            "FAIL",
            "noise floor -3.0% (5 runs)",
        ),
        Check("perplexity (held-out)", "", 2.378, 2.378, 0.0, "%", rule="FAIL if increase > 1.5%"),
    ]
    result.notes.append("a note for the reader")
    return result


def test_markdown_carries_verdict_rows_and_notes() -> None:
    text = markdown(comparison())
    assert "### benchgate verdict: **FAIL**" in text
    assert (
        "| tokens/s p50 (ws=1) | 10,000 tok/s | 8,000 tok/s | -20.00% | [-22.0, -18.0]% | 1e-09 | FAIL |"
        in text
    )
    assert "| FAIL | FAIL if drop > 5% and p < 0.05 | noise floor -3.0% (5 runs) |" in text
    assert "> a note for the reader" in text
    assert text.count("\n|") == 4  # header, rule, two rows


def test_terminal_table_ends_with_verdict_and_exit_code() -> None:
    buffer = io.StringIO()
    print_verdict(comparison(), Console(file=buffer, width=200, color_system=None))
    output = buffer.getvalue()
    assert "perplexity (held-out)" in output
    assert output.rstrip().endswith("verdict: FAIL (exit 1)")
