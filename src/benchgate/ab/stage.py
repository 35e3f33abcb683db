"""The A/B stage: where the screen could not decide (or FAILed), A/B rounds between the base commit and
this one decide again, and their rows replace the screen's in compare.json. The rounds' layout
(gate.ab.layout: interleaved, or one side at a time where a GPU cannot hold both) is chosen from this
run's env.json and metrics (ab/layout.py) and recorded in each ab.json and row note.

A stage is a function from files to files in one result directory (see the package docstring).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchgate.ab import creep_ab
from benchgate.ab.environment import with_environment
from benchgate.ab.explain import explain_or_why, memory_grew, wants_explanation
from benchgate.ab.rows import apply_ab, apply_ab_scaling, undecided_world_sizes
from benchgate.ab.runner import AB_FILE, RoundCallback, Side, run_ab
from benchgate.ab.sides import Sides, apply_sides, rewrite_baseline_note
from benchgate.checks.loss import apply_ab_loss
from benchgate.checks.stage import write_comparison
from benchgate.config import RunConfig
from benchgate.kit.files import read_json, write_json
from benchgate.measure import fingerprint
from benchgate.measure.launch import metrics_path
from benchgate.results.bundle import Bundle, load_bundle
from benchgate.results.comparison import Comparison, load_comparison
from benchgate.results.figures import mean_step_time
from benchgate.store.baseline import find_baseline


def worlds_for_ab(
    comparison: Comparison, baseline: Bundle | None, base_available: bool, explicit_base: bool = False
) -> list[int]:
    """World sizes an A/B run must decide: those the screen did not PASS, when the base code exists.

    An explicit base (`--base`, the pipeline's base_commit) decides rows without a stored baseline too:
    on a fresh CI runner with an empty store, A/B against the base commit is the only timing test."""
    if not base_available:
        return []
    per_commit = (
        [] if baseline is None and not explicit_base else undecided_world_sizes(comparison, explicit_base)
    )
    # Creep rows the screen FAILed: the A/B stage decides them by A/B of the anchor (ab/creep_ab.py).
    return creep_ab.with_creep_worlds(comparison, per_commit)


def ab_base_commit(env: dict[str, Any], baseline: Bundle | None) -> str:
    """The base code for A/B: the run's explicit base commit, else the baseline run's commit when the
    run's repository has it and it is not the candidate itself; "" when there is none to check out.

    A local run's repository is the one it runs in (`benchgate run` passes it): its candidate is the
    working tree, so the baseline's own commit is a base too when the tree has changed since."""
    from benchgate.measure.source import has_commit

    explicit = (env.get("base") or {}).get("commit", "")
    if explicit:
        return str(explicit)
    source = env.get("source") or {}
    repository = source.get("repository", "")
    recorded = (baseline.env.get("git", {}) if baseline is not None else {}).get("commit") or ""
    if repository and recorded and recorded != source.get("commit") and has_commit(repository, recorded):
        return str(recorded)
    return ""


def stage_ab(
    config: RunConfig,
    run_dir: Path,
    world_sizes: list[int],
    base: Side,
    candidate: Side,
    on_round: RoundCallback | None = None,
    resume: bool = False,
) -> Comparison:
    """Decide `world_sizes` by A/B of `base` and `candidate` (into run_dir/ab/), in the layout
    gate.ab.layout names or `auto` picks from run_dir's env.json and metrics-ws<N>.json.

    Each A/B decision replaces the screen's row; rewrites compare.json and compare.md in `run_dir`.
    `resume`: continue the undecided rounds saved in run_dir/ab/ws<N>/ab.json.
    """
    comparison = load_comparison(run_dir / "compare.json")
    current = load_bundle(run_dir)
    # The device count the run was captured with (as the bench tasks use), not a second probe.
    gpus = current.env.get("gpu", {}).get("count")
    baseline = stored_baseline(config, current)
    unseen = fingerprints_unseen_by_ab(baseline, current)
    outcomes: dict[int, dict[str, Any]] = {}
    for ws in creep_ab.timing_worlds(comparison, world_sizes):
        metrics = current.metrics.get(ws)
        step_s = mean_step_time(metrics["samples"]["step_time_s"]) if metrics else None
        outcome = run_ab(config, ws, run_dir, base, candidate, gpus, on_round, step_s, resume)
        if wants_explanation(config, outcome.decision.status):
            # ab.json holds the decision before its explanation is tried.
            ws_dir = run_dir / "ab" / f"ws{ws}"
            memory = memory_grew(comparison, ws)
            outcome.attribution = explain_or_why(config, outcome, ws_dir, base, candidate, gpus, memory)
            write_json(ws_dir / AB_FILE, outcome.to_dict(base, candidate))
        outcomes[ws] = outcome.to_dict(base, candidate)
        comparison = apply_ab(comparison, outcomes[ws], config.gate.tolerances, config.gate.ab, unseen)
        # Both sides' losses on the same batches: numerics unchanged, or by how much (checks/loss.py).
        comparison = apply_ab_loss(comparison, outcomes[ws], config.gate.tolerances)
        # Where the setup differs from the baseline run's, its own change beside the code's (INFO/WARN).
        comparison = with_environment(
            comparison, outcomes[ws], unseen, baseline, current, config.gate.tolerances
        )
        # Where no stored baseline is, the base's memory and loss from the same rounds (ab/sides.py).
        sides = read_sides(run_dir, ws, len(outcome.rounds))
        comparison = apply_sides(comparison, ws, sides, base.description, config.gate.tolerances, metrics)
    comparison = rewrite_baseline_note(comparison, base.description)
    # Every A/B of this run, earlier tasks' included: the efficiency row needs both world sizes.
    for path in sorted(run_dir.glob(f"ab/ws*/{AB_FILE}")):
        saved = read_json(path)
        outcomes.setdefault(int(saved["world_size"]), saved)
    comparison = apply_ab_scaling(comparison, outcomes, config.gate.tolerances)
    comparison = creep_ab.stage_creep_ab(
        config, run_dir, comparison, world_sizes, candidate, current.env, gpus, on_round
    )
    for ws, outcome_dict in outcomes.items():
        if "attribution" in outcome_dict:
            comparison.attribution[str(ws)] = outcome_dict["attribution"]
    write_comparison(run_dir, comparison)
    return comparison


def read_sides(run_dir: Path, world_size: int, rounds: int) -> Sides:
    """The metrics files of the first `rounds` A/B rounds at `world_size` (ab/ws<N>/round<k>/{A,B}/), one
    pair per round; a round without both sides' files is left out."""
    base, candidate = [], []
    for index in range(1, rounds + 1):
        round_dir = run_dir / "ab" / f"ws{world_size}" / f"round{index}"
        paths = [metrics_path(round_dir / label, world_size) for label in ("A", "B")]
        if all(path.is_file() for path in paths):
            base.append(read_json(paths[0]))
            candidate.append(read_json(paths[1]))
    return Sides(base, candidate)


def stored_baseline(config: RunConfig, current: Bundle) -> Bundle | None:
    """The stored baseline of the run's profile and workload, if there is one."""
    workload = current.workload
    return find_baseline(config.gate.baseline_dir, current.machine_profile, workload) if workload else None


def fingerprints_unseen_by_ab(baseline: Bundle | None, current: Bundle) -> list[str]:
    """What differs between the stored baseline run and this one that both A/B sides share (benchgate,
    the packages the bench loads, the bench configuration): the A/B decides the code without it, and
    the environment row (ab/environment.py) measures it."""
    if baseline is None:
        return []
    return fingerprint.differing(*fingerprint.compared(baseline, current))
