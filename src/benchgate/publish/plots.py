"""The PNG pictures of a gate run, for people who will not read a table of p-values.

A regression is easiest to believe when it is seen: two step-time distributions that no longer overlap,
or a throughput line that steps down at one commit and stays down. This module draws those pictures
from data already in memory (a Bundle, a Comparison, HistoryPoints) and returns PNGs (the page around
them is `html_report.py`); it reads no files, so the same code serves the CLI, a pipeline task and the tests.

matplotlib is imported inside the drawing functions: the CLI must start fast, and most commands never
draw anything.
"""

from __future__ import annotations

import io
import math
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from benchgate.history.series import run_groups
from benchgate.kit import stats
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import Comparison
from benchgate.results.figures import KEY_FIGURES, HistoryPoint, run_figures

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


_WS_FIGURE = re.compile(r"^ws(\d+)/")
# 100 dpi keeps tick labels readable in a browser; a grid of many panels gets fewer dots per inch so
# that, with the palette below, no PNG grows much beyond 200 KB.
_DPI = 100
_MAX_PIXELS = 2e6


_CURRENT_COLOR, _BASELINE_COLOR = "#d62728", "#1f77b4"


# Axis labels by figure name; figures.py's names carry their unit ("_pct" is already percent).
_UNITS = (
    ("per_reference", "step / reference time"),
    ("tokens_per_s", "tokens/s"),
    ("_ms_", "ms"),
    ("_mib", "MiB"),
    ("_pct", "%"),
    ("loss_slope", "nats/step"),
    ("perplexity", "perplexity"),
)


def _short(commit: str | None) -> str:
    return commit[:8] if commit else "?"


def plain(text: str) -> str:
    """Data strings as literal plot text: matplotlib would read a "$" as the start of mathtext."""
    return text.replace("$", r"\$")


def _unit(name: str) -> str:
    return next((unit for marker, unit in _UNITS if marker in name), "")


def world_sizes(points: Sequence[HistoryPoint]) -> list[int]:
    found = {int(m.group(1)) for p in points for name in p.figures if (m := _WS_FIGURE.match(name))}
    return sorted(found)


def oldest_first(points: Sequence[HistoryPoint]) -> list[HistoryPoint]:
    return sorted(points, key=lambda p: p.created_unix)


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def figure_png(fig: Figure) -> bytes:
    from PIL import Image

    width, height = fig.get_size_inches()
    dpi = min(_DPI, math.sqrt(_MAX_PIXELS / (width * height)))
    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=dpi, facecolor="white")
    # Anti-aliased RGBA line plots compress poorly; a 256-colour palette looks the same and halves the
    # size, which matters once three of them are inlined as base64 into one page.
    with Image.open(rendered) as image:
        palette = image.convert("RGB").quantize(colors=256)
    buffer = io.BytesIO()
    palette.save(buffer, format="png", optimize=True)
    return buffer.getvalue()


def _commit_axis(
    ax: Axes, points: Sequence[HistoryPoint], current_last: bool, max_labels: int = 20, xlabel: bool = True
) -> None:
    """Short commits as x tick labels, thinned so that a long history stays readable."""
    labels = [plain(_short(p.commit)) for p in points]
    if current_last:
        labels[-1] = f"{labels[-1]}\n(this run)"
    step = max(1, math.ceil(len(points) / max_labels))
    # Counted back from the newest run, which must always be labelled.
    ticks = list(range(len(points) - 1, -1, -step))[::-1]
    ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=45, ha="right", fontsize=8)
    ax.set_xlim(-0.5, len(points) - 0.5)
    if xlabel:
        ax.set_xlabel("commit (oldest first)")
    ax.grid(True, alpha=0.3)


def _draw_series(
    ax: Axes,
    points: Sequence[HistoryPoint],
    name: str,
    label: str,
    color: str,
    current_last: bool,
    only: Sequence[int] | None = None,
) -> None:
    """`name` over `points` at their places; `only`: the places of one series' runs (the others are
    other series' lines, never joined to this one)."""
    places = range(len(points)) if only is None else only
    xs = [i for i in places if name in points[i].figures]
    ys = [points[i].figures[name] for i in xs]
    # A run without the figure is a gap, not a zero: the line joins the runs that have it.
    ax.plot(xs, ys, "-o", color=color, label=label, markersize=4, linewidth=1.5)
    baseline_x = [i for i in xs if points[i].is_baseline]
    baseline_y = [points[i].figures[name] for i in baseline_x]
    ax.plot(baseline_x, baseline_y, "D", color=color, markersize=8, markeredgecolor="black")
    last = len(points) - 1
    if current_last and last in xs:
        y = points[last].figures[name]
        ax.plot([last], [y], "*", color=color, markersize=16, markeredgecolor="black")


def _marker_legend(ax: Axes, changes: bool = False) -> None:
    from matplotlib.lines import Line2D

    handles, _ = ax.get_legend_handles_labels()
    for marker, label in (("D", "baseline run"), ("*", "this run")):
        handles.append(Line2D([], [], marker=marker, linestyle="", color="grey", markeredgecolor="black"))
        handles[-1].set_label(label)
    if changes:
        handles.append(Line2D([], [], linestyle="--", color="grey", label="change point"))
    ax.legend(handles=handles, fontsize=8, loc="best")


def _ecdf(ax: Axes, label: str, steps_s: Sequence[float], color: str, width: float, alpha: float) -> None:
    """One side's step times as an ECDF, its p50 dotted."""
    ms = sorted(1e3 * t for t in steps_s)
    fraction = [(i + 1) / len(ms) for i in range(len(ms))]
    p50 = stats.percentile(ms, 50)
    text = f"{label}: p50 {p50:.1f} ms, n={len(ms)}"
    ax.step(ms, fraction, where="post", color=color, linewidth=width, alpha=alpha, label=text)
    ax.axvline(p50, color=color, linestyle=":", linewidth=1)


def step_time_png(
    current: Bundle,
    baseline: Bundle | None,
    ab_bases: Mapping[int, tuple[str, Sequence[float]]] | None = None,
) -> bytes:
    return figure_png(step_time_figure(current, baseline, ab_bases))


def step_time_figure(
    current: Bundle,
    baseline: Bundle | None,
    ab_bases: Mapping[int, tuple[str, Sequence[float]]] | None = None,
) -> Figure:
    """This run's step times per world size against the stored baseline's; where there is none at a
    world size, against the A/B base's (`ab_bases`: world size -> (label, step times over all rounds)),
    which is then the comparison the row was decided by."""
    sizes = sorted(current.metrics)
    ab_bases = ab_bases or {}
    fig = new_figure(min(4.5 * len(sizes), 13.5), 3.6)
    axes = fig.subplots(1, len(sizes), squeeze=False, sharey=True)[0]
    base_commit = _short(baseline.env.get("git", {}).get("commit")) if baseline else ""
    compared = 0
    for ax, ws in zip(axes, sizes, strict=True):
        # ECDFs rather than histograms: two overlaid curves stay readable, and a shift of the whole
        # distribution (code) looks different from a longer tail (interference) at a glance.
        # The comparison is drawn wide and pale underneath, so that it stays visible where the curves agree.
        base = baseline.metrics.get(ws) if baseline else None
        title = f"world size {ws}"
        if base is not None:
            _ecdf(
                ax,
                f"baseline {plain(base_commit)}",
                base["samples"]["step_time_s"],
                _BASELINE_COLOR,
                4.0,
                0.5,
            )
            compared += 1
        elif ws in ab_bases:
            label, steps = ab_bases[ws]
            _ecdf(ax, f"{plain(label)} (in turns)", steps, _BASELINE_COLOR, 4.0, 0.5)
            title += " (vs the A/B base: no stored baseline here)"
            compared += 1
        elif baseline is not None:
            title += " (no baseline at this world size)"
        _ecdf(ax, "this run", current.metrics[ws]["samples"]["step_time_s"], _CURRENT_COLOR, 1.5, 1.0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step time (ms)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("fraction of steps ≤ x")
    fig.suptitle("Step-time distribution (ECDF, dotted: p50)" + ("" if compared else ": no baseline"))
    return fig


def ab_steps_png(
    base: tuple[str, Sequence[float]], candidate: tuple[str, Sequence[float]], world_size: int
) -> bytes:
    """An A/B's two sides' step times over all its rounds (label, seconds each), as ECDFs."""
    fig = new_figure(6.0, 3.4)
    ax = fig.subplots()
    _ecdf(ax, plain(base[0]), base[1], _BASELINE_COLOR, 4.0, 0.5)
    _ecdf(ax, plain(candidate[0]), candidate[1], _CURRENT_COLOR, 1.5, 1.0)
    ax.set_title(f"A/B at world size {world_size}: step times of both sides, all rounds", fontsize=10)
    ax.set_xlabel("step time (ms)")
    ax.set_ylabel("fraction of steps ≤ x")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return figure_png(fig)


def trend_png(
    points: Sequence[HistoryPoint],
    names: Sequence[tuple[str, str]],
    title: str,
    ylabel: str,
    changes: Sequence[tuple[str, int]] = (),
) -> bytes:
    """`names` (figure, label) over `points` as given, the last being this run. `changes` (figure,
    index into `points` of the first run at the new level) draws a dashed line in that figure's colour
    where its level moved, as history_png does."""
    fig = new_figure(10, 3.8)
    ax = fig.subplots()
    colors = {name: f"C{i % 10}" for i, (name, _) in enumerate(names)}
    for name, label in names:
        _draw_series(ax, points, name, label, colors[name], current_last=True)
    marked = [(name, index) for name, index in changes if name in colors]
    for name, index in marked:
        ax.axvline(index - 0.5, color=colors[name], linestyle="--", linewidth=1.2)
    _commit_axis(ax, points, current_last=True)
    # The current run's slot is shaded so that it is found before the legend is read.
    ax.axvspan(len(points) - 1.5, len(points) - 0.5, color="gold", alpha=0.15)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    _marker_legend(ax, changes=bool(marked))
    return figure_png(fig)


def history_panels(points: Sequence[HistoryPoint], names: Sequence[str] | None = None) -> list[str]:
    """The figure names history_png draws: `names` (or the key figures) that at least one point has."""
    if names is None:
        sizes = world_sizes(points)
        names = [f"ws{ws}/{name}" for name in KEY_FIGURES for ws in sizes]
        names += ["scaling_efficiency_pct", "eval/perplexity"]
    present = {name for p in points for name in p.figures}
    return [name for name in dict.fromkeys(names) if name in present]


def history_png(
    points: list[HistoryPoint],
    path: Path,
    names: Sequence[str] | None = None,
    changes: Sequence[tuple[str, str | None]] = (),
    keep_order: bool = False,
) -> Path:
    """`history_figure` as a PNG written to `path` (its folders made)."""
    fig = history_figure(points, names, changes, keep_order)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(figure_png(fig))
    return path


def history_figure(
    points: list[HistoryPoint],
    names: Sequence[str] | None = None,
    changes: Sequence[tuple[str, str | None]] = (),
    keep_order: bool = False,
) -> Figure:
    """Small multiples, one panel per figure name, of `points` oldest first (or as given, `keep_order`:
    commit order). `changes` (panel, run id) marks the run where a change point
    starts with a dashed red line on that panel. Runs of several workloads or branches are a line each
    (history/series.run_groups), in a colour of their own, never one line through all of them."""
    if not points:
        raise ValueError("no runs to plot")
    ordered = list(points) if keep_order else oldest_first(points)
    where = {p.run_id: i for i, p in enumerate(ordered) if p.run_id}
    panels = history_panels(ordered, names)
    if not panels:
        raise ValueError(f"none of the runs has any of the figures {list(names or [])}")
    sizes = len(world_sizes(ordered))
    # One column per world size puts the same figure of every world size on one row.
    columns = min(len(panels), sizes if 2 <= sizes <= 4 else 3)
    rows = math.ceil(len(panels) / columns)
    fig = new_figure(4.0 * columns, 2.7 * rows)
    axes = fig.subplots(rows, columns, squeeze=False)
    place = {id(p): i for i, p in enumerate(ordered)}
    groups = [(g.label, [place[id(p)] for p in members]) for g, members in run_groups(ordered)]
    for ax, name in zip(axes.flat, panels, strict=False):
        for i, (label, places) in enumerate(groups):
            _draw_series(ax, ordered, name, plain(label), f"C{i % 10}", current_last=False, only=places)
        _commit_axis(ax, ordered, current_last=False, max_labels=8, xlabel=False)
        for panel, run_id in changes:
            if panel == name and run_id in where:
                ax.axvline(where[run_id] - 0.5, color=_CURRENT_COLOR, linestyle="--", linewidth=1.2)
        ax.set_title(plain(name), fontsize=10)
        ax.set_ylabel(_unit(name))
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    marked = ", dashed: change points" if changes else ""
    if len(groups) > 1:  # which line is which series, on the first panel (figure legends crowd the title)
        axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(f"Key figures over {len(ordered)} runs (diamonds: baseline runs{marked})")
    fig.supxlabel("commit (oldest first)")
    return fig


def current_point(current: Bundle, comparison: Comparison | None) -> HistoryPoint:
    """The run being reported, as a HistoryPoint that can be appended to history."""
    git = current.env.get("git", {})
    return HistoryPoint(
        commit=git.get("commit"),
        # A bundle records no creation time; the run being reported is, by definition, the newest one.
        created_unix=time.time(),
        figures=run_figures(current, comparison),
        branch=git.get("branch"),
        verdict=comparison.verdict if comparison is not None else None,
    )
