"""eval.json's seeds: each seed's perplexity and per-item probe correctness, the seeds of two evals
paired, and the probes' item flips counted and tested.

Read by the eval stage (measure/seeds.py: is the first seed out of band of the stored baseline's, so
that more seeds must run) and by compare (checks/quality.py: the perplexity and probe rows), so that
both apply one rule. Pure: no torch.

An eval.json from before seeds has no `seeds` list: its top-level figures are its one seed (the seed
of its settings), and its probes have no `items` (per-item correctness): its probes cannot be paired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchgate.config import Tolerances
from benchgate.errors import BaselineError
from benchgate.kit import stats


@dataclass(frozen=True)
class SeedRecord:
    seed: int | None  # None: an eval.json whose settings name no seed
    perplexity: float
    # probe name -> each item's correctness, in the probe set's order; None where not recorded
    items: dict[str, tuple[bool, ...] | None]


@dataclass(frozen=True)
class FlipTest:
    """Item flips of one probe pooled over seed pairs, and the exact one-sided test on them."""

    worse: int  # items correct on the base's model and wrong on the candidate's
    better: int  # wrong -> correct
    pairs: int  # seed pairs pooled
    items: int  # items per pair
    p_value: float  # P(at least `worse` of the flips go worse | either way equally likely)
    alpha: float  # significant below this
    drop_pts: float  # accuracy drop over the pairs, in points (negative: a gain)
    fails: bool  # significant at the confidence AND a drop beyond tolerance

    def describe(self) -> str:
        over = f"over {self.pairs} seed pairs" if self.pairs > 1 else "on one seed"
        return (
            f"{self.worse} items correct->wrong, {self.better} wrong->correct of {self.items} {over}; "
            f"exact one-sided binomial p={self.p_value:.3g} (significant below {self.alpha:.3g})"
        )


def _shown(value: Any) -> str:
    """A value as an error names it: one line, at most 60 characters of it."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _items(value: Any, where: str) -> tuple[bool, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, bool) for v in value):
        raise BaselineError(f"{where}.items: got {_shown(value)}; expected a list of true/false")
    return tuple(value)


def _record(entry: Any, where: str) -> SeedRecord:
    if not isinstance(entry, dict):
        raise BaselineError(f"{where}: got {_shown(entry)}; expected an object")
    seed, perplexity, probes = entry.get("seed"), entry.get("perplexity"), entry.get("probes", {})
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BaselineError(f"{where}.seed: got {_shown(seed)}; expected an integer")
    if isinstance(perplexity, bool) or not isinstance(perplexity, int | float) or not perplexity > 0:
        raise BaselineError(f"{where}.perplexity: got {_shown(perplexity)}; expected a number > 0")
    if not isinstance(probes, dict):
        raise BaselineError(f"{where}.probes: got {_shown(probes)}; expected an object")
    items = {
        name: _items(p.get("items") if isinstance(p, dict) else None, f"{where}.probes.{name}")
        for name, p in probes.items()
    }
    return SeedRecord(seed, float(perplexity), items)


def seed_records(evaluation: dict[str, Any]) -> list[SeedRecord]:
    """Each seed the eval ran, its first seed first (the one its top-level figures are)."""
    seeds = evaluation.get("seeds")
    if seeds is None:  # an eval.json from before seeds: its one seed is its top level
        settings = evaluation.get("settings")
        seed = settings.get("seed") if isinstance(settings, dict) else None
        # The settings are compare's to check: a seed that is no integer only leaves this one unnamed.
        top = {**evaluation, "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None}
        return [_record(top, "eval")]
    if not isinstance(seeds, list) or not seeds:
        raise BaselineError(f"seeds: got {_shown(seeds)}; expected a non-empty list of seed records")
    return [_record(entry, f"seeds[{i}]") for i, entry in enumerate(seeds)]


def pair_seeds(base: list[SeedRecord], current: list[SeedRecord]) -> list[tuple[SeedRecord, SeedRecord]]:
    """Each current seed with a base seed of its own: the base's record of the same seed, else the
    base's first seed not yet paired; a current seed left without one is not paired.

    One to one, because pairs that shared a base seed would share its luck: against one base seed that
    happened to learn many items, every current seed looks worse. Three seeds pooled against one base
    seed FAILed a neutral change on 9% of simulated probes at 5%, one-to-one pairs on 0.9-1.7%
    (`python benchmarks/eval_seeds.py --simulate`)."""
    unused = list(base)
    pairs = []
    for record in current:
        same = [b for b in unused if b.seed is not None and b.seed == record.seed]
        match = same[0] if same else unused[0] if unused else None
        if match is None:
            break
        unused.remove(match)
        pairs.append((match, record))
    return pairs


def flip_test(
    pairs: list[tuple[SeedRecord, SeedRecord]], probe: str, tol: Tolerances, probes: int = 1
) -> FlipTest | None:
    """The probe's flips pooled over the pairs; None where a side has no per-item record of it (or
    records of another length: another probe set). Significant below (1 - confidence) / `probes`: the
    eval's probe rows share one false-alarm rate (Bonferroni), as a neutral commit meets them all."""
    worse = better = 0
    size = None
    for base, current in pairs:
        b, c = base.items.get(probe), current.items.get(probe)
        if b is None or c is None or len(b) != len(c) or not b or (size is not None and len(b) != size):
            return None
        size = len(b)
        worse += sum(x and not y for x, y in zip(b, c, strict=True))
        better += sum(y and not x for x, y in zip(b, c, strict=True))
    if size is None:
        return None
    p_value = stats.sign_test_p(worse, better)
    drop = 100.0 * (worse - better) / (size * len(pairs))
    alpha = (1.0 - tol.confidence) / probes
    fails = p_value < alpha and drop > tol.probe_accuracy_drop_points
    return FlipTest(worse, better, len(pairs), size, p_value, alpha, drop, fails)


def first_seed_out_of_band(baseline: dict[str, Any], first: SeedRecord, tol: Tolerances) -> str:
    """Why the candidate's first seed alone would not PASS against the baseline's eval ("" where it is
    in band): its perplexity beyond tolerance, or a probe's flip test FAILing. The eval stage runs more
    seeds exactly then, and compare PASSes a first seed in band on it alone."""
    [(base_first, _)] = pair_seeds(seed_records(baseline), [first])
    reasons = []
    change = stats.relative_change_pct(base_first.perplexity, first.perplexity)
    if change > tol.perplexity_increase_pct:
        reasons.append(f"perplexity {change:+.2f}% (tolerance {tol.perplexity_increase_pct:g}%)")
    for probe in sorted(first.items):
        test = flip_test([(base_first, first)], probe, tol, len(first.items))
        if test is not None and test.fails:
            reasons.append(f"probe {probe} -{test.drop_pts:.1f} pts ({test.describe()})")
    return "; ".join(reasons)
