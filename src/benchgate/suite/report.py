"""A suite's Pareto view, written into its output directory: `write_suite_report(suite_dir)`.

Contract (what `benchgate suite report DIR` and the end of `benchgate suite run` call):

    write_suite_report(suite_dir: Path) -> list[Path]

reads `suite_dir/suite.json` and the result directory of every entry whose state is "done" (its `out`,
relative to `suite_dir`), and writes, replacing earlier copies:

    pareto.png    two panels, tokens/s against perplexity and against peak memory, the frontier marked
                  and joined, dominated entries grey and named
    pareto.md     the entries' figures, each one's standing per panel ("frontier" or "dominated by X"),
                  one sentence per dominated entry, and what was left out and why
    suite.html    one page: pareto.png inlined, the same table, and a link to each entry's own report

It returns those three paths in that order. Entries that are not done, or whose results cannot be read,
keep a row saying why and get no point; an entry without eval has no perplexity, so it is left out of
that panel only. Errors (ConfigError, exit 2): suite.json missing or damaged (names the file and the
field), or no entry with readable results (names the directory).

tokens/s is the run's tokens/s (as the verdict table shows it) at the largest world size every plotted
entry ran (see entry_figures.choose_world_size); peak memory is read at that same world size. Where the
entries' workloads count other units (an image family's images), the views name the rate after them
("images/s"); entries of another unit than the most common one are not plotted (entry_figures).
"""

from __future__ import annotations

from pathlib import Path

from benchgate.kit.files import write_text
from benchgate.suite.entry_figures import OTHER_UNIT, EntryFigures, SuiteFigures, read_suite_figures
from benchgate.suite.pareto import OBJECTIVES, TIES, Panel, Point, frontier
from benchgate.suite.pareto_plot import pareto_png
from benchgate.suite.suite_page import suite_html

PNG_FILE, MD_FILE, HTML_FILE = "pareto.png", "pareto.md", "suite.html"


def ties_text(rate: str) -> str:
    """What "better" means here (pareto.Ties): said under the title, so a tie is not read as a trade-off."""
    return (
        f"Figures closer than their noise are ties, neither better: {rate} within "
        f"{TIES.tokens_per_s_pct:g}% (or within the wider of two entries' measured p50 intervals), "
        f"perplexity within {TIES.perplexity_pct:g}%, peak memory within {TIES.peak_memory_pct:g}%."
    )


def header(figures: SuiteFigures) -> list[str]:
    """The table's columns, the speed's naming its unit ("tokens/s", "images/s") and world size."""
    speed = tokens_label(figures).removesuffix(" (higher is better)")
    rate = figures.rate
    return [
        "entry",
        "verdict",
        speed,
        "perplexity",
        "peak memory",
        f"{rate} vs. perplexity",
        f"{rate} vs. peak memory",
    ]


def tokens_label(figures: SuiteFigures) -> str:
    """The speed's axis and column, its unit and world size included."""
    if figures.common_world_size is not None:
        return f"{figures.rate} at world size {figures.common_world_size} (higher is better)"
    return f"{figures.rate} at each entry's largest world size (higher is better)"


def points(figures: SuiteFigures) -> list[Point]:
    return [
        Point(
            e.name,
            e.tokens_per_s,
            e.perplexity,
            e.peak_memory_bytes,
            tokens_per_s_spread_pct=e.tokens_per_s_spread_pct,
            perplexity_missing=e.perplexity_missing,
        )
        for e in figures.entries
        if e.tokens_per_s is not None
    ]


def panels(figures: SuiteFigures) -> list[Panel]:
    found = points(figures)
    return [frontier(found, better=objective, rate=figures.rate) for objective in OBJECTIVES]


def _tokens_cell(entry: EntryFigures, common: int | None) -> str:
    assert entry.tokens_per_s is not None
    text = f"{entry.tokens_per_s:,.0f}"
    return text if common is not None else f"{text} (ws={entry.world_size})"


def table_rows(figures: SuiteFigures, found: list[Panel]) -> list[list[str]]:
    """One row per entry of suite.json, in its order: the HEADER columns, as text."""
    rows = []
    for e in figures.entries:
        verdict = e.verdict or "—"
        if e.tokens_per_s is None:
            why = "results unreadable" if e.state in ("done", "skipped") else e.state  # the notes say more
            if e.skipped and e.skipped.startswith(OTHER_UNIT):
                why = "another unit"
            rows.append([e.name, verdict, "—", "—", "—", *[f"not plotted: {why}"] * len(found)])
            continue
        rows.append(
            [
                e.name,
                verdict,
                _tokens_cell(e, figures.common_world_size),
                "—" if e.perplexity is None else f"{e.perplexity:,.2f}",
                "—" if e.peak_memory_bytes is None else f"{e.peak_memory_bytes / 2**20:,.1f} MiB",
                *(panel.standing(e.name) for panel in found),
            ]
        )
    return rows


def notes(figures: SuiteFigures, found: list[Panel]) -> list[str]:
    """The sentences under the table: who dominates whom and why, and what has no point where."""
    lines = [note for panel in found for note in panel.notes()]
    lines += [f"{e.name} is not plotted: {e.skipped}" for e in figures.entries if e.skipped]
    if figures.common_world_size is None:
        lines.append(
            f"The entries share no world size: each one's {figures.rate} and peak memory are read at its own "
            "largest, which favours entries run on more ranks."
        )
    return [" ".join(line.split()) for line in lines]  # one line each, whatever an error message held


def markdown(figures: SuiteFigures, found: list[Panel]) -> str:
    columns = header(figures)
    lines = [
        f"# Suite {figures.suite}: the Pareto view",
        "",
        f"Higher {figures.rate} is better; lower perplexity and lower peak memory are better. An entry is "
        "dominated when another is at least as fast and at least as good on the panel's figure, and "
        f"better on one of them. {ties_text(figures.rate)}",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(figures, found)]
    lines.append("")
    lines += [f"- {note}" for note in notes(figures, found)]
    return "\n".join(lines).rstrip() + "\n"


def write_suite_report(suite_dir: Path) -> list[Path]:
    """pareto.png, pareto.md and suite.html of the suite in `suite_dir` (see the module's docstring)."""
    suite_dir = Path(suite_dir)
    figures = read_suite_figures(suite_dir)
    found = panels(figures)
    png = pareto_png(found, tokens_label(figures), f"Suite {figures.suite}: the Pareto view")
    rows, lines = table_rows(figures, found), notes(figures, found)
    page = suite_html(figures, png, header(figures), rows, lines, ties_text(figures.rate))
    return [
        _write_bytes(suite_dir / PNG_FILE, png),
        write_text(suite_dir / MD_FILE, markdown(figures, found)),
        write_text(suite_dir / HTML_FILE, page),
    ]


def _write_bytes(path: Path, data: bytes) -> Path:
    # Through a temporary file and a rename, as kit/files.py writes text: a reader never sees half a PNG.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path
