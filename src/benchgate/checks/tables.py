"""Tables for people: the verdict as a rich table for the terminal and as Markdown for CI logs.

compare.md leads with what a reader acts on: the verdict, then the next steps that would decide it
(`next_steps`), then the table; each row's full rule and notes are folded under the table in a
`<details>` block ("How this was decided"), since a verdict's reader rarely needs the statistics.

The columns mean one thing in every row: *baseline* the stored baseline's figure, *current* this run's
(its bench: the tokens/s MLflow, `benchgate history` and the report show). A row an A/B decided has a
second line under it, `↳ <check>, A/B`, with the A/B's own pair ("A/B base", "A/B candidate": another,
paired measurement) and the paired change and interval that decided. Where the figures alone would not
explain a status (an A/B or unchanged code decided it, or a PASS lies beyond its tolerance within the
noise), the status cell says why (`why`); the footnote starts with the rule that decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchgate.attribution.lines import attribution_lines
from benchgate.checks.next_steps import next_steps
from benchgate.checks.paired import shown_figures
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


def _span(low: float, high: float, unit: str) -> str:
    return f"[{low:+.1f}, {high:+.1f}]{unit}"


def why(check: Check) -> str:
    """Why the row's status is what its figures alone would not say, in the row itself: what decided it
    where that is not the change shown beside it (an A/B, unchanged code), and a PASS whose change is
    beyond its tolerance (within noise). Empty where the figures speak for themselves."""
    unit = "%" if check.change_unit == "%" else f" {check.change_unit}"
    if check.decided_by == "ab" and check.change is not None:
        # An UNKNOWN the A/B reached (its budget ran out: the note says which); a changed setup keeps
        # the A/B's status and gets its own environment row (ab/environment.py).
        verb = "A/B decided" if check.status in ("PASS", "FAIL") else "A/B"
        paired = f"{verb}: paired {check.change:+.1f}{unit}"
        if check.ci_low is not None and check.ci_high is not None:
            paired += f" {_span(check.ci_low, check.ci_high, unit)}"
        return paired
    if check.decided_by == "unchanged":
        return "unchanged code: the baseline's own commit and setup"
    if check.decided_by == "host":  # ab/host_fit.py: the note says how many cores it wanted
        return f"not A/B'd: too few cores for ws={check.world_size}"
    beyond = (
        check.status == "PASS"
        and check.tolerance is not None
        and check.change is not None
        and check.change < -check.tolerance
    )
    if beyond and check.ci_low is not None and check.ci_high is not None:
        span = _span(check.ci_low, check.ci_high, unit)
        if check.ci_low <= 0 <= check.ci_high:
            return f"within noise: interval {span} includes 0"
        return f"within noise: interval {span} reaches above -{check.tolerance:g}{unit}"
    return ""


@dataclass(frozen=True)
class Row:
    """One line of the verdict table: its cells before the status, its status ("—" for a row that only
    shows figures) and why (`why`)."""

    cells: list[str]
    status: str
    why: str = ""

    def status_text(self) -> str:
        return f"{self.status}: {self.why}" if self.why else self.status


def _raw_change(check: Check, baseline: float | None, current: float | None) -> str:
    """The change between the two figures a row shows, where it is not the change that decided it."""
    if baseline is None or current is None or baseline == 0:
        return "—"
    if check.change_unit == "%":
        return f"{100.0 * (current / baseline - 1.0):+.2f}%"
    return f"{current - baseline:+.2f}{check.change_unit}"


def table_rows(comparison: Comparison) -> list[Row]:
    """The verdict table's lines. A row an A/B decided shows the stored baseline's figure and this run's
    (with the change between them), and under it a line of the A/B's own pair, labelled as such, with
    the paired change and interval that decided (checks/paired.py)."""
    markers = {id(c): marker for marker, c in footnotes(comparison)}
    lines = []
    for c in comparison.checks:
        name = f"{c.name} {markers[id(c)]}" if id(c) in markers else c.name
        shown = shown_figures(c)
        if not shown.paired:
            cells = [name, _number(c.baseline, c.unit), _number(c.current, c.unit), _change(c), _interval(c)]
            lines.append(Row(cells, c.status, why(c)))
            continue
        change = _raw_change(c, shown.baseline, shown.current)
        cells = [name, _number(shown.baseline, c.unit), _number(shown.current, c.unit), change, "—"]
        lines.append(Row(cells, c.status, why(c)))
        pair = [
            f"↳ {c.name}, A/B",
            f"A/B base {_number(shown.ab_base, c.unit)}",
            f"A/B candidate {_number(shown.ab_candidate, c.unit)}",
            _change(c),
            _interval(c),
        ]
        lines.append(Row(pair, "—"))
    return lines


def rows(comparison: Comparison) -> list[list[str]]:
    """The table's lines as cells, the status last (without the why: a suite's table, for finding the
    entry to look at, keeps its status column to the status)."""
    return [[*row.cells, row.status] for row in table_rows(comparison)]


def footnote_lines(comparison: Comparison) -> list[str]:
    """Under the table: each marked row's whole rule (every condition: the one that decided, first) and
    its notes."""
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
    for row in table_rows(comparison):
        style = STATUS_STYLE.get(row.status, "dim")
        status = f"[{style}]{row.status}[/]" + (f": {escape(row.why)}" if row.why else "")
        table.add_row(*(escape(cell) for cell in row.cells), status)
    console.print(table)
    for line in footnote_lines(comparison):
        console.print(escape(line), highlight=False)
    for line in attribution_lines(comparison):  # what an explained A/B's change is made of
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


def why_block(comparison: Comparison) -> list[str]:
    """The attribution's lines as a Markdown code block (they are aligned text), or nothing."""
    why = attribution_lines(comparison)
    return ["", "```text", *why, "```"] if why else []


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
    lines += ["| " + " | ".join([*row.cells, row.status_text()]) + " |" for row in table_rows(comparison)]
    lines += why_block(comparison)
    explained = footnote_lines(comparison)
    if explained:
        # GitHub renders Markdown inside <details> only after a blank line.
        lines += ["", f"<details><summary>{DETAILS_SUMMARY}</summary>", ""]
        lines += [f"- {line}" for line in explained]
        lines += ["", "</details>"]
    lines += [f"\n> {note}" for note in comparison.notes]
    return "\n".join(lines) + "\n"
