"""Tables for people: the verdict as a rich table for the terminal and as Markdown for CI logs.

compare.md leads with what a reader acts on: the verdict, then the next steps that would decide it
(`next_steps`), then the table; each row's full rule and notes are folded under the table in a
`<details>` block ("How this was decided"), since a verdict's reader rarely needs the statistics.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchgate.checks.next_steps import next_steps
from benchgate.results.comparison import TIMING, Check, Comparison

STATUS_STYLE = {
    "PASS": "green",
    "WARN": "yellow",
    "UNKNOWN": "bold magenta",
    "FAIL": "bold red",
    "NEW": "cyan",
    "INFO": "dim",
}


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    magnitude = abs(value)
    if magnitude >= 1000:
        text = f"{value:,.0f}"
    elif magnitude >= 10:
        text = f"{value:.1f}"
    elif magnitude >= 0.01 or value == 0:
        text = f"{value:.3f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".rstrip()


def _change(check: Check) -> str:
    if check.change is None:
        return "—"
    return f"{check.change:+.2f}{check.change_unit}" if check.change_unit else f"{check.change:+.3g}"


def _interval(check: Check) -> str:
    if check.ci_low is None or check.ci_high is None:
        return "—"
    if check.change_unit == "%":
        return f"[{check.ci_low:+.1f}, {check.ci_high:+.1f}]%"
    return f"[{check.ci_low:+.3g}, {check.ci_high:+.3g}]"


def _needs_footnote(check: Check) -> bool:
    # Timing rows always carry their rule; other rows only when they say more than PASS.
    return check.metric == TIMING or (check.status not in ("PASS", "INFO", "NEW") and bool(check.rule))


def footnotes(comparison: Comparison) -> list[tuple[str, Check]]:
    """(marker, check) for every row whose rule and notes are printed under the table."""
    marked = [c for c in comparison.checks if _needs_footnote(c) or c.note]
    return [(f"[{i}]", c) for i, c in enumerate(marked, start=1)]


def rows(comparison: Comparison) -> list[list[str]]:
    markers = {id(c): marker for marker, c in footnotes(comparison)}
    return [
        [
            f"{c.name} {markers[id(c)]}" if id(c) in markers else c.name,
            _number(c.baseline, c.unit),
            _number(c.current, c.unit),
            _change(c),
            _interval(c),
            c.status,
        ]
        for c in comparison.checks
    ]


def footnote_lines(comparison: Comparison) -> list[str]:
    """Under the table: each marked row's whole rule (every condition) and its notes."""
    lines = []
    for marker, check in footnotes(comparison):
        parts = [f"rule: {check.rule}"] if check.rule else []
        if check.note:
            parts.append(check.note)
        lines.append(f"{marker} {check.name}: {check.status}. " + ". ".join(parts))
    return lines


HEADER = ["check", "baseline", "current", "change", "CI of change", "status"]


def print_verdict(comparison: Comparison, console: Console) -> None:
    """The verdict for a terminal: six columns (fits 120 columns), rules and notes below.

    Names, rules and notes are data (a workload's name, an MLflow error text), never markup: each is
    escaped, so a `[/x]` in them prints as written instead of raising rich's MarkupError.
    """
    table = Table(
        title=escape(f"benchgate · {comparison.workload} · {comparison.machine_profile}"),
        title_justify="left",
    )
    for column in HEADER:
        table.add_column(column, overflow="fold")
    for row in rows(comparison):
        status = row[-1]
        table.add_row(*(escape(cell) for cell in row[:-1]), f"[{STATUS_STYLE[status]}]{status}[/]")
    console.print(table)
    for line in footnote_lines(comparison):
        console.print(escape(line), highlight=False)
    for note in comparison.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    style = STATUS_STYLE[comparison.verdict]
    console.print(f"verdict: [{style}]{comparison.verdict}[/] (exit {comparison.exit_code})")


DETAILS_SUMMARY = "How this was decided"
# Where no result directory is given, commands name it DIR: compare.md and report.html sit in it.
DIR_LEGEND = "DIR: this run's result directory (the one holding this report)"


def step_lines(comparison: Comparison, out_dir: Path | None) -> list[str]:
    """The next steps as printed under a verdict; with no `out_dir`, a last line saying what DIR is."""
    steps = next_steps(comparison, out_dir)
    if out_dir is None and any("DIR" in step for step in steps):
        steps.append(DIR_LEGEND)
    return steps


def markdown(comparison: Comparison, out_dir: Path | None = None) -> str:
    """compare.md: the verdict, what to do next, the table, then how each row was decided (folded)."""
    lines = [f"### benchgate verdict: **{comparison.verdict}** (exit {comparison.exit_code})", ""]
    steps = step_lines(comparison, out_dir)
    if len(steps) == 1:
        lines += [f"**Next:** {steps[0]}", ""]
    elif steps:
        lines += ["**Next:**", "", *(f"- {step}" for step in steps), ""]
    lines += [
        f"workload `{comparison.workload}` on `{comparison.machine_profile}`",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(comparison)]
    explained = footnote_lines(comparison)
    if explained:
        # GitHub renders Markdown inside <details> only after a blank line.
        lines += ["", f"<details><summary>{DETAILS_SUMMARY}</summary>", ""]
        lines += [f"- {line}" for line in explained]
        lines += ["", "</details>"]
    lines += [f"\n> {note}" for note in comparison.notes]
    return "\n".join(lines) + "\n"
