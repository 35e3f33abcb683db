"""The gate's stages that are not a launch of their own: env, compare, A/B, baseline update.

Each is a function from files to files in one result directory, so a pipeline task can call exactly one
of them and a crash leaves the finished stages' results on disk. (bench, eval and trace live in
`launch`, `evaluate` and `trace`.) The pipeline in `benchgate.kfp` chains them; nothing here knows
about it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchgate import fingerprint
from benchgate.ab_rows import apply_ab, apply_ab_scaling, undecided_world_sizes
from benchgate.ab_runner import AB_FILE, RoundCallback, Side, run_ab
from benchgate.baseline import describe, find_baseline, made_of, save_baseline
from benchgate.compare import TIMING, Comparison, compare, load_comparison, without_reachable_baseline
from benchgate.config import RunConfig
from benchgate.diskfaults import writing
from benchgate.env import capture_environment
from benchgate.files import read_json, write_json, write_text
from benchgate.report import markdown
from benchgate.results import Bundle, load_bundle
from benchgate.verdict import screen


def stage_env(
    out_dir: Path, cwd: Path | None = None, branch: str | None = None, config: RunConfig | None = None
) -> dict[str, Any]:
    """Capture env.json; with the run's `config`, also the fingerprints of what A/B holds fixed."""
    env = capture_environment(cwd, branch)
    if config is not None:
        env["fingerprints"] = fingerprint.capture_fingerprints(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "env.json", env)
    return env


def stage_check_workload(config: RunConfig) -> dict[str, Any]:
    """Check the workload's contract before any bench: its members, then one real training step on the
    bench's device (CPU without a GPU).

    WorkloadError (exit 2) names the member and its value; see `training.check_training_step`. Returns
    what the step saw, for the task's log.
    """
    from benchgate.training import check_training_step, resolve_device  # torch: only tasks that train
    from benchgate.workloads.base import load_workload

    bench = config.bench
    started = time.perf_counter()
    workload = load_workload(bench.workload, dict(bench.workload_args))
    eval_seq_len = config.eval.seq_len if config.eval.enabled else None
    where = f"bench.workload: {bench.workload}"
    loss = check_training_step(workload, where, bench.seed, eval_seq_len, resolve_device(bench.device))
    return {"workload": workload.name, "loss": loss, "seconds": time.perf_counter() - started}


def write_comparison(run_dir: Path, comparison: Comparison) -> None:
    with writing("the comparison", run_dir / "compare.json"):  # a full or read-only disk: exit 3
        write_json(run_dir / "compare.json", comparison.to_dict())
        write_text(run_dir / "compare.md", markdown(comparison))


def stage_compare(
    config: RunConfig, run_dir: Path, tracking_state: dict[str, Any] | None = None
) -> tuple[Comparison, Bundle, Bundle | None]:
    """Compare the run in `run_dir` with its baseline; writes compare.json and compare.md.

    `tracking_state` is what `publish.refresh_baseline` saw of MLflow: when it was unreachable and the
    store has no baseline, nothing is NEW, it is UNKNOWN (see `compare.without_reachable_baseline`)."""
    current = load_bundle(run_dir)
    workload = current.workload
    assert workload is not None
    baseline = find_baseline(config.gate.baseline_dir, current.machine_profile, workload)
    comparison = compare(baseline, current, config.gate.tolerances)
    comparison.on_unknown = config.gate.on_unknown
    skipped = eval_skipped(config, current)
    if skipped is not None:
        comparison.notes.append(skipped)
    state = tracking_state or {}
    if baseline is None and state.get("enabled") and state.get("reachable") is False:
        comparison = without_reachable_baseline(comparison, str(state.get("error") or "unreachable"))
    write_comparison(run_dir, comparison)
    return comparison, current, baseline


def eval_skipped(config: RunConfig, current: Bundle) -> str | None:
    """The note of an eval that did not run, and why; None when it ran (its rows say so)."""
    if current.eval is None and not config.eval.enabled:
        return "eval skipped: eval.enabled is false (--no-eval): no perplexity or probe checks"
    if current.eval is not None and "skipped" in current.eval:
        return f"eval skipped: {current.eval['skipped']}"
    return None


def worlds_for_ab(
    comparison: Comparison, baseline: Bundle | None, base_available: bool, explicit_base: bool = False
) -> list[int]:
    """World sizes an A/B run must decide: those the screen did not PASS, when the base code exists.

    An explicit base (`--base`, the pipeline's base_commit) decides rows without a stored baseline too:
    on a fresh CI runner with an empty store, A/B against the base commit is the only timing test."""
    if not base_available or (baseline is None and not explicit_base):
        return []
    return undecided_world_sizes(comparison, include_new=explicit_base)


def ab_base_commit(env: dict[str, Any], baseline: Bundle | None) -> str:
    """The base code for A/B: the run's explicit base commit, else the baseline run's commit when the
    run's repository has it and it is not the candidate itself; "" when there is none to check out.

    A local run's repository is the one it runs in (`benchgate run` passes it): its candidate is the
    working tree, so the baseline's own commit is a base too when the tree has changed since."""
    from benchgate.source import has_commit

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
    """Decide `world_sizes` by interleaved A/B of `base` and `candidate` (into run_dir/ab/).

    Each A/B decision replaces the screen's row; rewrites compare.json and compare.md in `run_dir`.
    `resume`: continue the undecided rounds saved in run_dir/ab/ws<N>/ab.json.
    """
    comparison = load_comparison(run_dir / "compare.json")
    current = load_bundle(run_dir)
    # The device count the run was captured with (as the bench tasks use), not a second probe.
    gpus = current.env.get("gpu", {}).get("count")
    unseen = fingerprints_unseen_by_ab(config, current)
    outcomes: dict[int, dict[str, Any]] = {}
    for ws in world_sizes:
        metrics = current.metrics.get(ws)
        step_s = screen.mean_step_time(metrics["samples"]["step_time_s"]) if metrics else None
        outcome = run_ab(config, ws, run_dir, base, candidate, gpus, on_round, step_s, resume)
        outcomes[ws] = outcome.to_dict(base, candidate)
        comparison = apply_ab(comparison, outcomes[ws], config.gate.tolerances, config.gate.ab, unseen)
    # Every A/B of this run, earlier tasks' included: the efficiency row needs both world sizes.
    for path in sorted(run_dir.glob(f"ab/ws*/{AB_FILE}")):
        saved = read_json(path)
        outcomes.setdefault(int(saved["world_size"]), saved)
    comparison = apply_ab_scaling(comparison, outcomes, config.gate.tolerances)
    write_comparison(run_dir, comparison)
    return comparison


def fingerprints_unseen_by_ab(config: RunConfig, current: Bundle) -> list[str]:
    """What differs between the stored baseline run and this one that both A/B sides share (benchgate,
    the installed packages, the bench configuration): a change there is invisible to A/B."""
    workload = current.workload
    baseline = (
        find_baseline(config.gate.baseline_dir, current.machine_profile, workload) if workload else None
    )
    if baseline is None:
        return []
    return fingerprint.differing(baseline.env.get("fingerprints"), current.env.get("fingerprints"))


# Why `auto` promotes a run (should_update_baseline); the explicit policy's reason is FORCED.
AUTO_REASON = "branch main"
FORCED = "--update-baseline"
# What the baseline policy decided about this run, beside its results: for the terminal and the log.
BASELINE_DECISION_FILE = "baseline-decision.json"


def should_update_baseline(config: RunConfig, env: dict[str, Any], comparison: Comparison) -> str | None:
    """The reason to write this run as the baseline, or None.

    No ratchet: `auto` promotes only a run on main from a clean tree whose every timing check PASSed
    (or is NEW: the first baseline). A WARN, UNKNOWN or FAIL run never becomes the reference, so two
    successive 4% slowdowns are both measured against the same baseline. (`held_back` then keeps a run
    that measured less than the baseline it would replace.)
    """
    policy = config.gate.update_baseline
    if policy == "always":
        return FORCED
    git = env.get("git", {})
    if policy != "auto" or git.get("branch") != "main" or git.get("dirty") is not False:
        return None
    timing_ok = all(c.status in ("PASS", "NEW") for c in comparison.checks if c.metric == TIMING)
    if comparison.verdict in ("PASS", "WARN") and timing_ok:
        return AUTO_REASON
    return None


def held_back(run: dict[str, Any], current: dict[str, Any] | None) -> str | None:
    """Why `auto` does not promote a run that measured `run` (baseline.made_of) over the profile's
    `current` baseline (None: there is none), or None.

    Every later run is judged against the baseline, so a trial run must not become it unnoticed: one
    without the eval would leave later evals unchecked, and one of fewer steps makes the timing noisier
    than the baseline it would replace. Only `--update-baseline` (gate.update_baseline = "always") writes
    such a run.
    """
    if run["eval"] == "off":
        return "the run had eval off (eval.enabled = false): later evals would have nothing to compare with"
    if current is not None and run["steps"] < current["steps"]:
        return f"the run measured {run['steps']} steps, fewer than the current baseline's {current['steps']}"
    return None


def stage_update_baseline(config: RunConfig, run_dir: Path, comparison: Comparison) -> Path | None:
    """Write the run in `run_dir` as its profile's baseline when the policy says so; returns where.

    Says what it decided (printed, and in run_dir/baseline-decision.json for `benchgate run`): a written
    baseline with what it is made of, or why `auto` kept an eligible run from becoming it and how to
    force it."""
    current = load_bundle(run_dir)
    reason = should_update_baseline(config, current.env, comparison)
    if reason is None:
        return None
    assert current.workload is not None  # a loaded bundle has metrics
    previous = find_baseline(config.gate.baseline_dir, current.machine_profile, current.workload)
    made = made_of(current)
    why_not = held_back(made, made_of(previous) if previous else None) if reason == AUTO_REASON else None
    written = None
    if why_not is not None:
        line = (
            f"baseline not written: {why_not}. To make it the baseline anyway, run again with "
            '--update-baseline (gate.update_baseline = "always")'
        )
    else:
        written = save_baseline(current, config.gate.baseline_dir, reason)
        which = "the first baseline of this profile" if previous is None else "replaces the previous baseline"
        line = f"baseline written: {written} ({which}, {reason}: {describe(made)})"
    print(f"benchgate publish: {line}", flush=True)
    decision = {"written": str(written) if written else None, "reason": reason, "made_of": made, "line": line}
    write_json(run_dir / BASELINE_DECISION_FILE, decision)
    return written


def baseline_lines(out_dir: Path, written: Path | None) -> list[str]:
    """What the baseline policy decided about the run gathered in `out_dir`, for the terminal."""
    path = out_dir / BASELINE_DECISION_FILE
    if path.is_file():
        return [str(read_json(path)["line"])]
    return [f"baseline written: {written}"] if written else []


def result_files(out_dir: Path) -> str:
    """The result files the run left in `out_dir`, as the terminal lists them (only those that exist)."""
    names = ["compare.json"] if (out_dir / "compare.json").is_file() else []
    if any(out_dir.glob("metrics-ws*.json")):
        names.append("metrics-ws*.json")
    evaluation = out_dir / "eval.json"
    if evaluation.is_file():
        names.append("eval.json (skipped)" if "skipped" in read_json(evaluation) else "eval.json")
    if (out_dir / "trace").is_dir():
        names.append("trace/")
    return ", ".join(names)
