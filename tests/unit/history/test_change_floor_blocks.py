"""The change-point method's guards against false alarms (history/changes.py): a magnitude floor per
figure, a block-permutation null whose block follows the series' autocorrelation, and `--check`
reporting a change point only when it is new (cli/history.new_changes)."""

from __future__ import annotations

import numpy as np
import pytest

from benchgate.history.changes import block_length, change_points, floor_pct


def ar1(phi: float, runs: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    x = np.zeros(runs)
    for i in range(runs):
        x[i] = (phi * x[i - 1] if i else 0.0) + rng.normal(0.0, 0.01)
    return list(1000.0 * np.exp(x))


def test_a_tiny_but_steady_shift_is_no_change_point_below_the_floor() -> None:
    # Perplexity 5.0 -> 5.00005: far beyond its tiny noise, and meaningless.
    jitter = np.random.default_rng(1).normal(0.0, 1e-7, 40)
    values = list((np.array([5.0] * 20 + [5.00005] * 20)) * (1 + jitter))
    assert change_points(values, min_change_pct=floor_pct(1.5)) == []
    # A shift beyond the floor is still found.
    shifted = list(np.array([5.0] * 20 + [5.2] * 20) * (1 + jitter))
    assert [p.index for p in change_points(shifted, min_change_pct=0.75)] == [20]
    with pytest.raises(ValueError, match="min_change_pct: got -1"):
        change_points(values, min_change_pct=-1.0)
    with pytest.raises(ValueError, match="tolerance_pct: got 0"):
        floor_pct(0.0)


def test_block_length_follows_the_autocorrelation() -> None:
    independent = [block_length(ar1(0.0, 60, seed)) for seed in range(30)]
    dependent = [block_length(ar1(0.6, 60, seed)) for seed in range(30)]
    assert np.mean(independent) < 1.5 and np.mean(dependent) > 2.5, (independent, dependent)
    # A level shift alone does not pass for dependence: one difference moves.
    step = np.exp(np.array([0.0] * 30 + [0.1] * 30) + np.random.default_rng(2).normal(0.0, 0.01, 60))
    assert block_length(list(step)) == 1


def test_autocorrelated_histories_rarely_show_a_false_change_point() -> None:
    false = sum(bool(change_points(ar1(0.6, 60, seed), permutations=199)) for seed in range(40))
    # Single-run shuffles flagged far more of these (13% at phi 0.3 over 60 runs); 40 histories at 0.6.
    assert false <= 5, false
