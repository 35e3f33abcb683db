"""Change points in a figure's history: where its level moved, each with its size and a calibrated
significance.

A per-commit gate with a 5% tolerance cannot see five 1.5% slowdowns in a row; the history can. The
method is E-divisive means (Matteson and James, 2014; the method Apache Otava and MongoDB use), with
alpha = 1 on the log of the figure, so a change is a ratio and a 10% drop weighs the same at any level:

1. For a segment, every split at least `min_size` runs from either end is scored by the energy
   statistic Q(t) = t(n-t)/n * (2 mean|a-b| - mean|a-a'| - mean|b-b'|), a distance between the two
   sides' distributions that grows with a shift of level and with the runs behind it.
2. Significance by permutation: the segment's runs are shuffled `permutations` times and the best
   split of each shuffle is scored the same way; p = (1 + #{shuffles scoring at least the observed
   best}) / (1 + permutations). The test sees the maximum over splits, so the choice of the split is
   paid for, on a series of any length.
3. Binary segmentation: the most significant split over all current segments is accepted while its
   p is at most `alpha`, and the two halves are searched again.
4. After the final segmentation, each change point is described from the two final segments beside it:
   the change of the mean log figure as a percentage with a Welch interval, and a p-value tested again
   on those two segments alone (the p of step 2 was computed on a wider segment that may hold other
   changes).

Pure: numpy only, seeded, deterministic for a given series.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from benchgate.kit import stats

FloatArray = npt.NDArray[np.float64]

ALPHA = 0.01
PERMUTATIONS = 499
MIN_SIZE = 3
SEED = 20261124


@dataclass(frozen=True)
class ChangePoint:
    """A change at run `index`: runs before it (from `start`) against runs from it (to `end`)."""

    index: int
    start: int
    end: int
    change_pct: float
    ci_low_pct: float
    ci_high_pct: float
    p_value: float
    confidence: float

    @property
    def n_before(self) -> int:
        return self.index - self.start

    @property
    def n_after(self) -> int:
        return self.end - self.index

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"n_before": self.n_before, "n_after": self.n_after}


def _split_scores(distances: FloatArray, min_size: int) -> FloatArray:
    """Q(t) for every split t in [min_size, n - min_size] of the runs whose pairwise distances are
    `distances` (n x n); stacked distance matrices (k x n x n) give k rows of scores."""
    n = distances.shape[-1]
    cum = distances.cumsum(axis=-2).cumsum(axis=-1)
    t = np.arange(min_size, n - min_size + 1)
    inside_a = cum[..., t - 1, t - 1]  # every ordered pair within the first t runs
    first_rows = cum[..., t - 1, n - 1]  # the first t runs against all runs
    total = cum[..., n - 1, n - 1][..., None]
    between = first_rows - inside_a
    inside_b = total - 2 * between - inside_a
    size_a, size_b = t.astype(float), (n - t).astype(float)
    within_a = inside_a / (size_a * (size_a - 1))
    within_b = inside_b / (size_b * (size_b - 1))
    energy = 2 * between / (size_a * size_b) - within_a - within_b
    result: FloatArray = size_a * size_b / n * energy
    return result


def best_split(
    values: Sequence[float] | FloatArray,
    min_size: int = MIN_SIZE,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
) -> tuple[int, float] | None:
    """The best split of `values` (its index: the first run after the change) and its permutation
    p-value; None when the series is too short to split with `min_size` runs on each side."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2 * min_size:
        return None
    distances = np.abs(x[:, None] - x[None, :])
    scores = _split_scores(distances, min_size)
    best = int(np.argmax(scores))
    observed = float(scores[best])
    rng = np.random.default_rng(seed)
    exceed = 0
    batch = max(1, min(permutations, 4_000_000 // (n * n)))  # bounds memory on long series
    done = 0
    while done < permutations:
        k = min(batch, permutations - done)
        order = np.argsort(rng.random((k, n)), axis=1)
        shuffled = distances[order[:, :, None], order[:, None, :]]
        # A tiny tolerance: a shuffle that reproduces the series scores the same up to rounding.
        best_of_each = _split_scores(shuffled, min_size).max(axis=1)
        exceed += int(np.count_nonzero(best_of_each >= observed * (1 - 1e-12)))
        done += k
    return best + min_size, (1 + exceed) / (1 + permutations)


def _describe(
    logs: FloatArray, start: int, index: int, end: int, p_value: float, confidence: float
) -> ChangePoint:
    diff, se, df = stats.welch_difference(logs[start:index], logs[index:end])
    half = stats.t_quantile(0.5 + confidence / 2, df) * se
    pct = lambda log_ratio: 100.0 * math.expm1(log_ratio)  # noqa: E731
    return ChangePoint(index, start, end, pct(diff), pct(diff - half), pct(diff + half), p_value, confidence)


def change_points(
    values: Sequence[float],
    alpha: float = ALPHA,
    min_size: int = MIN_SIZE,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    confidence: float = 0.95,
) -> list[ChangePoint]:
    """The change points of a positive figure's series (oldest first), in order.

    Raises ValueError on a value that is not positive and finite: the method works on logs, and a
    zero or negative throughput is a broken run, not a level."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: got {alpha!r} (expected a level between 0 and 1)")
    if min_size < 2:
        raise ValueError(f"min_size: got {min_size!r} (a segment needs at least 2 runs for its spread)")
    for i, v in enumerate(values):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"values[{i}]: got {v!r} (expected a positive, finite figure)")
    logs = np.log(np.asarray(values, dtype=float))
    bounds = [0, len(logs)]
    tested: dict[tuple[int, int], tuple[int, float] | None] = {}
    while True:
        candidates = []
        for start, end in itertools.pairwise(bounds):
            if (start, end) not in tested:
                tested[(start, end)] = best_split(logs[start:end], min_size, permutations, seed)
            found = tested[(start, end)]
            if found is not None:
                candidates.append((found[1], start + found[0]))
        significant = [c for c in candidates if c[0] <= alpha]
        if not significant:
            break
        _, index = min(significant)
        bounds = sorted([*bounds, index])
    points = []
    for start, index, end in zip(bounds, bounds[1:], bounds[2:], strict=False):
        # Tested again on its own two final segments: the statistics of the final segmentation.
        again = best_split(logs[start:end], min_size, permutations, seed)
        p_value = again[1] if again is not None else 1.0
        points.append(_describe(logs, start, index, end, p_value, confidence))
    return points
