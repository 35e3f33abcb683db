"""Shared fixtures. torchrun workers are separate processes: they find the test workloads through
PYTHONPATH, which is set here once for the whole session."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from benchgate.config import RunConfig, parse_config

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p)
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


def make_config(tmp_path: Path, **sections: dict[str, Any]) -> RunConfig:
    """A fast RunConfig writing under tmp_path; pass sections such as bench={"steps": 5}."""
    data: dict[str, Any] = {
        "bench": {"workload": "bg_test_workloads:sleepy", "steps": 12, "warmup": 2, "world_sizes": [1]},
        "eval": {"enabled": False},
        "trace": {"enabled": False},
        # Timing tolerance 10%: these tests check plumbing, and a sleep's overhead wanders by ~6% on
        # a busy CI host, which the default 5% would sometimes call a regression.
        "gate": {
            "baseline_dir": str(tmp_path / "baselines"),
            "update_baseline": "never",
            "tolerances": {"throughput_drop_pct": 10.0, "step_time_increase_pct": 10.0},
        },
        "out": str(tmp_path / "out"),
    }
    for name, values in sections.items():
        if isinstance(data.get(name), dict):
            data[name] = {**data[name], **values}
        else:
            data[name] = values
    return parse_config(data)


@pytest.fixture
def config_factory(tmp_path: Path) -> Any:
    return lambda **sections: make_config(tmp_path, **sections)
