"""What the tests share besides fixtures: the paths, a fast RunConfig, a free port, the mlflow command.
Tests import it by name (`from harness import make_config`): tests/conftest.py puts this folder, with
the test workloads and the fakes beside it, first on sys.path and on PYTHONPATH (torchrun workers and
`benchgate` subprocesses import the workloads by name too)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig, parse_config

SUPPORT_DIR = Path(__file__).resolve().parent
TESTS_DIR = SUPPORT_DIR.parent
REPO = TESTS_DIR.parent


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
            "tolerances": {"throughput_drop_pct": 10.0},
            # Short A/B rounds: where these tests reach an A/B (the screen lacks history), they check
            # what it feeds, not its power (tests/gate/test_ab.py and benchmarks/power.py measure that).
            "ab": {"min_measured_s": 0.2},
        },
        # MLflow is opt-in per test (tests/tracking turn it on against a real server); when on, the
        # embedded store and the spool stay inside the test's directory.
        "tracking": {
            "enabled": False,
            "local_dir": str(tmp_path / "mlflow"),
            "spool_dir": str(tmp_path / "spool"),
        },
        "out": str(tmp_path / "out"),
    }
    for name, values in sections.items():
        if isinstance(data.get(name), dict):
            data[name] = {**data[name], **values}
        else:
            data[name] = values
    return parse_config(data)


# The mlflow command of this environment (tests/conftest.py's `mlflow_server` runs it).
MLFLOW = Path(sys.executable).with_name("mlflow")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Each session server's directory (its SQLite backend and artifacts), by URI: what tests search.
MLFLOW_SERVER_ROOTS: dict[str, Path] = {}


# Small A/B rounds so that a decision takes a few rounds of a few seconds each.
REPO_AB_CONFIG = "[gate.ab]\nsteps = 12\nmin_measured_s = 0.2\nwarmup = 2\nmin_rounds = 3\nmax_rounds = 5\n"


def tracked_config(tmp_path: Path, uri: str, experiment: str, **sections: dict[str, Any]) -> RunConfig:
    return make_config(
        tmp_path,
        **{
            "tracking": {
                "enabled": True,
                "uri": uri,
                "experiment": experiment,
                "local_dir": str(tmp_path / "mlflow"),
                "spool_dir": str(tmp_path / "spool"),
            },
            **sections,
        },
    )
