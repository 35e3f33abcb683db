"""Helpers shared by the benchmark scripts (not part of the benchgate package)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def spread_pct(values: Sequence[float]) -> float:
    """(max - min) / median, in percent: how far apart repeated measurements land."""
    return 100 * (max(values) - min(values)) / statistics.median(values)


def cv_pct(values: Sequence[float]) -> float:
    return 100 * statistics.stdev(values) / statistics.mean(values)


def ms(values: Sequence[float]) -> str:
    return " ".join(f"{1e3 * v:.1f}" for v in values)
