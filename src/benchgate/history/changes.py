"""Change points in a figure's history: where its level moved, each with its size and a calibrated
significance.

A per-commit gate with a 5% tolerance cannot see five 1.5% slowdowns in a row; the history can. The
method is E-divisive means (Matteson and James, 2014; the method Apache Otava and MongoDB use), with
alpha = 1 on the log of the figure, so a change is a ratio and a 10% drop weighs the same at any level:

1. For a segment, every split at least `min_size` runs from either end is scored by the energy
   statistic Q(t) = t(n-t)/n * (2 mean|a-b| - mean|a-a'| - mean|b-b'|), a distance between the two
   sides' distributions that grows with a shift of level and with the runs behind it.
2. Significance by block permutation: the segment's runs are cut into consecutive blocks of
   `block_length` runs and the blocks are shuffled `permutations` times; the best split of each shuffle
   is scored the same way; p = (1 + #{shuffles scoring at least the observed best}) / (1 + permutations).
   The test sees the maximum over splits, so the choice of the split is paid for, on a series of any
   length. Blocks, not single runs: runs of one host are not independent (a busy day slows several in a
   row; lag-1 autocorrelation 0.3 is ordinary), and shuffling single runs breaks those stretches apart,
   so a stretch looks like a shift: 13% of 60-run AR(1) histories at 0.3 got a false change point. The
   block length comes from the segment's own lag-1 autocorrelation rho, taken around its levels (each
   segment between its two largest shifts of level minus its own mean, so a real change does not pass
   for dependence): block = ceil((1 + rho) / (1 - rho)) (the AR(1) variance inflation of a mean); 1 where
   rho is within its own noise of zero (2/sqrt(n)) or the segment is under 20 runs; at most a quarter
   of the segment.
3. Binary segmentation: the most significant split over all current segments is accepted while its
   p is at most `alpha` and its size (the mean log change between its two sides) is at least
   `min_change_pct`: a figure's magnitude floor (`floor_pct`: its tolerance times a stated fraction),
   so that perplexity 5.0 -> 5.00005 is no change point however many runs say so; the two halves are
   searched again.
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


# Shifts of level taken out before the autocorrelation is measured: a history with a drop and a
# recovery (or two steps down) must not pass for a dependent series.
LEVEL_SHIFTS = 2


def block_length(values: Sequence[float] | FloatArray) -> int:
    """The block of the permutation null: ceil((1 + rho) / (1 - rho)) runs for the lag-1
    autocorrelation rho of the series around its levels (each segment between its LEVEL_SHIFTS largest
    shifts of level, minus its own mean), so that a level shift does not pass for dependence; 1 where
    rho is within its noise of zero (2/sqrt(n)) or n < 20; at most n // 4."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 20:  # too few pairs to tell dependence from chance: single runs
        return 1
    residuals = _around_levels(x)
    energy = float(residuals @ residuals)
    if energy == 0.0:
        return 1
    rho = min(float(residuals[1:] @ residuals[:-1]) / energy, 0.9)
    if rho <= 2.0 / math.sqrt(n):
        return 1
    return max(1, min(math.ceil((1 + rho) / (1 - rho)), n // 4))


def _around_levels(x: FloatArray, shifts: int = LEVEL_SHIFTS, min_side: int = 5) -> FloatArray:
    """x minus the mean of its segment, after taking out its `shifts` largest shifts of level (greedy:
    each time the split, at least `min_side` runs from a segment's ends, with the largest between-sides
    sum of squares). A dependent series keeps most of its autocorrelation; clean shifts leave
    independent noise."""
    bounds = [0, len(x)]
    for _ in range(shifts):
        best: tuple[float, int] | None = None
        for start, end in itertools.pairwise(bounds):
            n = end - start
            if n < 2 * min_side:
                continue
            segment = x[start:end]
            total = np.cumsum(segment)
            splits = np.arange(min_side, n - min_side + 1)
            left = total[splits - 1] / splits
            right = (total[-1] - total[splits - 1]) / (n - splits)
            between = splits * (n - splits) / n * (left - right) ** 2
            i = int(np.argmax(between))
            if best is None or between[i] > best[0]:
                best = (float(between[i]), start + int(splits[i]))
        if best is None:
            break
        bounds = sorted([*bounds, best[1]])
    return np.concatenate([x[a:b] - x[a:b].mean() for a, b in itertools.pairwise(bounds)])


def _block_orders(rng: np.random.Generator, k: int, n: int, block: int) -> npt.NDArray[np.int64]:
    """`k` orders of range(n): its consecutive blocks of `block` runs shuffled (runs kept in order within
    a block), each order starting at a random run so the blocks do not always cut at the same places."""
    if block <= 1:
        return np.argsort(rng.random((k, n)), axis=1)
    orders = np.empty((k, n), dtype=np.int64)
    for row in range(k):
        shift = int(rng.integers(block))
        cuts = [0, *range(shift or block, n, block), n]
        blocks = [np.arange(a, b) for a, b in itertools.pairwise(cuts) if b > a]
        orders[row] = np.concatenate([blocks[i] for i in rng.permutation(len(blocks))])
    return orders


def best_split(
    values: Sequence[float] | FloatArray,
    min_size: int = MIN_SIZE,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    block: int | None = None,
) -> tuple[int, float] | None:
    """The best split of `values` (its index: the first run after the change) and its block-permutation
    p-value; None when the series is too short to split with `min_size` runs on each side. `block`: the
    block length of the null (None: `block_length` of the values)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2 * min_size:
        return None
    distances = np.abs(x[:, None] - x[None, :])
    scores = _split_scores(distances, min_size)
    best = int(np.argmax(scores))
    block = block_length(x) if block is None else block
    observed = float(scores[best])
    rng = np.random.default_rng(seed)
    exceed = 0
    batch = max(1, min(permutations, 4_000_000 // (n * n)))  # bounds memory on long series
    done = 0
    while done < permutations:
        k = min(batch, permutations - done)
        order = _block_orders(rng, k, n, block)
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
    min_change_pct: float = 0.0,
) -> list[ChangePoint]:
    """The change points of a positive figure's series (oldest first), in order; a split smaller than
    `min_change_pct` (the figure's magnitude floor, `floor_pct`) is never accepted, however significant.

    Raises ValueError on a value that is not positive and finite: the method works on logs, and a
    zero or negative throughput is a broken run, not a level."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: got {alpha!r} (expected a level between 0 and 1)")
    if min_size < 2:
        raise ValueError(f"min_size: got {min_size!r} (a segment needs at least 2 runs for its spread)")
    if not (math.isfinite(min_change_pct) and 0 <= min_change_pct < 100):
        raise ValueError(f"min_change_pct: got {min_change_pct!r} (expected a percentage from 0 below 100)")
    floor = abs(math.log1p(min_change_pct / 100.0))
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
                index = start + found[0]
                size = abs(float(logs[index:end].mean() - logs[start:index].mean()))
                if size >= floor:
                    candidates.append((found[1], index))
        significant = [c for c in candidates if c[0] <= alpha]
        if not significant:
            break
        _, accepted = min(significant)
        bounds = sorted([*bounds, accepted])
    points = []
    for start, index, end in zip(bounds, bounds[1:], bounds[2:], strict=False):
        # Tested again on its own two final segments: the statistics of the final segmentation.
        again = best_split(logs[start:end], min_size, permutations, seed)
        p_value = again[1] if again is not None else 1.0
        points.append(_describe(logs, start, index, end, p_value, confidence))
    return points


# The stated fraction of a figure's tolerance below which a level change is no change point.
FLOOR_FRACTION = 0.5


def floor_pct(tolerance_pct: float, fraction: float = FLOOR_FRACTION) -> float:
    """A figure's magnitude floor: `fraction` of its gate tolerance (gate.tolerances), in percent."""
    if not (math.isfinite(tolerance_pct) and tolerance_pct > 0):
        raise ValueError(f"tolerance_pct: got {tolerance_pct!r} (expected a positive percentage)")
    return fraction * tolerance_pct
