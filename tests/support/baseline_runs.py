"""Small result directories for the baseline store: an env.json and a metrics-ws1.json of one profile
and workload, at a commit and a step time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchgate.kit.files import write_json

PROFILE = "cpu-Test-CPU-x2_torch2.13.0"


def metrics(world_size: int = 1, step_s: float = 0.1, n: int = 20, workload: str = "w") -> dict[str, Any]:
    times = [step_s * (1 + 0.01 * (i % 5)) for i in range(n)]
    return {
        "schema_version": 1,
        "machine_profile": PROFILE,
        "workload": workload,
        "world_size": world_size,
        "precision": "fp32",
        "tokens_per_step_global": 100 * world_size,
        "memory": {"peak_bytes": 100 * 2**20},
        "samples": {
            "step_time_s": times,
            "tokens_per_s": [100 * world_size / t for t in times],
            "loss": [3.0 - 0.01 * i for i in range(n)],
        },
    }


def write_run(directory: Path, step_s: float = 0.1, profile: str = PROFILE, commit: str = "abc") -> Path:
    write_json(
        directory / "env.json", {"machine_profile": profile, "git": {"commit": commit, "branch": "main"}}
    )
    write_json(directory / "metrics-ws1.json", metrics(step_s=step_s) | {"machine_profile": profile})
    return directory
