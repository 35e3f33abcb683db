"""A suite's verdicts grouped by entry: one table for the terminal, the same as suite.md.

Each entry's rows are its own comparison's (compare.json in its directory, as `benchgate run` prints
them: checks/tables.py); an entry that could not run has one row, its error. Rules and notes stay in
each entry's compare.md: a suite's table is for finding the entry to look at.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchgate.checks.tables import HEADER, STATUS_STYLE, rows
from benchgate.errors import BenchgateError
from benchgate.results.comparison import Comparison, load_comparison
from benchgate.suite.coverage import coverage_lines, shows_coverage

SUITE_MD = "suite.md"
_FOOTNOTE = re.compile(r" \[\d+\]$")
ERROR = "ERROR"
COLUMNS = ["entry", *HEADER]


def entry_rows(suite_dir: Path, entry: dict[str, Any]) -> list[list[str]]:
    """The table rows of one suite.json entry: its checks, or its error (or why it has neither)."""
    if entry["state"] == "error":
        return [[str(entry["error"]), "—", "—", "—", "—", ERROR]]
    if entry["state"] not in ("done", "skipped"):  # skipped: measured before, its results kept
        return [[f"not run ({entry['state']})", "—", "—", "—", "—", "—"]]
    comparison = _comparison(suite_dir, entry)
    if isinstance(comparison, str):
        return [[comparison, "—", "—", "—", "—", ERROR]]
    # The footnote markers ([1]) point at rules printed under `benchgate run`'s table; here the rules are
    # in each entry's compare.md, so the markers would point at nothing.
    return [[_FOOTNOTE.sub("", row[0]), *row[1:]] for row in rows(comparison)]


def _comparison(suite_dir: Path, entry: dict[str, Any]) -> Comparison | str:
    try:
        return load_comparison(suite_dir / str(entry["out"]) / "compare.json")
    except BenchgateError as e:  # a directory damaged since: say so in its row, keep the others
        return f"compare.json unreadable: {e}"


def _title(record: dict[str, Any]) -> str:
    return f"benchgate suite · {record['suite']} · exit {record['exit_code']}"


def _entry_label(entry: dict[str, Any]) -> str:
    verdict = entry["verdict"] or ("ERROR" if entry["state"] == "error" else entry["state"])
    return f"{entry['name']} ({verdict}{', measured before' if entry['state'] == 'skipped' else ''})"


def print_suite_table(suite_dir: Path, record: dict[str, Any], console: Console) -> None:
    """The table grouped by entry (a section each), then the suite's exit code."""
    table = Table(title=escape(_title(record)), title_justify="left")
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for entry in record["entries"]:
        for i, row in enumerate(entry_rows(suite_dir, entry)):
            label = _entry_label(entry) if i == 0 else ""
            status = row[-1]
            style = STATUS_STYLE.get(status, "bold red")
            cells = (escape(cell) for cell in [label, *row[:-1]])
            table.add_row(*cells, f"[{style}]{status}[/]" if status != "—" else status)
        table.add_section()
    console.print(table)
    if record.get("family"):
        console.print(escape(str(record["family"]["sentence"])))
    if shows_coverage(record):
        for line in coverage_lines(record):
            console.print(escape(line), highlight=False)


def suite_markdown(suite_dir: Path, record: dict[str, Any]) -> str:
    """suite.md: the suite's exit code, then one section per entry with its rows."""
    lines = [f"### {_title(record)}", ""]
    lines += [f"| {' | '.join(COLUMNS)} |", "|" + "---|" * len(COLUMNS)]
    for entry in record["entries"]:
        for i, row in enumerate(entry_rows(suite_dir, entry)):
            label = f"**{_entry_label(entry)}**" if i == 0 else ""
            cells = [label, *(cell.replace("|", "\\|") for cell in row)]
            lines.append(f"| {' | '.join(cells)} |")
    if record.get("family"):  # suite.json written before the family plan has none
        lines += ["", str(record["family"]["sentence"])]
    if shows_coverage(record):  # which entries ran, and why each other one could not
        lines += ["", *coverage_lines(record)]
    lines += ["", "Each entry's rules and notes: `<entry>/compare.md`; its report: `<entry>/report.html`."]
    return "\n".join(lines) + "\n"
