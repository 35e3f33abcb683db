from __future__ import annotations

import math

import numpy as np
import pytest

from benchgate.kit.stats import (
    Summary,
    block_bootstrap_ci,
    linear_slope,
    percentile,
    relative_change_pct,
    summarize,
    t_quantile,
    welch_difference,
)


def _ar1(n: int, phi: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, 1.0, n)
    out = np.empty(n)
    out[0] = noise[0]
    for i in range(1, n):
        out[i] = phi * out[i - 1] + noise[i]
    return out


# --- percentile -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [0.0, 1.0, 10.0, 25.0, 50.0, 73.3, 90.0, 99.9, 100.0])
def test_percentile_matches_numpy_linear(q: float) -> None:
    data = np.random.default_rng(7).lognormal(0.0, 0.5, 257)
    assert percentile(list(data), q) == pytest.approx(float(np.percentile(data, q)), rel=1e-12)


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50.0) == 2.5
    assert percentile([10.0], 37.0) == 10.0


@pytest.mark.parametrize(
    ("samples", "q", "match"),
    [
        pytest.param([], 50.0, "empty", id="empty"),
        pytest.param([1.0, 2.0], -0.1, "q must be", id="q-negative"),
        pytest.param([1.0, 2.0], 100.5, "q must be", id="q-above-100"),
        pytest.param([1.0, 2.0], math.nan, "q must be", id="q-nan"),
    ],
)
def test_percentile_rejects_bad_input(samples: list[float], q: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        percentile(samples, q)


# --- summarize --------------------------------------------------------------------------------------------


def test_summarize_known_sequence() -> None:
    s = summarize([float(v) for v in range(1, 11)])
    assert s.n == 10
    assert s.mean == pytest.approx(5.5)
    assert s.std == pytest.approx(math.sqrt(82.5 / 9))
    assert (s.min, s.max) == (1.0, 10.0)
    assert s.p10 == pytest.approx(1.9)
    assert s.p50 == pytest.approx(5.5)
    assert s.p90 == pytest.approx(9.1)
    assert s.min <= s.p50_ci_low < s.p50 < s.p50_ci_high <= s.max


def test_summarize_single_sample_has_zero_std_and_point_ci() -> None:
    s = summarize([3.25])
    assert (s.n, s.std, s.p50_ci_low, s.p50_ci_high) == (1, 0.0, 3.25, 3.25)


def test_summarize_to_dict_has_every_field() -> None:
    d = summarize([1.0, 2.0, 4.0]).to_dict()
    assert list(d) == [
        "n", "mean", "std", "min", "p10", "p50", "p90", "max", "p50_ci_low", "p50_ci_high",
    ]  # fmt: skip
    assert d["n"] == 3
    assert Summary(**d) == summarize([1.0, 2.0, 4.0])  # type: ignore[arg-type]


def test_summarize_rejects_empty() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize([])


@pytest.mark.parametrize(
    ("samples", "count", "index"),
    [
        pytest.param([1.0, math.nan, 2.0], 1, 1, id="one-nan"),
        pytest.param([1.0, 2.0, math.inf, math.nan, 3.0], 2, 2, id="inf-then-nan"),
        pytest.param([math.nan] * 4, 4, 0, id="all-nan"),
    ],
)
def test_summarize_rejects_non_finite_naming_count_and_first_index(
    samples: list[float], count: int, index: int
) -> None:
    with pytest.raises(ValueError, match=rf"{count} non-finite value\(s\); the first is at index {index}\b"):
        summarize(samples)


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, 1.5, math.nan])
def test_summarize_rejects_confidence_outside_unit_interval(confidence: float) -> None:
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\), got"):
        summarize([1.0, 2.0, 3.0], confidence=confidence)


# --- block_bootstrap_ci -----------------------------------------------------------------------------------


def test_block_bootstrap_ci_contains_true_median_of_exponential() -> None:
    data = np.random.default_rng(11).exponential(1.0, 4000)
    low, high = block_bootstrap_ci(data, np.median)
    assert low < math.log(2.0) < high
    assert high - low < 0.15


def test_block_bootstrap_ci_narrows_as_n_grows() -> None:
    rng = np.random.default_rng(3)
    widths = []
    for n in (100, 1000, 10000):
        low, high = block_bootstrap_ci(rng.exponential(1.0, n), np.median, seed=1)
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    # sqrt(n) scaling: each tenfold increase in n should shrink the width roughly threefold.
    assert widths[2] < widths[0] / 5


@pytest.mark.parametrize(("confidence", "z"), [(0.5, 0.6744898), (0.9, 1.6448536), (0.95, 1.9599640)])
def test_block_bootstrap_ci_width_matches_normal_theory_for_iid_mean(confidence: float, z: float) -> None:
    data = np.random.default_rng(12).normal(0.0, 1.0, 4000)
    low, high = block_bootstrap_ci(data, np.mean, confidence=confidence, resamples=20000, block=1)
    assert high - low == pytest.approx(2.0 * z * data.std() / math.sqrt(data.size), rel=0.04)


def test_block_bootstrap_ci_is_deterministic_for_a_seed() -> None:
    data = list(np.random.default_rng(5).normal(10.0, 1.0, 300))
    first = block_bootstrap_ci(data, np.median, seed=42)
    assert block_bootstrap_ci(data, np.median, seed=42) == first
    assert block_bootstrap_ci(data, np.median, seed=43) != first


def test_block_bootstrap_ci_blocks_widen_ci_for_autocorrelated_samples() -> None:
    data = _ar1(2000, 0.9, seed=2)
    iid_low, iid_high = block_bootstrap_ci(data, np.mean, block=1)
    blk_low, blk_high = block_bootstrap_ci(data, np.mean, block=50)
    # Strong positive autocorrelation inflates the variance of the mean ~19x; blocks must see some of that.
    assert blk_high - blk_low > 2.0 * (iid_high - iid_low)


def test_block_bootstrap_ci_accepts_any_callable_statistic() -> None:
    data = np.random.default_rng(9).normal(0.0, 1.0, 500)
    fast = block_bootstrap_ci(data, np.mean, seed=4)
    slow = block_bootstrap_ci(data, lambda a: float(np.sum(a) / a.size), seed=4)
    assert fast == pytest.approx(slow, rel=1e-9)


@pytest.mark.parametrize(("n", "block"), [(11, 3), (10, 4), (7, None), (1, None)])
def test_block_bootstrap_ci_resamples_keep_the_sample_length(n: int, block: int | None) -> None:
    assert block_bootstrap_ci([1.0] * n, lambda a: float(a.size), block=block, resamples=50) == (n, n)


def test_block_bootstrap_ci_handles_block_longer_than_samples() -> None:
    low, high = block_bootstrap_ci([1.0, 2.0, 3.0], np.median, block=10)
    assert 1.0 <= low <= high <= 3.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"confidence": 1.0}, "confidence", id="confidence"),
        pytest.param({"block": 0}, "block", id="block-zero"),
        pytest.param({"resamples": 0}, "resamples", id="resamples-zero"),
    ],
)
def test_block_bootstrap_ci_rejects_bad_parameters(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        block_bootstrap_ci([1.0, 2.0, 3.0], np.median, **kwargs)  # type: ignore[arg-type]


# --- t_quantile -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        pytest.param(0.975, 3, 3.182446, id="df3-975"),
        pytest.param(0.995, 3, 5.840909, id="df3-995"),
        pytest.param(0.975, 5, 2.570582, id="df5-975"),
        pytest.param(0.995, 5, 4.032143, id="df5-995"),
        pytest.param(0.975, 10, 2.228139, id="df10-975"),
        pytest.param(0.995, 10, 3.169273, id="df10-995"),
        pytest.param(0.975, 30, 2.042272, id="df30-975"),
        pytest.param(0.995, 30, 2.749996, id="df30-995"),
        pytest.param(0.975, math.inf, 1.959964, id="inf-975"),
        pytest.param(0.995, math.inf, 2.575829, id="inf-995"),
        pytest.param(0.975, 1, 12.706205, id="df1-975"),
        pytest.param(0.95, 2, 2.919986, id="df2-95"),
        pytest.param(0.975, 5000, 1.960439, id="df5000-975"),
        pytest.param(0.6, 10, 0.260185, id="df10-60-near-median"),
        pytest.param(0.75, 5, 0.726687, id="df5-75"),
        pytest.param(0.55, 3, 0.136598, id="df3-55-near-median"),
    ],
)
def test_t_quantile_matches_table(p: float, df: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("df", [1.0, 3.0, 7.5, 40.0, 2000.0])
def test_t_quantile_is_antisymmetric_and_zero_at_median(df: float) -> None:
    assert t_quantile(0.5, df) == 0.0
    assert t_quantile(0.1, df) == pytest.approx(-t_quantile(0.9, df), rel=1e-10)


@pytest.mark.parametrize(
    ("p", "df", "match"),
    [
        pytest.param(0.0, 5.0, "p must be", id="p-zero"),
        pytest.param(1.0, 5.0, "p must be", id="p-one"),
        pytest.param(0.9, 0.0, "df must be", id="df-zero"),
        pytest.param(0.9, math.nan, "df must be", id="df-nan"),
    ],
)
def test_t_quantile_rejects_bad_arguments(p: float, df: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        t_quantile(p, df)


# --- linear_slope -----------------------------------------------------------------------------------------


def test_linear_slope_exact_line() -> None:
    fit = linear_slope([3.0 * i + 2.0 for i in range(10)])
    assert fit.slope == pytest.approx(3.0)
    assert fit.intercept == pytest.approx(2.0)
    assert fit.stderr == 0.0
    assert (fit.ci_low, fit.ci_high) == (fit.slope, fit.slope)
    assert fit.n == 10


def test_linear_slope_exact_line_with_inexact_floats_has_zero_stderr() -> None:
    # 0.1 and 0.3 are not representable in binary, so naive residuals come out as ~1e-17, not 0.
    fit = linear_slope([0.1 * i + 0.3 for i in range(25)])
    assert fit.slope == pytest.approx(0.1)
    assert fit.stderr == 0.0


def test_linear_slope_with_explicit_x() -> None:
    x = [0.5, 1.0, 4.0, 9.0]
    fit = linear_slope([-2.0 * v + 7.0 for v in x], x)
    assert fit.slope == pytest.approx(-2.0)
    assert fit.intercept == pytest.approx(7.0)
    assert fit.to_dict()["n"] == 4


def test_linear_slope_noisy_ci_contains_true_slope() -> None:
    rng = np.random.default_rng(41)
    x = np.arange(200, dtype=float)
    fit = linear_slope(0.05 * x + 10.0 + rng.normal(0.0, 1.0, x.size))
    assert fit.ci_low < 0.05 < fit.ci_high
    assert fit.stderr > 0.0
    # Known-sigma stderr for OLS: 1 / sqrt(Sxx).
    assert fit.stderr == pytest.approx(1.0 / math.sqrt(float(((x - x.mean()) ** 2).sum())), rel=0.2)
    assert fit.ci_high - fit.slope == pytest.approx(t_quantile(0.975, 198) * fit.stderr)


def test_linear_slope_wider_confidence_gives_wider_interval() -> None:
    y = list(np.random.default_rng(42).normal(0.0, 1.0, 30))
    narrow, wide = linear_slope(y, confidence=0.8), linear_slope(y, confidence=0.99)
    assert wide.ci_low < narrow.ci_low < narrow.ci_high < wide.ci_high


@pytest.mark.parametrize("n", [0, 1, 2])
def test_linear_slope_needs_three_points(n: int) -> None:
    with pytest.raises(ValueError, match=f"at least 3 points, got {n}"):
        linear_slope([1.0] * n)


@pytest.mark.parametrize(
    ("y", "x", "match"),
    [
        pytest.param([1.0, 2.0, 3.0], [1.0, 2.0], "same length", id="length-mismatch"),
        pytest.param([1.0, 2.0, 3.0], [4.0, 4.0, 4.0], "no spread", id="constant-x"),
        pytest.param([1.0, math.nan, 3.0], None, "y has 1 non-finite", id="nan-y"),
    ],
)
def test_linear_slope_rejects_bad_input(y: list[float], x: list[float] | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        linear_slope(y, x)


# --- relative_change_pct ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("baseline", "current", "expected"),
    [
        pytest.param(100.0, 110.0, 10.0, id="slower"),
        pytest.param(100.0, 90.0, -10.0, id="faster"),
        pytest.param(2.0, 2.0, 0.0, id="unchanged"),
        pytest.param(0.25, 0.5, 100.0, id="doubled"),
    ],
)
def test_relative_change_pct_values(baseline: float, current: float, expected: float) -> None:
    assert relative_change_pct(baseline, current) == pytest.approx(expected)


def test_relative_change_pct_rejects_zero_baseline() -> None:
    with pytest.raises(ValueError, match="baseline is 0"):
        relative_change_pct(0.0, 1.0)


def test_welch_difference_matches_scipys_welch_test() -> None:
    from scipy import stats as scipy_stats

    a, b = [1.0, 1.2, 0.9, 1.1, 1.05], [1.4, 1.3, 1.6, 1.45]
    diff, se, df = welch_difference(a, b)
    welch = scipy_stats.ttest_ind(b, a, equal_var=False)
    assert diff / se == pytest.approx(welch.statistic, rel=1e-12)
    assert df == pytest.approx(welch.df, rel=1e-12)
    with pytest.raises(ValueError, match="at least 2 values"):
        welch_difference([1.0], b)
