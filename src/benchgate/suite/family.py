"""A suite's family-wise false FAIL: how likely unchanged code FAILs somewhere in the suite, and its control.

A suite FAILs when any entry does, and an entry FAILs when any of its timing decisions does (one per
world size: the screen's, or the A/B's in its place). Each decision FAILs unchanged code with probability
at most alpha_d = 1 - its confidence (at the tolerance; far less at no change), so with k decisions the
chance that at least one FAILs falsely is at most k * alpha_d (Bonferroni: whatever their dependence),
and 1 - (1 - alpha_d)^k where they are independent: 40% for ten decisions at 95%.

Control (`family = "bonferroni"` in the [suite] table, the default): each entry runs at confidence
1 - alpha_i / k, where alpha_i = 1 - the confidence its own config sets (0.95 by default), so the suite
FAILs unchanged code with probability at most the mean of the alpha_i (alpha, when they agree). The
split is made before any entry runs: each A/B spends its stricter budget from its first look (its
bounds are calibrated for any confidence: ab/levels.py), so no verdict is re-judged after the fact, and
every check of the entry (perplexity, scaling, creep) is held to the same confidence. The price is
rounds: stricter bounds need more of them to decide a change near the tolerance.
`family = "none"` keeps each entry's confidence and states the bound it leaves.

Holm's step-down would be less strict, but it orders the decisions by their p-values, which a
sequential decision stopped at its first conclusive look does not have; Bonferroni at the source needs
none. Pure: configs in, a plan and its sentence out (suite.json's "family", suite.md, the terminal).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from benchgate.config import RunConfig

FamilyMethod = Literal["bonferroni", "none"]
METHODS: tuple[FamilyMethod, ...] = ("bonferroni", "none")
# An entry that leaves bench.world_sizes to the machine runs [1, N]: at most two timing decisions.
DEFAULT_DECISIONS = 2


@dataclass(frozen=True)
class FamilyPlan:
    method: FamilyMethod
    decisions: int  # timing decisions in the suite: the runnable entries' world sizes, summed
    alpha: float  # the family-wise false-FAIL bound the suite states (Bonferroni)
    independent: float  # the same where the decisions are independent

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sentence": self.sentence()}

    def sentence(self) -> str:
        k = self.decisions
        if k == 0:
            return "Family-wise false FAIL: no entry ran a timing decision."
        if self.method == "bonferroni":
            return (
                f"Family-wise false FAIL: {k} timing decision{'s' if k != 1 else ''} (entries x world "
                f"sizes), each at 1/{k} of its entry's error budget (Bonferroni), so the suite FAILs "
                f"unchanged code with probability at most {self.alpha:.1%}."
            )
        return (
            f"Family-wise false FAIL: {k} timing decision{'s' if k != 1 else ''} (entries x world sizes) "
            f'at their entries\' own confidence (family = "none"): the suite may FAIL unchanged code with '
            f"probability up to {self.alpha:.1%} ({self.independent:.1%} were they independent)."
        )


def decisions_of(config: RunConfig) -> int:
    """The entry's timing decisions: one per world size. Without bench.world_sizes the run picks [1, N]
    on the machine it lands on (N may be 1): counted as 2, the most it can be, since counting more
    decisions than run only makes the split stricter, never looser."""
    return len(config.bench.world_sizes) if config.bench.world_sizes is not None else DEFAULT_DECISIONS


def entry_alpha(config: RunConfig) -> float:
    """One decision's false-FAIL budget as the entry's config sets it."""
    return 1.0 - config.gate.tolerances.confidence


def plan_family(configs: list[RunConfig], method: FamilyMethod) -> FamilyPlan:
    """The plan over the runnable entries' configs (as written, before any split)."""
    if method not in METHODS:
        raise ValueError(f"family: got {method!r}, expected one of {', '.join(METHODS)}")
    sizes = [decisions_of(c) for c in configs]
    k = sum(sizes)
    if k == 0:
        return FamilyPlan(method, 0, 0.0, 0.0)
    alphas = [entry_alpha(c) for c in configs]
    survive = 1.0
    if method == "bonferroni":
        per = [a / k for a in alphas]
        bound = sum(n * a for n, a in zip(sizes, per, strict=True))
    else:
        per = alphas
        bound = min(1.0, sum(n * a for n, a in zip(sizes, per, strict=True)))
    for n, a in zip(sizes, per, strict=True):
        survive *= (1.0 - a) ** n
    return FamilyPlan(method, k, bound, 1.0 - survive)


def entry_confidence(config: RunConfig, plan: FamilyPlan) -> float:
    """The confidence the entry runs at under `plan`."""
    if plan.method == "none" or plan.decisions <= 1:
        return config.gate.tolerances.confidence
    return 1.0 - entry_alpha(config) / plan.decisions


def apply_family(config: RunConfig, plan: FamilyPlan) -> RunConfig:
    """The entry's config at its share of the family's budget (unchanged under family = "none")."""
    confidence = entry_confidence(config, plan)
    if confidence == config.gate.tolerances.confidence:
        return config
    tolerances = config.gate.tolerances.model_copy(update={"confidence": confidence})
    gate = config.gate.model_copy(update={"tolerances": tolerances})
    return config.model_copy(update={"gate": gate})
