"""The compare stage: a run's result files against its profile's stored baseline: compare.json and
compare.md.

A stage is a function from files to files in one result directory (see the package docstring).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchgate.checks.compare import compare, without_reachable_baseline
from benchgate.checks.creep import with_creep
from benchgate.checks.paired import with_run_figures
from benchgate.checks.tables import markdown
from benchgate.config import RunConfig
from benchgate.kit.diskfaults import writing
from benchgate.kit.files import write_json, write_text
from benchgate.results.bundle import Bundle, load_bundle
from benchgate.results.comparison import Comparison, load_comparison
from benchgate.store.anchor import find_anchor
from benchgate.store.baseline import find_baseline


def write_comparison(run_dir: Path, comparison: Comparison) -> Comparison:
    """compare.json and compare.md; returns the comparison as written.

    A row an A/B decided keeps the figures the compare.json it replaces holds for it (the stored
    baseline's and this run's), its A/B pair beside them (checks/paired.py): one tokens/s per run."""
    path = run_dir / "compare.json"
    if any(c.decided_by == "ab" and c.ab_base is None for c in comparison.checks):
        comparison = with_run_figures(comparison, load_comparison(path) if path.is_file() else None)
    with writing("the comparison", path):  # a full or read-only disk: exit 3
        write_json(path, comparison.to_dict())
        write_text(run_dir / "compare.md", markdown(comparison))
    return comparison


def stage_compare(
    config: RunConfig, run_dir: Path, tracking_state: dict[str, Any] | None = None
) -> tuple[Comparison, Bundle, Bundle | None]:
    """Compare the run in `run_dir` with its baseline (and its anchor: creep rows); writes compare.json
    and compare.md.

    `tracking_state` is what `tracking/refresh.py` saw of MLflow: when it was unreachable and the
    store has no baseline, nothing is NEW, it is UNKNOWN (see `compare.without_reachable_baseline`)."""
    current = load_bundle(run_dir)
    workload = current.workload
    assert workload is not None
    baseline = find_baseline(config.gate.baseline_dir, current.machine_profile, workload)
    comparison = compare(baseline, current, config.gate.tolerances)
    # Beside each timing row, the run against the pinned anchor, if there is one (checks/creep.py).
    anchor = find_anchor(config.gate.baseline_dir, current.machine_profile, workload)
    comparison = with_creep(comparison, anchor, baseline, current, config.gate.tolerances)
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
