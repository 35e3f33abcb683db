"""Which seeds the eval runs: its first seed always; seeds seed+1 .. seed+k-1 only when that first seed
is out of band of the stored baseline's eval (eval.seeds = k in all).

Another seed is another model. A commit that only draws the random stream once more before building
the model trains a different seed's model, and over 5 seeds gpt-tiny's perplexity spread 3.9% and its
16-item probes up to 44 pts: beyond the tolerances (1.5%, 2 pts) on no change at all. So one seed out
of band is no evidence, and more seeds settle it (checks/quality.py judges them); one seed in band
PASSes at no extra cost.

Why here, in the eval stage: it is the only stage that can train (compare never loads torch), and
the extra seeds are needed only on a minority of runs, which only a stage that sees the baseline's
figures can tell. It reads the baseline from the directory store (`gate.baseline_dir`), which a local
run keeps on its disk; where the store holds none for this profile and workload (a first run, or a
cluster task without the baseline volume), no more seeds run and eval.json says why, and compare
judges the first seed alone (see checks/quality.py for what it does without a spread).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchgate.config import MAX_SEED, RunConfig
from benchgate.errors import BenchgateError
from benchgate.results.eval_seeds import SeedRecord, first_seed_out_of_band, seed_records
from benchgate.store.baseline import find_baseline


@dataclass
class StoredEval:
    """The stored baseline's eval, as the eval stage sees it: None with the reason where it cannot."""

    evaluation: dict[str, Any] | None
    why: str = ""
    where: str = ""


def stored_baseline_eval(baseline_dir: Path, machine_profile: str | None, workload: str) -> StoredEval:
    """The eval.json of this profile and workload's stored baseline, if the store holds one with an eval."""
    if machine_profile is None:
        return StoredEval(None, "no machine profile given: the stored baseline was not looked up")
    try:
        baseline = find_baseline(baseline_dir, machine_profile, workload)
    except BenchgateError as e:  # a corrupt store is compare's to refuse; the eval only runs no more seeds
        return StoredEval(None, f"the stored baseline cannot be read ({e})")
    if baseline is None:
        return StoredEval(None, f"no stored baseline for {machine_profile}/{workload} in {baseline_dir}")
    if baseline.eval is None or "skipped" in baseline.eval:
        return StoredEval(None, f"the stored baseline {baseline.path} has no eval")
    return StoredEval(baseline.eval, where=str(baseline.path))


@dataclass
class SeedPlan:
    extra: list[int] = field(default_factory=list)  # the seeds to run after the first
    why: str = ""  # said in eval.json (`more_seeds`) and so in the comparison's note


def comparable(baseline: dict[str, Any], settings: dict[str, Any], device: str) -> bool:
    """The baseline's eval ran as this one does (compare compares only such evals)."""
    return baseline.get("settings") == settings and baseline.get("device") == device


def plan_more_seeds(
    config: RunConfig, first: dict[str, Any], stored: StoredEval, settings: dict[str, Any], device: str
) -> SeedPlan:
    """More seeds when the first is out of band of the stored baseline's, eval.seeds in all."""
    seed, wanted = config.eval.seed, config.eval.seeds
    if stored.evaluation is None:
        return SeedPlan(why=f"one seed: {stored.why}")
    if not comparable(stored.evaluation, settings, device):
        return SeedPlan(
            why=f"one seed: the stored baseline's eval ({stored.where}) ran other settings or device"
        )
    items: dict[str, tuple[bool, ...] | None] = {
        name: tuple(probe["items"]) for name, probe in first["probes"].items()
    }
    record = SeedRecord(seed, first["perplexity"], items)
    said = first_seed_out_of_band(stored.evaluation, record, config.gate.tolerances)
    if not said:
        return SeedPlan(why=f"one seed: seed {seed} is within tolerance of the stored baseline's")
    extra = [s for s in range(seed + 1, seed + wanted) if s <= MAX_SEED]
    if not extra:
        return SeedPlan(why=f"one seed (eval.seeds is {wanted}): seed {seed} is out of band: {said}")
    base_seeds = len(seed_records(stored.evaluation))
    return SeedPlan(
        extra,
        f"{1 + len(extra)} seeds: seed {seed} is out of band of the stored baseline's "
        f"({base_seeds} seed{'s' if base_seeds > 1 else ''}): {said}",
    )
