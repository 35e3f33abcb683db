"""pareto.png: a suite's entries on tokens/s against perplexity and against peak memory, one panel each.

Frontier entries are coloured, marked and joined from slowest to fastest; dominated ones are grey and
labelled by name, so the picture alone says which variants to drop. An entry without a panel's figure is
named in a note under that panel instead of being drawn anywhere. The figure, its size and the PNG
encoding follow publish/plots.py (one constrained-layout Figure, no pyplot state, a palette PNG).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from benchgate.publish.plots import figure_png, new_figure, plain
from benchgate.suite.pareto import LABELS, Panel, Point

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_FRONTIER_COLOR, _DOMINATED_COLOR = "#d62728", "#9a9a9a"
_Y_LABELS = {
    "perplexity": "perplexity (lower is better)",
    "peak_memory": "peak memory, MiB (lower is better)",
}


def _y(point: Point, panel: Panel) -> float:
    value = point.figure(panel.objective)
    assert value is not None  # only placed points are drawn
    return value / 2**20 if panel.objective == "peak_memory" else value


def _label(ax: Axes, point: Point, y: float, color: str) -> None:
    ax.annotate(
        plain(point.name),
        (point.tokens_per_s, y),
        xytext=(5, 4),
        textcoords="offset points",
        fontsize=8,
        color=color,
    )


def _draw_panel(ax: Axes, panel: Panel, x_label: str) -> None:
    dominated = [d.point for d in panel.dominated]
    if dominated:
        ax.scatter(
            [p.tokens_per_s for p in dominated],
            [_y(p, panel) for p in dominated],
            color=_DOMINATED_COLOR,
            s=30,
            zorder=2,
            label="dominated",
        )
        for p in dominated:
            _label(ax, p, _y(p, panel), _DOMINATED_COLOR)
    if panel.frontier:
        xs = [p.tokens_per_s for p in panel.frontier]
        ys = [_y(p, panel) for p in panel.frontier]
        ax.plot(xs, ys, "-", color=_FRONTIER_COLOR, linewidth=1.2, zorder=3)
        ax.scatter(
            xs,
            ys,
            color=_FRONTIER_COLOR,
            marker="D",
            s=45,
            edgecolors="black",
            zorder=4,
            label="Pareto frontier",
        )
        for p, y in zip(panel.frontier, ys, strict=True):
            _label(ax, p, y, "black")
        ax.legend(fontsize=8, loc="best")
        ax.margins(0.15)  # room for the names beside the outermost points
    else:
        ax.text(
            0.5,
            0.5,
            f"no entry has a {LABELS[panel.objective]}",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color=_DOMINATED_COLOR,
        )
    ax.set_xlabel(x_label)
    ax.set_ylabel(_Y_LABELS[panel.objective])
    ax.set_title(f"{panel.rate} vs. {LABELS[panel.objective]}", fontsize=10)
    ax.grid(True, alpha=0.3)
    if panel.left_out:
        reasons: dict[str, list[str]] = {}  # one clause per reason, in the entries' order
        for point in panel.left_out:
            reasons.setdefault(point.missing(panel.objective), []).append(point.name)
        ax.text(
            0.0,
            -0.22,
            plain("; ".join(f"not shown, {why}: {', '.join(names)}" for why, names in reasons.items())),
            transform=ax.transAxes,
            fontsize=8,
            color="#57606a",
            va="top",
        )


def pareto_png(panels: Sequence[Panel], x_label: str, title: str) -> bytes:
    """Side-by-side panels (one per objective, in the order given) as PNG bytes. `x_label` names the
    tokens/s figure, world size included; `title` the suite."""
    fig = new_figure(5.5 * len(panels), 4.6)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        _draw_panel(ax, panel, x_label)
    fig.suptitle(plain(title))
    return figure_png(fig)
