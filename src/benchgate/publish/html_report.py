"""report.html: the verdict table, what decides it, each A/B's rounds, looks and decision (`ab_report`),
and the plots against the baseline and the profile's recent runs with their change points
(`report_changes`), as one self-contained page (PNGs inlined). It reads no files: the publish stage
writes it.

Its tokens/s is the run's one figure (results/figures.RUN_TOKENS_PER_S), as in the verdict table,
`benchgate history` and MLflow; an A/B's base and candidate rates are shown as the A/B's own pair.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchgate.attribution.lines import attribution_lines
from benchgate.checks import tables as report
from benchgate.publish.ab_report import ABReport, ab_html
from benchgate.publish.plots import ab_steps_png, current_point, step_time_png, trend_png, world_sizes
from benchgate.publish.report_changes import changes_html, report_history
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import Comparison
from benchgate.results.figures import MFU_CONVENTIONS, RUN_TOKENS_PER_S, HistoryPoint, counted_unit, rate_name

# STATUS_STYLE speaks rich's colour names; these are the same colours, dark enough to read on white.
_CSS_COLORS = {
    "green": "#1a7f37",
    "yellow": "#9a6700",
    "red": "#cf222e",
    "cyan": "#0a6e8a",
    "dim": "#6e7781",
    "magenta": "#8250df",
}


def img_tag(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _status_css(status: str) -> str:
    rules = []
    for word in report.STATUS_STYLE.get(status, "").split():
        rules.append("font-weight:bold" if word == "bold" else f"color:{_CSS_COLORS.get(word, 'inherit')}")
    return ";".join(rules)


def _table(comparison: Comparison) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in report.HEADER)
    body = []
    for row in report.table_rows(comparison):
        cells = [f"<td>{html.escape(cell)}</td>" for cell in row.cells]
        cells.append(f'<td style="{_status_css(row.status)}">{html.escape(row.status_text())}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    why = attribution_lines(comparison)
    if why:  # what an explained A/B's change is made of: aligned text, as the terminal prints it
        table += f'<pre class="attribution">{html.escape(chr(10).join(why))}</pre>'
    explained = report.footnote_lines(comparison)
    if not explained:
        return table
    # Each row's whole rule and notes: folded, since a verdict's reader rarely needs the statistics.
    notes = "".join(f"<li>{html.escape(line)}</li>" for line in explained)
    return f"{table}<details><summary>{report.DETAILS_SUMMARY}</summary><ul>{notes}</ul></details>"


def _metrics(current: Bundle) -> dict[str, Any]:
    return current.metrics[min(current.metrics)] if current.metrics else {}


def _rate_axis(current: Bundle) -> str:
    """The throughput plot's axis: "tokens/s (tokens per step / mean step time)", or images where the
    workload counts images."""
    metrics = _metrics(current)
    return f"{rate_name(metrics)} ({counted_unit(metrics)} per step / mean step time)"


def _flops_table(current: Bundle) -> str:
    """FLOPs per trained token and MFU by each estimator, each row saying its convention; the MFU rows
    of the verdict table exist only where a peak is known, this table on CPU too."""
    if not current.metrics:
        return ""
    ws, metrics = min(current.metrics.items())
    block = metrics.get("mfu") or {}
    per_token = block.get("flops_per_token") or {}
    if not any(per_token.get(estimator) is not None for estimator in MFU_CONVENTIONS):
        return ""
    rows = []
    for estimator, convention in MFU_CONVENTIONS.items():
        flops, fraction = per_token.get(estimator), block.get(estimator)
        rows.append(
            f"<tr><td>{estimator}</td><td>{'—' if flops is None else f'{flops:,.0f}'}</td>"
            f"<td>{'—' if fraction is None else f'{100 * fraction:.2f} %'}</td>"
            f"<td>{html.escape(convention)}</td></tr>"
        )
    seconds = (block.get("counting") or {}).get("seconds")
    cost = "" if seconds is None else f" Counting one step took {seconds:.2f} s, before the warmup."
    why = "" if block.get("peak") else " No MFU: no peak FLOP/s is known for this device and precision."
    return (
        f"<h2>FLOPs per token (ws={ws})</h2><table><thead><tr><th>estimator</th><th>FLOPs per token</th>"
        f"<th>MFU</th><th>convention</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        '<p class="meta">—: the workload has no <code>flops_per_token()</code>, or the count failed.'
        f"{cost}{why}</p>"
    )


def _ab_steps(report: ABReport) -> str:
    """Both sides' steps over the A/B's rounds as an <img>; nothing where its rounds kept no steps."""
    sides = [(report.label(side), report.steps(side)) for side in ("base", "candidate")]
    if not (sides[0][1] and sides[1][1]):
        return ""
    return img_tag(ab_steps_png(sides[0], sides[1], report.world_size), "A/B step times of both sides")


_COMMAND = re.compile(r"`([^`]+)`")


def _next_steps(comparison: Comparison, out_dir: Path | None) -> str:
    """What decides the verdict, right under it: commands (in backquotes in the text) as <code>."""
    steps = report.step_lines(comparison, out_dir)
    if not steps:
        return ""
    coded = [_COMMAND.sub(r"<code>\1</code>", html.escape(step, quote=False)) for step in steps]
    items = "".join(f"<li>{step}</li>" for step in coded)
    return f'<div class="next"><b>Next:</b><ul>{items}</ul></div>'


PAGE_STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#1f2328}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #d0d7de;padding:3px 6px;text-align:left}
th{background:#f6f8fa}img{max-width:100%;display:block;margin:0.5em 0}.meta{color:#57606a}
.next{background:#fff8c5;border:1px solid #d4a72c;padding:0.4em 0.8em;margin:0.5em 0}.next ul{margin:0.2em 0}
details{margin:0.5em 0}summary{cursor:pointer;color:#57606a}"""


def html_report(
    current: Bundle,
    comparison: Comparison,
    baseline: Bundle | None,
    history: list[HistoryPoint],
    out_dir: Path | None = None,
    commit_order: Sequence[str] | None = None,
    ab: Sequence[ABReport] = (),
) -> str:
    """A self-contained page: verdict, what to do next, verdict table (how each row was decided folded
    under it), each A/B (`ab`: its rounds, looks, decision and both sides' steps), the plots as inline
    PNGs (no network needed) and the change points of the history.
    `out_dir`: the run's result directory, named in the next steps' commands (DIR where not given).
    `commit_order`: the branch's commits, oldest first, to put the history in (else: start time)."""
    git = current.env.get("git", {})
    workload = current.workload or comparison.workload or "?"
    verdict = comparison.verdict
    e = html.escape
    meta = [
        f"workload <b>{e(workload)}</b>",
        f"machine profile <b>{e(current.machine_profile)}</b>",
        f"commit <code>{e(str(git.get('commit') or '?'))}</code>",
    ]
    if git.get("branch"):
        meta.append(f"branch <code>{e(str(git['branch']))}</code>")
    if baseline is None and ab:
        meta.append(
            "baseline: <b>none</b> stored for this profile and workload; the A/B base is the comparison"
        )
    elif baseline is None:
        meta.append("baseline: <b>none</b> (no baseline for this profile and workload; nothing compared)")
    else:
        base_commit = baseline.env.get("git", {}).get("commit")
        meta.append(f"baseline commit <code>{e(str(base_commit or '?'))}</code>")
    # Where no stored baseline is there, an A/B base is what the run was compared with.
    ab_bases = {r.world_size: (r.label("base"), r.steps("base")) for r in ab if r.steps("base")}
    ordered = report_history(history, current_point(current, comparison), commit_order)
    points = ordered.points
    throughput = trend_png(
        points,
        [(f"ws{ws}/{RUN_TOKENS_PER_S}", f"world size {ws}") for ws in world_sizes(points)],
        f"Throughput over the last {len(points)} runs of this profile",
        _rate_axis(current),
        changes=ordered.marks(),
    )
    if any("scaling_efficiency_pct" in p.figures for p in points):
        scaling = img_tag(
            trend_png(
                points,
                [("scaling_efficiency_pct", "largest world size vs. ws=1")],
                "Scaling efficiency: tokens/s(N) / (N x tokens/s(1))",
                "scaling efficiency (%)",
            ),
            "scaling efficiency over commits",
        )
    else:
        scaling = (
            "<p>Scaling efficiency is not available: no run here measured both world size 1 and a larger "
            "world size.</p>"
        )
    notes = "".join(f"<li>{e(note)}</li>" for note in comparison.notes)
    style = _status_css(verdict)
    title = f"benchgate {verdict}: {workload} on {current.machine_profile}"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{e(title)}</title><style>{PAGE_STYLE}</style></head><body>",
            f'<h1>benchgate verdict: <span style="{style}">{e(verdict)}</span> '
            f"(exit {comparison.exit_code})</h1>",
            _next_steps(comparison, out_dir),
            f'<p class="meta">{" · ".join(meta)}</p>',
            f"<ul>{notes}</ul>" if notes else "",
            _table(comparison),
            ab_html(ab, {r.world_size: _ab_steps(r) for r in ab}),
            _flops_table(current),
            "<h2>Step time, baseline vs. this run</h2>",
            img_tag(step_time_png(current, baseline, ab_bases), "step-time distribution per world size"),
            "<h2>Throughput over commits</h2>",
            img_tag(throughput, f"{rate_name(_metrics(current))} over commits"),
            "<h2>Change points over these runs</h2>",
            changes_html(ordered),
            "<h2>Scaling efficiency over commits</h2>",
            scaling,
            "</body></html>",
            "",
        ]
    )
