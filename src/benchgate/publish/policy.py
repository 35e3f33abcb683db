"""The baseline policy: whether the finished run becomes its profile's baseline, and saying why (not).

Runs inside the publish stage (`stage.stage_publish`), after the final verdict and before MLflow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchgate.config import RunConfig
from benchgate.kit.files import write_json
from benchgate.results.bundle import load_bundle
from benchgate.results.comparison import TIMING, Comparison
from benchgate.store.baseline import describe, find_baseline, made_of, save_baseline

# Why `auto` promotes a run (should_update_baseline); the explicit policy's reason is FORCED.
AUTO_REASON = "branch main"
FORCED = "--update-baseline"
# What the baseline policy decided about this run, beside its results: for the terminal and the log.
BASELINE_DECISION_FILE = "baseline-decision.json"


def should_update_baseline(config: RunConfig, env: dict[str, Any], comparison: Comparison) -> str | None:
    """The reason to write this run as the baseline, or None.

    No ratchet: `auto` promotes only a run on main from a clean tree whose verdict is PASS or WARN and
    whose every timing check PASSed (or is NEW: the first baseline); a WARN elsewhere (memory, scaling,
    the environment row) does not hold it back. A run with a timing row that is not PASS never becomes
    the reference, so two successive 4% slowdowns are both measured against the same baseline.
    (`held_back` then keeps a run that measured less than the baseline it would replace.)
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
