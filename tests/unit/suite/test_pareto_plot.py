"""pareto.png drawn from points (suite/pareto_plot.py): panels without any point, names as literal text."""

from __future__ import annotations

import io

from PIL import Image

from benchgate.suite.pareto import OBJECTIVES, Point, frontier
from benchgate.suite.pareto_plot import pareto_png

RED = (0xD6, 0x27, 0x28)


def _red_pixels(image: Image.Image, left: int, right: int) -> int:
    rgb = image.convert("RGB")
    pixels = rgb.load()
    return sum(
        all(abs(a - b) <= 12 for a, b in zip(pixels[x, y], RED, strict=True))
        for x in range(left, right)
        for y in range(image.height)
    )


def test_a_panel_where_no_entry_has_the_figure_is_drawn_empty_and_the_other_is_not() -> None:
    # Two workloads without an eval hook: no perplexity at all, but memory for both. "$" in a name
    # would start matplotlib's mathtext if not escaped.
    points = [Point("mlp$a", 5000.0, None, 100 * 2**20), Point("mlp$b", 4000.0, None, 90 * 2**20)]
    png = pareto_png([frontier(points, better=o) for o in OBJECTIVES], "tokens/s", "Suite s")
    with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG"
        half = image.width // 2
        assert _red_pixels(image, 0, half) == 0  # no frontier on the perplexity panel
        assert _red_pixels(image, half, image.width) > 100  # two diamonds joined by a line, and the legend's
