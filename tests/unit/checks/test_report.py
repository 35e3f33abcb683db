from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from benchgate.checks.tables import markdown, print_verdict
from benchgate.results.comparison import Check, Comparison


def comparison() -> Comparison:
    result = Comparison("cpu-X-x2_torch2.13.0", "gpt-tiny", "/b")
    result.checks += [
        Check(
            "tokens/s (ws=1)",
            "tok/s",
            8000.0,
            10000.0,
            -20.0,
            "%",
            -22.0,
            -18.0,
            rule="FAIL if the upper bound is below -5%, PASS if the lower bound is above it",
            status="FAIL",
            note="run-to-run noise 1.0%",
            metric="tokens_per_s",
            world_size=1,
            decided_by="screen",
        ),
        Check("perplexity (held-out)", "", 2.378, 2.378, 0.0, "%", rule="FAIL if increase > 1.5%"),
    ]
    result.notes.append("a note for the reader")
    return result


def test_markdown_carries_verdict_rows_rules_and_notes() -> None:
    text = markdown(comparison())
    assert "### benchgate verdict: **FAIL**" in text
    assert "| tokens/s (ws=1) [1] | 10,000 tok/s | 8,000 tok/s | -20.00% | [-22.0, -18.0]% | FAIL |" in text
    assert (
        "- [1] tokens/s (ws=1): FAIL. rule: FAIL if the upper bound is below -5%, PASS if the lower bound "
        "is above it. run-to-run noise 1.0%" in text
    )
    assert "| perplexity (held-out) | 2.378 | 2.378 | +0.00% | — | PASS |" in text
    assert "> a note for the reader" in text
    assert text.count("\n|") == 4  # header, rule, two rows


def test_terminal_table_fits_120_columns_and_ends_with_verdict_and_exit_code() -> None:
    buffer = io.StringIO()
    print_verdict(comparison(), Console(file=buffer, width=120, color_system=None))
    output = buffer.getvalue()
    table = output.split("[1] tokens/s")[0]
    assert "perplexity (held-out)" in table
    # One line per row: nothing in the table wrapped.
    assert sum("tokens/s (ws=1)" in line for line in table.splitlines()) == 1
    assert all(len(line) <= 120 for line in output.splitlines())
    assert output.rstrip().endswith("verdict: FAIL (exit 1)")


def test_terminal_prints_names_notes_and_rules_as_text_not_markup() -> None:
    # Notes carry remote text (an MLflow error, a workload's name): rich must not read it as markup.
    result = Comparison("cpu-X-x2_torch2.13.0", "wl[/x]", None)
    result.checks.append(
        Check("t [bold]x[/bold]", "u", 1.0, note="MLflow said [/x] and [red]no[/red]", rule="rule [/]")
    )
    result.notes.append("unreachable: [/mlflow]")
    buffer = io.StringIO()
    print_verdict(result, Console(file=buffer, width=200, color_system=None))
    output = buffer.getvalue()
    assert "benchgate · wl[/x] · cpu-X-x2_torch2.13.0" in output
    assert "t [bold]x[/bold] [1]" in output
    assert "[1] t [bold]x[/bold]: PASS. rule: rule [/]. MLflow said [/x] and [red]no[/red]" in output
    assert "note: unreachable: [/mlflow]" in output


def unknown_comparison() -> Comparison:
    """The screen could not decide ws=1 and no A/B ran: the row as compare writes it."""
    result = comparison()
    result.checks[0] = replace(
        result.checks[0],
        status="UNKNOWN",
        note="the interval straddles -5%: run-to-run noise 3.0% is too large",
    )
    return result


def test_markdown_puts_the_next_step_under_the_verdict_and_folds_the_rules() -> None:
    text = markdown(unknown_comparison(), Path("/runs/r1"))
    head, table_and_rest = text.split("\n| check |", 1)
    assert head.startswith("### benchgate verdict: **UNKNOWN** (exit 4)\n\n**Next:** ")
    assert "`benchgate run --base origin/main`" in head
    details = table_and_rest.split("<details><summary>How this was decided</summary>\n\n", 1)[1]
    assert details.startswith("- [1] tokens/s (ws=1): UNKNOWN. rule: FAIL if the upper bound")
    assert "\n</details>\n" in details
    assert text.rstrip().endswith("> a note for the reader")


def test_markdown_without_a_directory_says_what_dir_is() -> None:
    resumable = unknown_comparison()
    resumable.checks[0] = replace(
        resumable.checks[0], decided_by="ab", note="undecided after 27 rounds (gate.ab.max_rounds)"
    )
    text = markdown(resumable)
    assert "**Next:**\n\n- the A/B (ws=1) ran out of its budget" in text
    assert "`benchgate run --resume DIR`" in text
    assert "- DIR: this run's result directory" in text


def test_markdown_of_a_pass_has_no_next_step() -> None:
    passed = Comparison("p", "w", None, [Check("made up", "%", 1.0)])
    text = markdown(passed)
    assert "Next" not in text and "<details>" not in text  # nothing to fold either
