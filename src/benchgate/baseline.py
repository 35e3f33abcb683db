"""The directory baseline store: one baseline per (machine profile, workload).

    <baseline_dir>/<machine_profile>/<workload>/{env.json, metrics-ws*.json, eval.json, baseline.json}

Keyed by profile so that a run can only ever find a baseline measured on the same kind of machine.
Each promotion also appends the run's p50s to history.json (the last HISTORY_LENGTH runs): the spread
of those run-level figures is the machine's run-to-run noise, which compare uses as a noise floor.
Writing is atomic: the new baseline is assembled in a temporary sibling directory and swapped in, so a
crash leaves either the old baseline or the new one, never a mix.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchgate import stats
from benchgate.files import read_json, write_json
from benchgate.results import METRICS_FILE, Bundle, load_bundle

HISTORY_LENGTH = 20


def baseline_location(baseline_dir: Path, machine_profile: str, workload: str) -> Path:
    return Path(baseline_dir) / machine_profile / workload


def find_baseline(baseline_dir: Path, machine_profile: str, workload: str) -> Bundle | None:
    """The stored baseline for this profile and workload, None if there is none (corrupt ones raise)."""
    location = baseline_location(baseline_dir, machine_profile, workload)
    if not (location / "baseline.json").exists():
        return None
    return load_bundle(location)


def read_meta(baseline_dir: Path, machine_profile: str, workload: str) -> dict[str, Any] | None:
    """The stored baseline's baseline.json (who, when, why), None if there is none."""
    path = baseline_location(baseline_dir, machine_profile, workload) / "baseline.json"
    return read_json(path) if path.exists() else None


def save_baseline(
    run: Bundle,
    baseline_dir: Path,
    reason: str,
    *,
    created_unix: float | None = None,
    history: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Store `run` as its profile's baseline. By default its history extends the previous baseline's;
    a baseline copied from MLflow brings its own (`history`), its marking time and its origin (`extra`)."""
    workload = run.workload
    assert workload is not None, "a loaded bundle always has metrics"
    location = baseline_location(baseline_dir, run.machine_profile, workload)
    # The previous baseline's history, read (and checked) by the same code that loads any baseline.
    previous = find_baseline(baseline_dir, run.machine_profile, workload)
    location.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{location.name}.", dir=location.parent))
    try:
        for path in run.path.iterdir():
            if path.name in ("env.json", "eval.json") or METRICS_FILE.match(path.name):
                shutil.copy2(path, staging / path.name)
        meta: dict[str, Any] = {
            "machine_profile": run.machine_profile,
            "workload": workload,
            "world_sizes": sorted(run.metrics),
            "commit": run.env.get("git", {}).get("commit"),
            "branch": run.env.get("git", {}).get("branch"),
            "reason": reason,
            "created_unix": time.time() if created_unix is None else created_unix,
            "source": str(run.path.resolve()),
            **(extra or {}),
        }
        write_json(staging / "baseline.json", meta)
        if history is None:
            history = _extended_history(previous.history if previous else [], run, meta)
        write_json(staging / "history.json", {"runs": history})
        retired = location.with_name(f".{location.name}.old")
        shutil.rmtree(retired, ignore_errors=True)
        if location.exists():
            location.rename(retired)
        staging.rename(location)
        shutil.rmtree(retired, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return location


def _extended_history(
    previous: list[dict[str, Any]], run: Bundle, meta: dict[str, Any]
) -> list[dict[str, Any]]:
    p50 = {
        str(ws): {
            "tokens_per_s": stats.percentile(m["samples"]["tokens_per_s"], 50),
            "step_time_s": stats.percentile(m["samples"]["step_time_s"], 50),
        }
        for ws, m in run.metrics.items()
    }
    runs = [*previous, {"commit": meta["commit"], "created_unix": meta["created_unix"], "p50": p50}]
    return runs[-HISTORY_LENGTH:]
