"""A profile's runs as series (history/series.py): commit order, which figures, which changes are
regressions, and what the nightly check fails on. Runs carry the figure names MLflow stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchgate.history.series import figure_changes, in_commit_order, series_of, unacknowledged_regressions
from benchgate.publish.plots import history_png
from benchgate.results.figures import HistoryPoint


def runs(n: int = 30, slower_from: int = 18, memory_from: int = 10) -> list[HistoryPoint]:
    rng = np.random.default_rng(2)
    made = []
    for i in range(n):
        mean_ms = 20.0 * (1.15 if i >= slower_from else 1.0) * (1 + rng.normal(0, 0.01))
        figures = {
            "ws1/tokens_per_s_p50": 20_000 / mean_ms,
            "ws1/step_time_ms_mean": mean_ms,
            "ws1/peak_memory_mib": 400.0 + (50.0 if i >= memory_from else 0.0) + rng.normal(0, 1),
        }
        figures["ws1/step_time_per_reference_mean"] = mean_ms / 5.0
        commit = f"{i:02d}" * 20
        made.append(HistoryPoint(commit=commit, created_unix=1000.0 + i, run_id=f"r{i}", figures=figures))
    return made


def test_runs_follow_the_branch_when_every_commit_is_on_it_else_their_start_time() -> None:
    made = runs(6)
    shuffled = [made[i] for i in (3, 0, 5, 1, 4, 2)]
    by_commit = [made[i].commit for i in (5, 4, 3, 2, 1, 0)]  # a branch whose order is not the time order
    assert [p.run_id for p in in_commit_order(shuffled, by_commit)] == ["r5", "r4", "r3", "r2", "r1", "r0"]
    assert [p.run_id for p in in_commit_order(shuffled, by_commit[1:])] == [f"r{i}" for i in range(6)]
    assert [p.run_id for p in in_commit_order(shuffled, None)] == [f"r{i}" for i in range(6)]


def test_series_are_the_gates_figures_with_the_corrected_one_only_where_every_run_has_it() -> None:
    assert [s.name for s in series_of(runs())] == [
        "tokens/s ws=1",
        "tokens/s ws=1, corrected",
        "peak memory ws=1",
    ]
    partly = runs()
    del partly[3].figures["ws1/step_time_per_reference_mean"]
    assert "tokens/s ws=1, corrected" not in [s.name for s in series_of(partly)]


def test_a_drop_of_tokens_per_s_and_a_rise_of_memory_are_regressions_at_their_runs() -> None:
    found = {c.figure: c for c in figure_changes(runs())}
    assert found["tokens/s ws=1"].run.run_id == "r18"
    assert abs(found["tokens/s ws=1"].point.change_pct - 100 * (1 / 1.15 - 1)) < 1.5
    assert found["peak memory ws=1"].run.run_id == "r10"
    assert all(c.is_regression for c in found.values())
    faster = runs(slower_from=30, memory_from=30)
    for run in faster[15:]:
        run.figures["ws1/step_time_ms_mean"] /= 1.2
        run.figures["ws1/step_time_per_reference_mean"] /= 1.2
    sped_up = figure_changes(faster)
    assert sped_up and not any(c.is_regression for c in sped_up)


def test_the_check_fails_only_on_recent_unacknowledged_regressions(tmp_path: Path) -> None:
    made = runs()
    found = figure_changes(made)
    assert {c.run.run_id for c in unacknowledged_regressions(found, made, recent=15)} == {"r18"}
    assert {c.run.run_id for c in unacknowledged_regressions(found, made, recent=25)} == {"r18", "r10"}
    made[18] = HistoryPoint(**{**made[18].__dict__, "acknowledged": "a bigger model, on purpose"})
    found = figure_changes(made)
    assert unacknowledged_regressions(found, made, recent=15) == []
    # The PNG draws the runs in the order given, with the changes marked.
    marks = [(c.panel, c.run.run_id) for c in found]
    png = history_png(made, tmp_path / "h.png", changes=marks, keep_order=True)
    assert png.read_bytes().startswith(b"\x89PNG")
