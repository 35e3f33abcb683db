"""Copies of one real run (tests/data/stack_run/: env.json and metrics-ws1/2.json as `benchgate run` wrote
them) at other commits, every step slower by a factor, and the baseline store as a run finds it (the
stored baseline with a noise history 0.5% apart, and the pinned anchor): the creep row's cases, by
compare (tests/unit/checks/test_creep.py) and by A/B (tests/unit/ab/test_creep_ab.py)."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from harness import TESTS_DIR, make_config

from benchgate.config import RunConfig
from benchgate.kit.files import read_json, write_json
from benchgate.results.bundle import load_bundle
from benchgate.results.comparison import Comparison
from benchgate.results.figures import corrected_mean, mean_step_time
from benchgate.store.anchor import save_anchor
from benchgate.store.baseline import save_baseline

REAL_RUN = TESTS_DIR / "data" / "stack_run"
ANCHOR, BEFORE, NOW = "a" * 40, "b" * 40, "c" * 40
_TIMES = ("max", "mean", "min", "p10", "p50", "p50_ci_high", "p50_ci_low", "p90", "std")
_SWAPPED = {"max": "min", "min": "max", "p10": "p90", "p90": "p10", "p50_ci_low": "p50_ci_high"}
_SWAPPED["p50_ci_high"] = "p50_ci_low"


def slowed(metrics: dict[str, Any], factor: float) -> dict[str, Any]:
    """A metrics file of the same run with every step `factor` times as long (samples and summaries)."""
    m = copy.deepcopy(metrics)
    samples = m["samples"]
    samples["step_time_s"] = [t * factor for t in samples["step_time_s"]]
    samples["step_time_s_per_rank"] = [[t * factor for t in rank] for rank in samples["step_time_s_per_rank"]]
    samples["tokens_per_s"] = [r / factor for r in samples["tokens_per_s"]]
    m["step_time_s"] = {k: v * factor if k in _TIMES else v for k, v in m["step_time_s"].items()}
    rates = m["tokens_per_s"]
    m["tokens_per_s"] = {
        k: rates[_SWAPPED.get(k, k)] / factor if k in _TIMES and k != "std" else v for k, v in rates.items()
    }
    m["tokens_per_s"]["std"] = rates["std"] / factor
    return m


def real_run(where: Path, commit: str, slower: float = 1.0, **changes: Any) -> Path:
    """A copy of the recorded run at `commit`, every step `slower` times as long; `changes` replace
    fields of each metrics file (machine_profile goes into env.json too)."""
    where.mkdir(parents=True)
    env = read_json(REAL_RUN / "env.json")
    env["git"]["commit"] = commit
    env["machine_profile"] = changes.get("machine_profile", env["machine_profile"])
    write_json(where / "env.json", env)
    for path in sorted(REAL_RUN.glob("metrics-ws*.json")):
        write_json(where / path.name, slowed(read_json(path), slower) | changes)
    return where


def noise_history(run_dir: Path) -> list[dict[str, Any]]:
    """Three earlier baseline runs 0.5% apart: history.json rows of the run's own run-level figures."""
    run = load_bundle(run_dir)
    rows = []
    for f in (0.995, 1.0, 1.005):
        p50 = {}
        for ws, m in run.metrics.items():
            samples = m["samples"]
            figures = {"mean_step_time_s": mean_step_time(samples["step_time_s"]) * f}
            figures["mean_step_time_per_reference"] = float(corrected_mean(samples) or 0) * f
            p50[str(ws)] = figures
        rows.append({"commit": ANCHOR, "p50": p50})
    return rows


def gate(tmp_path: Path, tolerance: float) -> RunConfig:
    return make_config(tmp_path, gate={"tolerances": {"throughput_drop_pct": tolerance}})


def store(config: RunConfig, tmp_path: Path, baseline: Path | None, anchor: Path | None) -> None:
    """The baseline store as a run finds it: `baseline` (with the noise history) and the pinned `anchor`."""
    if baseline is not None:
        history = noise_history(baseline)
        save_baseline(load_bundle(baseline), config.gate.baseline_dir, "test", history=history)
    if anchor is not None:
        meta = {"mlflow_run_id": "r" * 32, "tracking_uri": "http://mlflow.example"}
        save_anchor(load_bundle(anchor), config.gate.baseline_dir, "release 1.0", time.time(), meta)


def rows(comparison: Comparison, metric: str) -> dict[int, Any]:
    return {c.world_size: c for c in comparison.checks if c.metric == metric}
