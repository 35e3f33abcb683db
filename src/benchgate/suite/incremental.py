"""An incremental suite (`[suite] incremental = true`): entries already measured in its --out are skipped.

An entry counts as measured when the previous run of the suite into the same --out left it done (a
verdict, any verdict: a FAIL is measured too) under the same *measurement key*:

    machine_profile    this host's profile for the entry's GPUs per launch (measure/env.py): results are
                       only comparable within one
    fingerprints       benchgate's timed code, the installed packages with the interpreter, and the
                       entry's bench settings (measure/fingerprint.py): a transformers upgrade or a new
                       benchgate measures every entry again
    world_sizes        the world sizes the entry runs
    workload_source    a digest of the file of the workload's module, so a workload of your own whose
                       code changed is measured again

An entry that ended in an error is always run again (the fix may be what changed), and so is one whose
results directory is gone. A skipped entry keeps its results directory and its row of suite.json, marked
`skipped`, so the suite's table, Pareto view and coverage read it as if it had just run.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig
from benchgate.kit.files import read_json
from benchgate.measure.env import capture_environment, launch_gpus
from benchgate.measure.fingerprint import capture_fingerprints

KEY_FIELD = "measured_with"  # the suite.json row's field that holds an entry's measurement key


class KeyMaker:
    """Measurement keys for a suite's entries; the host's profile and the code's digests taken once."""

    def __init__(self) -> None:
        self._profiles: dict[int | None, str] = {}

    def key(self, config: RunConfig) -> dict[str, Any]:
        per_launch = launch_gpus(config.bench.world_sizes)
        if per_launch not in self._profiles:
            self._profiles[per_launch] = str(capture_environment(per_launch=per_launch)["machine_profile"])
        return {
            "machine_profile": self._profiles[per_launch],
            "fingerprints": capture_fingerprints(config),
            "world_sizes": config.bench.world_sizes,
            "workload_source": _module_digest(config.bench.workload),
        }


def _module_digest(spec: str) -> str | None:
    """A digest of the workload module's file, found without importing it; None where there is none."""
    module = spec.partition(":")[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    if not origin or not Path(origin).is_file():
        return None
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest()[:16]


def previous_rows(suite_file: Path) -> dict[str, dict[str, Any]]:
    """The rows of the previous suite.json by entry name ({} where there is none or it cannot be read)."""
    try:
        data = read_json(suite_file)
        return {row["name"]: row for row in data["entries"] if isinstance(row, dict) and "name" in row}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def measured_before(
    row: Mapping[str, Any] | None, key: Mapping[str, Any], out_dir: Path
) -> dict[str, Any] | None:
    """The previous row, where it measured the entry under `key` and its results are still there."""
    if row is None or row.get("state") not in ("done", "skipped") or row.get("verdict") is None:
        return None
    if row.get(KEY_FIELD) != dict(key):
        return None
    if not (out_dir / str(row.get("out", ""))).is_dir():
        return None
    return dict(row)
