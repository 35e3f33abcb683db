"""A suite's Pareto view names the rate after what its entries' steps count, and never puts two units on
one axis: the entries of the most common unit are plotted, the others named apart."""

from __future__ import annotations

from pathlib import Path

from bundles import bundle
from bundles import counting as counting_in

from benchgate.results.bundle import Bundle
from benchgate.suite.entry_figures import EntryFigures, SuiteFigures, plotted_unit
from benchgate.suite.report import header, markdown, panels, tokens_label


def counting(unit: str | None, seed: int = 1) -> Bundle:
    return counting_in(bundle(seed), unit)


def test_the_most_common_unit_is_plotted_and_the_others_are_named_apart() -> None:
    bundles = {"vit": counting("images"), "bert": counting("tokens"), "swin": counting("images")}
    skipped: dict[str, str] = {}
    assert plotted_unit(bundles, skipped) == "images"
    assert sorted(bundles) == ["swin", "vit"]
    assert skipped == {"bert": "it counts tokens per step, the plotted entries images: not on one axis"}


def test_a_tie_goes_to_the_first_entry_and_a_file_without_a_unit_counts_tokens() -> None:
    bundles = {"old": counting(None), "vit": counting("images")}
    skipped: dict[str, str] = {}
    assert plotted_unit(bundles, skipped) == "tokens" and list(bundles) == ["old"]
    assert "vit" in skipped


def test_the_views_name_images_per_second() -> None:
    out = Path("/suite")
    entries = [
        EntryFigures("vit", "done", "PASS", out / "vit", 1, 300.0, None, 2.0**30),
        EntryFigures("swin", "done", "PASS", out / "swin", 1, 200.0, None, 2.0**29),
    ]
    figures = SuiteFigures("images", out, entries, 1, "images/s")
    assert tokens_label(figures) == "images/s at world size 1 (higher is better)"
    assert header(figures)[2] == "images/s at world size 1"
    assert header(figures)[5:] == ["images/s vs. perplexity", "images/s vs. peak memory"]
    text = markdown(figures, panels(figures))
    assert "Higher images/s is better" in text and "images/s within 2%" in text
    assert "tokens/s" not in text


def test_an_entry_of_another_unit_has_its_row_and_says_why_it_has_no_point() -> None:
    from benchgate.suite.entry_figures import OTHER_UNIT
    from benchgate.suite.report import table_rows

    out = Path("/suite")
    why = f"{OTHER_UNIT} clips per step, the plotted entries images: not on one axis"
    entries = [
        EntryFigures("vit", "done", "PASS", out / "vit", 1, 300.0, None, 2.0**30),
        EntryFigures("wav2vec2", "done", "PASS", out / "wav2vec2", skipped=why),
    ]
    figures = SuiteFigures("mixed", out, entries, 1, "images/s")
    rows = table_rows(figures, panels(figures))
    assert rows[1] == [
        "wav2vec2",
        "PASS",
        "—",
        "—",
        "—",
        "not plotted: another unit",
        "not plotted: another unit",
    ]
    assert f"wav2vec2 is not plotted: {why}" in markdown(figures, panels(figures))
