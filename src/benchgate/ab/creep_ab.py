"""Creep decided by A/B: where the screen says this run is slower than the pinned anchor, an interleaved
A/B of the anchor's commit (side A) against this run (side B) decides the creep row.

The screen's creep row (checks/creep.py) compares one launch with the anchor's one launch, at the
machine's run-to-run noise. It cannot hold a 1% false FAIL, and since every run meets the same anchor
launch, an anchor that ran fast makes every later run of unchanged code look slower: 26-39% of anchors
raised a false FAIL within 50 runs (benchmarks/creep_rates.py). The per-commit A/B does not have that
flaw: both sides are launched afresh in every round, side by side, and the rule (ab/decision.decide)
holds its error rates over the rounds. So a screen FAIL leads here, and the row becomes

    FAIL     the A/B's FAIL: slower than the anchor's code beyond the tolerance, with confidence
    PASS     the A/B's PASS
    INFO     the A/B's UNKNOWN: undecided, shown, never gated (a creep row never asks for work)

Only where no A/B can be run does the screen's FAIL stand, and the row says why (the anchor recorded no
commit, the run names no repository, the repository lacks the commit). The A/B's rounds are kept under
`<run>/creep/ab/ws<N>/` beside the per-commit A/B's `<run>/ab/`.

The A/B runs in the A/B stage (ab/stage.py): `with_creep_worlds` adds the creep rows' world sizes to
those the compare stage hands it, `timing_worlds` keeps the per-commit A/B to the rows it was asked
for, and `stage_creep_ab` decides the creep rows. The rest is pure.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchgate.ab import decision as ab_decision
from benchgate.ab.rows import undecided_world_sizes
from benchgate.ab.runner import RoundCallback, Side, ab_layout, run_ab
from benchgate.checks.creep import ANCHOR_COMMIT, NO_AB
from benchgate.config import RunConfig
from benchgate.errors import BenchgateError
from benchgate.results.comparison import CREEP, Check, Comparison
from benchgate.results.figures import mean_step_time

CREEP_DIR = "creep"  # <run>/creep/ab/ws<N>/ab.json: the creep A/B's rounds
_COMMIT = re.compile(re.escape(ANCHOR_COMMIT) + r"([0-9a-f]{40})")

# Checks out the anchor's commit; returns the side, or raises a BenchgateError saying why it cannot.
AnchorCheckout = Callable[[str], Side]


def pending(comparison: Comparison) -> dict[int, str]:
    """{world size: the anchor's commit} of the creep rows that the screen FAILed and an A/B can decide."""
    found = {}
    for check in comparison.checks:
        screen_fail = check.metric == CREEP and check.status == "FAIL" and check.decided_by == "screen"
        if screen_fail and (match := _COMMIT.search(check.note)) and check.world_size is not None:
            found[check.world_size] = match.group(1)
    return found


def with_creep_worlds(comparison: Comparison, per_commit: list[int]) -> list[int]:
    """The world sizes the A/B stage runs: the per-commit A/B's, and those of pending creep rows."""
    return sorted({*per_commit, *pending(comparison)})


def timing_worlds(comparison: Comparison, world_sizes: list[int]) -> list[int]:
    """Of `world_sizes`, those the per-commit A/B decides: all but the ones that are there only for a
    creep row (their timing row is decided, e.g. a screen PASS, and not an A/B's to redo)."""
    creep_only = set(pending(comparison)) - set(undecided_world_sizes(comparison, include_new=True))
    return [ws for ws in world_sizes if ws not in creep_only]


def apply_creep_ab(comparison: Comparison, outcome: dict[str, Any], config: RunConfig) -> Comparison:
    """The creep row of the outcome's world size (an ab.json of anchor vs this run) replaced by the A/B's
    decision: FAIL and PASS as decided, UNKNOWN as INFO (never gated)."""
    ws = int(outcome["world_size"])
    decision = outcome["decision"]
    tol, ab = config.gate.tolerances, config.gate.ab
    rounds = outcome["rounds"]
    status = {"FAIL": "FAIL", "PASS": "PASS"}.get(decision["status"], "INFO")
    verdict = {
        "FAIL": f"slower than the anchor's code beyond -{tol.throughput_drop_pct:g}% with confidence, by "
        "A/B: the changes since add up to that, however small each was",
        "PASS": f"within -{tol.throughput_drop_pct:g}% of the anchor's code with confidence, by A/B",
    }.get(status, f"undecided by A/B, shown for information (not gated): {decision['reason']}")

    def rebuilt(row: Check) -> Check:
        since = row.note.split("; ")[0]  # "since the anchor (...): x%": first, as next_steps reads it
        notes = [
            since,
            verdict,
            f"A/B vs {outcome['base']['description']}, {decision['rounds']} rounds in "
            f"{outcome['seconds']:.0f} s",
            f"the screen said FAIL ({row.change:+.1f}%)"
            if row.change is not None
            else "the screen said FAIL",
        ]
        if decision.get("round_sd_pct") is not None:
            notes.append(
                f"round-to-round sd {decision['round_sd_pct']:.1f}%, minimum detectable slowdown "
                f"{decision['mde_pct']:.1f}% (80% power)"
            )
        return replace(
            row,
            status=status,  # type: ignore[arg-type]
            change=decision["change_pct"],
            ci_low=decision["ci_low_pct"],
            ci_high=decision["ci_high_pct"],
            rule="creep vs the pinned anchor, by A/B of the anchor's commit against this run: "
            + ab_decision.rule_text(tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds)
            + "; UNKNOWN is INFO (not gated)",
            note="; ".join(notes),
            decided_by="ab",
            ab_base=_mean_rate(rounds, "base"),
            ab_candidate=_mean_rate(rounds, "candidate"),
        )

    return _with_row(comparison, ws, rebuilt)


def mark_no_ab(comparison: Comparison, ws: int, why: str) -> Comparison:
    """The screen's FAIL of the creep row at `ws` stands: no A/B could be run, for the reason `why`."""

    def stands(row: Check) -> Check:
        kept = [part for part in row.note.split("; ") if ANCHOR_COMMIT not in part]
        kept.insert(2, f"{NO_AB}: {why}; the screen's FAIL stands")
        return replace(row, note="; ".join(kept))

    return _with_row(comparison, ws, stands)


def decide_creep(
    config: RunConfig,
    run_dir: Path,
    comparison: Comparison,
    world_sizes: list[int],
    candidate: Side,
    checkout_anchor: AnchorCheckout,
    gpus: int | None = None,
    on_round: RoundCallback | None = None,
) -> Comparison:
    """Each pending creep row at `world_sizes` decided by an A/B of the anchor's commit (checked out by
    `checkout_anchor`) against `candidate`, its rounds under run_dir/creep/; a checkout that fails
    leaves the screen's FAIL, saying why."""
    todo = {ws: sha for ws, sha in pending(comparison).items() if ws in world_sizes}
    sides: dict[str, Side | str] = {}
    for ws, sha in sorted(todo.items()):
        if sha not in sides:
            try:
                sides[sha] = checkout_anchor(sha)
            except BenchgateError as e:
                sides[sha] = str(e)
        base = sides[sha]
        if isinstance(base, str):
            comparison = mark_no_ab(comparison, ws, base)
            continue
        metrics = run_dir / f"metrics-ws{ws}.json"
        step_s = _step_s(metrics)
        layout = ab_layout(config, ws, run_dir, gpus)
        outcome = run_ab(
            config, ws, run_dir / CREEP_DIR, base, candidate, gpus, on_round, step_s, layout=layout
        )
        comparison = apply_creep_ab(comparison, outcome.to_dict(base, candidate), config)
    return comparison


def anchor_checkout(env: dict[str, Any], workspace: Path) -> AnchorCheckout:
    """How the A/B stage checks out the anchor's commit: from the run's repository (env.json `source`)
    into `workspace`, as the per-commit A/B checks out its base."""
    from benchgate.measure.source import checkout, has_commit, import_paths

    repository = str((env.get("source") or {}).get("repository") or "")

    def check_out(sha: str) -> Side:
        if not repository:
            raise BenchgateError("the run names no repository to check the anchor's commit out of")
        if not has_commit(repository, sha):
            raise BenchgateError(f"{repository} does not hold the anchor's commit {sha[:12]}")
        root = checkout(repository, sha, workspace / sha[:12])
        return Side(f"anchor {sha[:12]}", sha, tuple(import_paths(root)))

    return check_out


def stage_creep_ab(
    config: RunConfig,
    run_dir: Path,
    comparison: Comparison,
    world_sizes: list[int],
    candidate: Side,
    env: dict[str, Any],
    gpus: int | None = None,
    on_round: RoundCallback | None = None,
) -> Comparison:
    """The A/B stage's creep part: `comparison` (run_dir's) with its pending creep rows at `world_sizes`
    decided, the anchor checked out beside run_dir (as the per-commit A/B's base is). Not written: the
    A/B stage writes compare.json once."""
    checkout_anchor = anchor_checkout(env, run_dir.parent / "workspace-anchor")
    return decide_creep(config, run_dir, comparison, world_sizes, candidate, checkout_anchor, gpus, on_round)


def _with_row(comparison: Comparison, ws: int, change: Callable[[Check], Check]) -> Comparison:
    checks = [change(c) if c.metric == CREEP and c.world_size == ws else c for c in comparison.checks]
    return dataclasses.replace(comparison, checks=checks, notes=list(comparison.notes))


def _mean_rate(rounds: list[dict[str, Any]], side: str) -> float | None:
    rates = [float(r[f"{side}_tokens_per_s"]) for r in rounds if r.get(f"{side}_tokens_per_s")]
    return statistics.fmean(rates) if rates else None


def _step_s(metrics: Path) -> float | None:
    from benchgate.kit.files import read_json

    if not metrics.is_file():
        return None
    return mean_step_time(read_json(metrics)["samples"]["step_time_s"])
