"""Autocorrelation-aware (HAC) intervals of a slope and a mean over per-step figures.

A run's per-step losses are autocorrelated: consecutive steps share weights and optimizer state, and a
noisy batch moves the next few losses too. The i.i.d. interval of linear_slope then is too narrow: on
flat AR(1) losses of 60 steps it calls the slope positive in 13% of runs at phi 0.5 and 26% at phi 0.8
instead of 2.5% (benchmarks/loss_rates.py). The intervals below scale the i.i.d. standard error by the
long-run variance of AR(1) residuals, (1 + rho) / (1 - rho): the parametric form of a HAC estimator
(den Haan & Levin), which on 30-60 steps keeps its level where Newey-West's kernel estimate, with
Andrews' bandwidth, still false-FAILs 7-15% at phi 0.8 (docs/benchmarks.md, "Loss trajectory").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from benchgate.kit.stats import (
    FloatArray,
    Samples,
    SlopeFit,
    as_array,
    check_confidence,
    linear_slope,
    t_quantile,
)

# rho is capped below 1, where the factor (1 + rho) / (1 - rho) is infinite: 0.97 already widens 8x.
_MAX_RHO = 0.97


@dataclass(frozen=True)
class HacSlopeFit(SlopeFit):
    """An OLS slope with an AR(1)-HAC interval: `rho` the residuals' lag-1 autocorrelation (bias
    corrected, in [0, 0.97]) and `df` the effective degrees of freedom of its t quantile."""

    rho: float = 0.0
    df: float = 0.0


@dataclass(frozen=True)
class HacMean:
    """The mean of an autocorrelated series with an AR(1)-HAC interval (see HacSlopeFit)."""

    mean: float
    stderr: float
    ci_low: float
    ci_high: float
    rho: float
    df: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _ar1_rho(resid: FloatArray, fitted: int) -> float:
    """Lag-1 autocorrelation of residuals, bias-corrected and clipped to [0, _MAX_RHO].

    The plain estimate is biased towards 0 by about (1 + 3 rho) / n per fitted parameter (a mean, a line);
    negative values are clipped: an anti-correlated series would only narrow the interval."""
    n = int(resid.size)
    energy = float(resid @ resid)
    if energy == 0.0:  # an exact line or a constant: nothing is noisy, nothing is correlated
        return 0.0
    rho = float(resid[1:] @ resid[:-1]) / energy
    rho += fitted * (1.0 + 3.0 * rho) / n
    return min(max(rho, 0.0), _MAX_RHO)


def _inflation(rho: float, n: int, fitted: int) -> tuple[float, float]:
    """The variance factor of AR(1) errors and the effective degrees of freedom of n points."""
    factor = (1.0 + rho) / (1.0 - rho)
    return factor, max(1.0, (n - fitted) / factor)


def hac_slope(y: Samples, confidence: float = 0.95) -> HacSlopeFit:
    """OLS slope of y against 0..n-1 with an autocorrelation-aware interval (module note above).

    The standard error is linear_slope's times sqrt((1 + rho) / (1 - rho)), rho the residuals' lag-1
    autocorrelation; the t quantile has the effective degrees of freedom (n - 2)(1 - rho)/(1 + rho)."""
    fit = linear_slope(y, confidence=confidence)
    ys = as_array(y, "y")
    n = int(ys.size)
    x = np.arange(n, dtype=np.float64)
    resid = ys - (fit.intercept + fit.slope * x)
    rho = _ar1_rho(resid, 2)
    factor, df = _inflation(rho, n, 2)
    stderr = fit.stderr * math.sqrt(factor)
    half = t_quantile((1.0 + confidence) / 2.0, df) * stderr
    return HacSlopeFit(fit.slope, fit.intercept, stderr, fit.slope - half, fit.slope + half, n, rho, df)


def hac_mean(samples: Samples, confidence: float = 0.95) -> HacMean:
    """Mean of an autocorrelated series (e.g. a paired loss difference, step by step) with an AR(1)-HAC
    interval: the i.i.d. standard error times sqrt((1 + rho) / (1 - rho)), t with effective df."""
    check_confidence(confidence)
    arr = as_array(samples)
    n = int(arr.size)
    if n < 3:
        raise ValueError(f"hac_mean needs at least 3 points, got {n}")
    mean = float(arr.mean())
    resid = arr - mean
    rho = _ar1_rho(resid, 1)
    factor, df = _inflation(rho, n, 1)
    stderr = math.sqrt(float(resid @ resid) / (n - 1) / n * factor)
    half = t_quantile((1.0 + confidence) / 2.0, df) * stderr
    return HacMean(mean, stderr, mean - half, mean + half, rho, df, n)


def slope_difference(
    base: HacSlopeFit, current: HacSlopeFit, confidence: float = 0.95
) -> tuple[float, float, float]:
    """current.slope - base.slope of two independent runs and its interval: the HAC standard errors
    combined, the t quantile's degrees of freedom by Welch-Satterthwaite from each fit's effective df."""
    check_confidence(confidence)
    va, vb = base.stderr**2, current.stderr**2
    diff = current.slope - base.slope
    if va + vb == 0.0:
        return diff, diff, diff
    df = (va + vb) ** 2 / ((va**2 / base.df if va else 0.0) + (vb**2 / current.df if vb else 0.0))
    half = t_quantile((1.0 + confidence) / 2.0, df) * math.sqrt(va + vb)
    return diff, diff - half, diff + half
