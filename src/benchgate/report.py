"""Tables for people: the verdict as a rich table for the terminal and as Markdown for CI logs."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from benchgate.compare import Check, Comparison

STATUS_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "NEW": "cyan", "INFO": "dim"}


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


def rows(comparison: Comparison) -> list[list[str]]:
    return [
        [
            c.name,
            _number(c.baseline, c.unit),
            _number(c.current, c.unit),
            _change(c),
            _interval(c),
            "—" if c.p_value is None else f"{c.p_value:.2g}",
            c.status,
            c.rule,
            c.note,
        ]
        for c in comparison.checks
    ]


HEADER = ["check", "baseline", "current", "change", "95% CI of change", "p", "status", "rule", "note"]


def print_verdict(comparison: Comparison, console: Console) -> None:
    table = Table(
        title=f"benchgate · {comparison.workload} · {comparison.machine_profile}", title_justify="left"
    )
    for column in HEADER:
        table.add_column(column, overflow="fold")
    for row in rows(comparison):
        status = row[6]
        table.add_row(*row[:6], f"[{STATUS_STYLE[status]}]{status}[/]", *row[7:])
    console.print(table)
    for note in comparison.notes:
        console.print(f"[yellow]note:[/] {note}")
    style = STATUS_STYLE[comparison.verdict]
    console.print(f"verdict: [{style}]{comparison.verdict}[/] (exit {comparison.exit_code})")


def markdown(comparison: Comparison) -> str:
    lines = [
        f"### benchgate verdict: **{comparison.verdict}**",
        "",
        f"workload `{comparison.workload}` on `{comparison.machine_profile}`",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(comparison)]
    lines += [f"\n> {note}" for note in comparison.notes]
    return "\n".join(lines) + "\n"
