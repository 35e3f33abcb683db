"""`benchgate backfill A..B`, the plan: which commits of a range to gate, which MLflow already has, and
what became of each, as a table. Pure: git and MLflow are read elsewhere (ranges/commits.py,
tracking/backfill_index.py), the runs are made in ranges/backfill_run.py.

    range     the commits of A..B along first parents, oldest first (ranges/commits.py)
    every N   the 1st commit of the range, every N-th after it, and always B: `--every 5` over 12
              commits keeps the 1st, 6th, 11th and 12th
    skip      a kept commit that MLflow holds a gate run of for this setup (same machine profile, bench
              configuration and world sizes: tracking/backfill_index.py) is not run again, unless forced
    rows      one per kept commit: ran (its new run), skipped (the newest run it already had), failed
              (why), or on a cluster submitted / attached (the KFP run)

The exit code is 0 whatever the verdicts (a backfill measures; `benchgate history --check` judges the
series), and 3 only when every commit that was to run failed to: then nothing was measured at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from benchgate.errors import EXIT_PASS, EXIT_RUN_FAILED, ConfigError
from benchgate.ranges.commits import RangeCommit
from benchgate.results.figures import HistoryPoint, run_tokens_per_s

# The summary shows per commit the run's tokens/s at one rank (results/figures.run_tokens_per_s), as
# `benchgate history` and the verdict table show it.
Status = Literal["ran", "skipped", "failed", "submitted", "attached"]


@dataclass(frozen=True)
class PlannedCommit:
    commit: RangeCommit
    existing: HistoryPoint | None  # the newest gate run of the setup MLflow holds for it, if any
    run: bool  # whether to gate it: no run of the setup yet, or --force


@dataclass(frozen=True)
class Row:
    """What became of one commit of the backfill."""

    commit: RangeCommit
    status: Status
    verdict: str = ""
    tokens_per_s: float | None = None
    run_id: str = ""  # the MLflow run (ran, skipped), or the KFP run (submitted, attached)
    note: str = ""  # why it failed; the KFP run's name


def every_nth(commits: Sequence[RangeCommit], every: int) -> list[RangeCommit]:
    """The 1st commit, every `every`-th after it, and the last (B), in order."""
    if every < 1:
        raise ConfigError(f"--every: got {every} (expected an integer >= 1)")
    kept = list(commits[::every])
    if commits and kept[-1] != commits[-1]:
        kept.append(commits[-1])
    return kept


def plan(
    commits: Sequence[RangeCommit], measured: Mapping[str, Sequence[HistoryPoint]], force: bool
) -> list[PlannedCommit]:
    """Each commit with the newest run MLflow already holds of it (`measured`, oldest first per
    commit), to be run where there is none, or always with `force`."""
    planned = []
    for commit in commits:
        runs = measured.get(commit.sha) or []
        existing = runs[-1] if runs else None
        planned.append(PlannedCommit(commit, existing, run=force or existing is None))
    return planned


def skipped_row(step: PlannedCommit) -> Row:
    assert step.existing is not None
    point = step.existing
    return Row(
        step.commit,
        "skipped",
        point.verdict or "",
        run_tokens_per_s(point.figures).get(1),
        str(point.run_id or ""),
    )


def changes_vs_previous(rows: Sequence[Row]) -> list[float | None]:
    """Each row's tokens/s change in percent from the nearest earlier row that has a figure."""
    changes: list[float | None] = []
    previous: float | None = None
    for row in rows:
        value = row.tokens_per_s
        changes.append(None if value is None or not previous else 100.0 * (value / previous - 1.0))
        if value is not None:
            previous = value
    return changes


def exit_code(rows: Sequence[Row]) -> int:
    """0 done, whatever the verdicts; 3 when every commit that was to run failed to."""
    attempted = [row for row in rows if row.status != "skipped"]
    if attempted and all(row.status == "failed" for row in attempted):
        return EXIT_RUN_FAILED
    return EXIT_PASS


def counts(rows: Sequence[Row]) -> str:
    """How the commits went, e.g. "12 commits: 9 ran, 2 skipped, 1 failed" (in a fixed order)."""
    order: tuple[Status, ...] = ("ran", "submitted", "attached", "skipped", "failed")
    parts = [f"{n} {status}" for status in order if (n := sum(row.status == status for row in rows))]
    return f"{len(rows)} commit{'s' if len(rows) != 1 else ''}: {', '.join(parts)}"


def summary_cells(rows: Sequence[Row]) -> list[list[str]]:
    """The summary's cells, row by row, under SUMMARY_COLUMNS (the terminal and summary.md share them)."""
    cells = []
    for row, change in zip(rows, changes_vs_previous(rows), strict=True):
        if row.status == "skipped":
            run = f"skipped ({row.run_id})" if row.run_id else "skipped"
        elif row.status == "failed":
            run = f"failed: {row.note}"
        elif row.status in ("submitted", "attached"):
            run = f"{row.status}: {row.run_id} ({row.note})"
        else:
            run = row.run_id or row.note
        cells.append(
            [
                row.commit.sha[:12],
                row.commit.subject,
                row.verdict or "—",
                f"{row.tokens_per_s:,.0f}" if row.tokens_per_s is not None else "—",
                f"{change:+.1f}%" if change is not None else "—",
                run,
            ]
        )
    return cells


SUMMARY_COLUMNS = ("commit", "subject", "verdict", "tok/s ws1", "vs previous", "run")


def summary_markdown(title: str, rows: Sequence[Row]) -> str:
    """The summary as a Markdown table (summary.md), one line per commit, oldest first."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    lines = [f"## {title}", "", counts(rows), "", line(SUMMARY_COLUMNS), line(["---"] * len(SUMMARY_COLUMNS))]
    lines += [line(cells) for cells in summary_cells(rows)]
    return "\n".join(lines) + "\n"
