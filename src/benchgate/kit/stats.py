"""Statistics over per-step samples and run-level figures: percentiles, summaries, t quantiles, slopes.

Consecutive training steps are autocorrelated (allocator warm-up, thermal drift, data-loader stalls), so an
i.i.d. bootstrap would give confidence intervals that are too narrow; the interval of a run's median comes
from a circular block bootstrap instead. The gate's decisions (checks/, ab/) work on run-level
figures with Student's t, because launches of identical code differ by more than their steps suggest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import SupportsFloat

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Samples = Sequence[float] | FloatArray
Statistic = Callable[[FloatArray], SupportsFloat]

# Bounds the index matrix of one bootstrap batch, so runs with very many steps do not exhaust memory.
_MAX_BATCH_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    std: float
    min: float
    p10: float
    p50: float
    p90: float
    max: float
    p50_ci_low: float
    p50_ci_high: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class SlopeFit:
    slope: float
    intercept: float
    stderr: float
    ci_low: float
    ci_high: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def as_array(samples: Samples, name: str = "samples") -> FloatArray:
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name} has {bad.size} non-finite value(s); the first is at index {int(bad[0])}")
    return arr


def check_confidence(confidence: float) -> None:
    # Written so that NaN fails too.
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def percentile(samples: Samples, q: float) -> float:
    """The q-th percentile (q in [0, 100]), interpolating linearly between closest ranks."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be in [0, 100], got {q!r}")
    return float(np.percentile(as_array(samples), q))


def summarize(samples: Samples, confidence: float = 0.95, seed: int = 0) -> Summary:
    """Descriptive statistics plus a block-bootstrap confidence interval of the median."""
    check_confidence(confidence)
    arr = as_array(samples)
    p10, p50, p90 = (float(v) for v in np.percentile(arr, [10.0, 50.0, 90.0]))
    ci_low, ci_high = block_bootstrap_ci(arr, np.median, confidence=confidence, seed=seed)
    return Summary(
        n=int(arr.size),
        mean=float(arr.mean()),
        std=float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        min=float(arr.min()),
        p10=p10,
        p50=p50,
        p90=p90,
        max=float(arr.max()),
        p50_ci_low=ci_low,
        p50_ci_high=ci_high,
    )


def _bootstrap_statistics(
    arr: FloatArray, statistic: Statistic, resamples: int, rng: np.random.Generator, block: int | None
) -> FloatArray:
    n = int(arr.size)
    # n ** (1/3) is the asymptotically MSE-optimal order of the block length for variance-type estimates.
    length = min(max(1, round(float(n) ** (1.0 / 3.0))) if block is None else block, n)
    if length < 1:
        raise ValueError(f"block must be >= 1, got {block!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples!r}")
    n_blocks = -(-n // length)
    offsets = np.arange(length)
    batch = max(1, _MAX_BATCH_ELEMENTS // (n_blocks * length))
    out = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, batch):
        count = min(batch, resamples - start)
        # Wrapping around the end gives every observation the same chance to be drawn (Politis & Romano).
        starts = rng.integers(0, n, size=(count, n_blocks))
        idx = ((starts[:, :, None] + offsets) % n).reshape(count, n_blocks * length)[:, :n]
        out[start : start + count] = _apply_rows(statistic, arr[idx])
    return out


def _apply_rows(statistic: Statistic, matrix: FloatArray) -> FloatArray:
    # The common reductions run over the whole batch at once; a Python loop over rows is ~50x slower.
    if statistic is np.median:
        return np.asarray(np.median(matrix, axis=1), dtype=np.float64)
    if statistic is np.mean:
        return np.asarray(np.mean(matrix, axis=1), dtype=np.float64)
    return np.fromiter((float(statistic(row)) for row in matrix), dtype=np.float64, count=len(matrix))


def _percentile_interval(values: FloatArray, confidence: float) -> tuple[float, float]:
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def block_bootstrap_ci(
    samples: Samples,
    statistic: Statistic,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    block: int | None = None,
) -> tuple[float, float]:
    """Percentile confidence interval of `statistic` from a circular block bootstrap.

    `block` defaults to round(n ** (1/3)) and is capped at n. The result is a pure function of the arguments.
    """
    check_confidence(confidence)
    arr = as_array(samples)
    values = _bootstrap_statistics(arr, statistic, resamples, np.random.default_rng(seed), block)
    return _percentile_interval(values, confidence)


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) by Lentz's continued fraction (Numerical Recipes 6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    # The fraction converges fast only on this side of the mode; the other side uses the symmetry relation.
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1.0) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1.0)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h / a


def _t_upper_tail(t: float, df: float) -> float:
    return 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))


def _cornish_fisher(z: float, df: float) -> float:
    """Abramowitz & Stegun 26.7.5: t quantile as a series in 1/df around the normal quantile z."""
    z2 = z * z
    g1 = z * (z2 + 1.0) / 4.0
    g2 = z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0
    g3 = z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0
    g4 = z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92160.0
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def t_quantile(p: float, df: float) -> float:
    """Quantile function of Student's t with `df` degrees of freedom (df = inf gives the normal quantile)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if not df > 0.0:
        raise ValueError(f"df must be > 0, got {df!r}")
    z = NormalDist().inv_cdf(p)
    # Past 1000 df the series is within 1e-10 of the exact quantile even at p = 1e-10, and the continued
    # fraction needs ever more terms.
    if df > 1000.0:
        return _cornish_fisher(z, df)
    if p == 0.5:
        return 0.0
    # The series alone is off by ~0.05 at df = 3, so it only seeds a bracketed Newton solve on the exact tail.
    tail = min(p, 1.0 - p)
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    lo, hi = 0.0, max(_cornish_fisher(abs(z), df), 1e-3)
    while _t_upper_tail(hi, df) > tail:
        lo, hi = hi, 2.0 * hi
    t = hi
    for _ in range(200):
        excess = _t_upper_tail(t, df) - tail
        if excess > 0.0:
            lo = t
        else:
            hi = t
        step = t + excess / math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))
        step = step if lo < step < hi else 0.5 * (lo + hi)
        t, done = step, abs(step - t) <= 1e-13 * max(1.0, t)
        if done:
            break
    return t if p > 0.5 else -t


def linear_slope(y: Samples, x: Samples | None = None, confidence: float = 0.95) -> SlopeFit:
    """Ordinary least-squares slope of y against x (default 0..n-1), with a t-based confidence interval."""
    check_confidence(confidence)
    if len(y) < 3:
        raise ValueError(f"linear_slope needs at least 3 points, got {len(y)}")
    ys = as_array(y, "y")
    n = int(ys.size)
    xs = np.arange(n, dtype=np.float64) if x is None else as_array(x, "x")
    if xs.size != n:
        raise ValueError(f"x and y must have the same length, got {xs.size} and {n}")
    dx = xs - xs.mean()
    sxx = float(dx @ dx)
    if sxx == 0.0:
        raise ValueError("x has no spread: all values are equal, so the slope is undefined")
    dy = ys - ys.mean()
    slope = float(dx @ dy) / sxx
    intercept = float(ys.mean()) - slope * float(xs.mean())
    resid = dy - slope * dx
    ssr = float(resid @ resid)
    # Round-off leaves ~1e-30 relative residue on an exact line; report that as the exact zero it is.
    if ssr <= 1e-20 * float(dy @ dy):
        ssr = 0.0
    stderr = math.sqrt(ssr / (n - 2) / sxx)
    half = t_quantile((1.0 + confidence) / 2.0, n - 2) * stderr
    return SlopeFit(slope, intercept, stderr, slope - half, slope + half, n)


def welch_difference(a: Samples, b: Samples) -> tuple[float, float, float]:
    """mean(b) - mean(a), its standard error and its Welch-Satterthwaite degrees of freedom (a very large
    number where both spreads are zero), for an interval of the difference of two means."""
    xa, xb = as_array(a, "a"), as_array(b, "b")
    if len(xa) < 2 or len(xb) < 2:
        raise ValueError(f"each side needs at least 2 values for its spread, got {len(xa)} and {len(xb)}")
    va, vb = float(xa.var(ddof=1)) / len(xa), float(xb.var(ddof=1)) / len(xb)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1)) if se > 0 else 1e9
    return float(xb.mean() - xa.mean()), se, df


def relative_change_pct(baseline: float, current: float) -> float:
    """Percentage change from baseline to current; positive means current is larger."""
    if baseline == 0:
        raise ValueError("baseline is 0, so the relative change is undefined")
    return 100.0 * (current - baseline) / baseline


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom: the inverse of t_quantile."""
    if not df > 0.0:
        raise ValueError(f"df must be > 0, got {df!r}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = _t_upper_tail(abs(t), df)
    return 1.0 - tail if t >= 0 else tail


def sign_test_p(worse: int, better: int) -> float:
    """Exact one-sided sign test (McNemar's exact test on the discordant pairs): P(X >= worse) for
    X ~ Binomial(worse + better, 1/2), the chance of at least this many of the flips going one way when
    either way is equally likely. 1.0 where nothing flipped."""
    if worse < 0 or better < 0:
        raise ValueError(f"flip counts must be >= 0, got worse={worse!r} and better={better!r}")
    n = worse + better
    # Exact integers: 16 items over 16 seeds is 256 flips at most, far inside what math.comb sums exactly.
    return float(sum(math.comb(n, k) for k in range(worse, n + 1)) / 2**n)
