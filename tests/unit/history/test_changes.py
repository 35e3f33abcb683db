"""Change points (history/changes.py) on synthetic series with known shifts, and the calibration of
their permutation p-values on series without any."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchgate.history.changes import best_split, change_points


def series(levels: list[tuple[int, float]], noise: float, seed: int) -> list[float]:
    """Runs of tokens/s around 1000: `levels` is [(runs, relative change from 1000)], log-normal noise
    of relative sd `noise`."""
    rng = np.random.default_rng(seed)
    logs = np.concatenate([rng.normal(math.log1p(change), noise, runs) for runs, change in levels])
    return list(1000.0 * np.exp(logs))


@pytest.mark.parametrize(
    ("levels", "noise", "expected"),
    [
        # one drop of 10% at run 30, 2% noise: found at 30, sized within its interval
        ([(30, 0.0), (30, -0.10)], 0.02, [(30, -10.0)]),
        # a small drop that the noise of this host would hide in one run, seen over 20 runs each side
        ([(20, 0.0), (20, -0.04)], 0.015, [(20, -4.0)]),
        # two steps: a drop of 8%, then a recovery to +2%
        ([(20, 0.0), (20, -0.08), (20, 0.02)], 0.02, [(20, -8.0), (40, 11.0)]),
        # a rise is a change too (the caller decides what is a regression)
        ([(15, 0.0), (15, 0.12)], 0.02, [(15, 12.0)]),
    ],
    ids=["one-drop", "small-drop-long-segments", "drop-then-recovery", "rise"],
)
def test_known_shifts_are_found_at_their_run(
    levels: list[tuple[int, float]], noise: float, expected: list[tuple[int, float]]
) -> None:
    found = change_points(series(levels, noise, seed=3))
    assert [p.index for p in found] == pytest.approx([i for i, _ in expected], abs=1)
    for point, (_, pct) in zip(found, expected, strict=True):
        assert point.ci_low_pct <= point.change_pct <= point.ci_high_pct
        # The true change lies inside the interval, give or take a noise sd.
        assert point.ci_low_pct - 2 <= pct <= point.ci_high_pct + 2
        assert point.p_value <= 0.01


def test_a_level_series_has_no_change_point() -> None:
    assert change_points(series([(60, 0.0)], 0.05, seed=11)) == []


def test_statistics_come_from_the_final_segments() -> None:
    """The second change is described by the runs between the two changes and after the second, not
    by everything before it (a stale segment would mix the two earlier levels into 'before')."""
    values = series([(20, 0.0), (20, -0.10), (20, -0.20)], 0.01, seed=5)
    first, second = change_points(values)
    assert (first.start, first.index, first.end) == (0, 20, 40)
    assert (second.start, second.index, second.end) == (20, 40, 60)
    # -20% against -10% is about -11%; against the whole past it would read about -16%.
    assert second.change_pct == pytest.approx(100 * (0.8 / 0.9 - 1), abs=1.5)
    assert second.n_before == 20 and second.n_after == 20


def test_too_short_a_series_is_not_split() -> None:
    assert best_split([1.0, 2.0, 3.0, 4.0, 5.0], min_size=3) is None
    assert change_points([100.0, 100.0, 50.0, 50.0, 50.0]) == []


def test_deterministic_for_a_series() -> None:
    values = series([(25, 0.0), (25, -0.06)], 0.03, seed=8)
    assert change_points(values) == change_points(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [([100.0, 0.0, 100.0], r"values\[1\]: got 0.0"), ([100.0, float("nan")], r"values\[1\]: got nan")],
)
def test_a_value_that_is_not_a_level_is_refused_by_index(values: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        change_points(values)


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"alpha: got 1\.5"):
        change_points([1.0] * 10, alpha=1.5)
    with pytest.raises(ValueError, match="min_size: got 1"):
        change_points([1.0] * 10, min_size=1)


@pytest.mark.parametrize("length", [12, 40, 100])
def test_p_values_are_calibrated_on_series_without_a_change(length: int) -> None:
    """On pure noise, the best split's permutation p-value is uniform: P(p <= 0.05) is 5% whatever the
    series' length (a Gaussian approximation of the max statistic drifts with length). 300 series of each
    length; the 99.9% binomial band around 5% of 300 is [6, 26]."""
    rng = np.random.default_rng(length)
    hits = 0
    for _ in range(300):
        found = best_split(rng.normal(0.0, 1.0, length), permutations=199, seed=int(rng.integers(1 << 31)))
        assert found is not None
        hits += found[1] <= 0.05
    assert 6 <= hits <= 26, hits
