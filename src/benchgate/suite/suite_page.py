"""suite.html: a suite's one page. The Pareto picture, the table of entries with each one's standing, the
sentences that explain it, and a link to every entry's own gate report (the report.html its run wrote,
or its directory where it has none). Self-contained like report.html (the PNG inlined, its style
reused), and linking by relative paths, so the suite directory can be moved or archived whole.
"""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

from benchgate.publish.html_report import PAGE_STYLE, img_tag
from benchgate.suite.entry_figures import EntryFigures, SuiteFigures

# What a `benchgate run` directory holds, most readable first: the page, the verdict table.
_ENTRY_REPORTS = ("report.html", "compare.md")


def _link(entry: EntryFigures, suite_dir: Path) -> str:
    found = next((entry.out / name for name in _ENTRY_REPORTS if (entry.out / name).is_file()), None)
    target = found if found is not None else entry.out
    relative = target.relative_to(suite_dir).as_posix() + ("" if found is not None else "/")
    href = quote(relative)
    text = html.escape(relative)
    what = "" if found is not None else " (no report written)"
    return f'<li><b>{html.escape(entry.name)}</b>: <a href="{href}">{text}</a>{what}</li>'


def suite_html(
    figures: SuiteFigures,
    png: bytes,
    header: list[str],
    rows: list[list[str]],
    notes: list[str],
    ties: str = "",
) -> str:
    """The page; `ties`: the sentence saying which differences count as none (report.ties_text)."""
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    items = "".join(f"<li>{e(note)}</li>" for note in notes)
    links = "".join(_link(entry, figures.directory) for entry in figures.entries)
    title = f"benchgate suite {figures.suite}"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{e(title)}</title><style>{PAGE_STYLE}</style></head><body>",
            f"<h1>{e(title)}: the Pareto view</h1>",
            f'<p class="meta">Higher {e(figures.rate)} is better; lower perplexity and lower peak memory are '
            "better. "
            "Frontier entries (red diamonds) are those no other entry beats on both figures of a panel. "
            f"{e(ties)}</p>",
            img_tag(
                png, f"{figures.rate} against perplexity and against peak memory, Pareto frontier marked"
            ),
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
            f"<ul>{items}</ul>" if items else "",
            "<h2>Each entry's own report</h2>",
            f"<ul>{links}</ul>",
            "</body></html>",
            "",
        ]
    )
