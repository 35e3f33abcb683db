"""Shared fixtures. The shared helpers, the test workloads and the fakes are in tests/support/, which is
put first on sys.path and on PYTHONPATH here once for the whole session: torchrun workers and `benchgate`
subprocesses are separate processes that import the workloads by name."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from benchgate.config import RunConfig

SUPPORT_DIR = Path(__file__).resolve().parent / "support"
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(SUPPORT_DIR), os.environ.get("PYTHONPATH", "")) if p
)
# A developer's own tracking server must never receive test runs.
os.environ.pop("MLFLOW_TRACKING_URI", None)
if str(SUPPORT_DIR) not in sys.path:
    sys.path.insert(0, str(SUPPORT_DIR))

from harness import (  # noqa: E402 - importable once the folder is on sys.path
    MLFLOW,
    MLFLOW_SERVER_ROOTS,
    REPO_AB_CONFIG,
    free_port,
    make_config,
    tracked_config,
)


@pytest.fixture(autouse=True)
def _no_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts outside any checkout, and leaves none behind: a task body called in this process
    with a commit to fetch (tests/pipeline/test_trainjob_task.py, measure/source.use_source) puts the
    checkout on sys.path and PYTHONPATH, sets PYTHONSAFEPATH (children no longer import from their
    working directory) and confines later workload loads to it (BENCHGATE_WORKLOAD_ROOT), as it does in
    its own pod. Left behind, a later test's run in this worker could not import its own workload."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("PYTHONPATH", "BENCHGATE_WORKLOAD_ROOT", "PYTHONSAFEPATH"):
        # Set, so that its state now is recorded and restored after: monkeypatch records nothing for
        # deleting a variable that is not set, and a value set later would stay.
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.delenv("BENCHGATE_WORKLOAD_ROOT")
    monkeypatch.delenv("PYTHONSAFEPATH")


@pytest.fixture
def config_factory(tmp_path: Path) -> Any:
    return lambda **sections: make_config(tmp_path, **sections)


# A real `mlflow server` on 127.0.0.1 for the session, started only when a test asks for it. Lean
# settings (one worker, no job runner); it serves artifacts itself (--artifacts-destination), as a
# shared team server does, so uploads and downloads go over HTTP as in production.
@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed after the server stops
    process = subprocess.Popen(
        [
            str(MLFLOW),
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    uri = f"http://127.0.0.1:{port}"
    MLFLOW_SERVER_ROOTS[uri] = root
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                if requests.get(f"{uri}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start; log: {root / 'server.log'}")
            time.sleep(0.5)
        yield uri
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="session")
def logged_gate_run(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One whole gate run (ws=1 and 2, eval, trace) logged to the server as the profile's baseline: what
    tests/tracking reads back from MLflow (one run for all of them: each costs half a minute)."""
    from mlflow import MlflowClient  # here: importing mlflow costs seconds, and most tests never do

    from benchgate.kfp.local_run import run_gate

    tmp = tmp_path_factory.mktemp("logged")
    experiment = f"e2e-{os.urandom(4).hex()}"
    config = tracked_config(
        tmp,
        mlflow_server,
        experiment,
        bench={
            "workload": "benchgate.workloads.gpt:make_workload",
            "workload_args": {"size": "tiny"},
            "steps": 6,
            "warmup": 1,
            "world_sizes": [1, 2],
        },
        eval={"enabled": True, "train_steps": 20},
        trace={"enabled": True},
        gate={"baseline_dir": str(tmp / "baselines"), "update_baseline": "always"},
        out=str(tmp / "first"),
    )
    outcome = run_gate(config)
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    parent = client.get_run(outcome.published["mlflow_run_id"])
    return {
        "config": config,
        "outcome": outcome,
        "client": client,
        "parent": parent,
        "tmp": tmp,
        "experiment_id": experiment_id,
    }


@pytest.fixture(scope="session")
def second_logged_run(logged_gate_run: dict[str, Any]) -> dict[str, Any]:
    """A second gate run of logged_gate_run's setup on a fresh machine (an empty directory store: the
    baseline can only come from MLflow), compared with the first and logged, never the baseline."""
    from benchgate.kfp.local_run import run_gate

    tmp: Path = logged_gate_run["tmp"]
    first: RunConfig = logged_gate_run["config"]
    config = first.model_copy(
        update={
            "gate": first.gate.model_copy(
                update={"baseline_dir": tmp / "fresh-baselines", "update_baseline": "never"}
            ),
            "out": tmp / "second",
        }
    )
    outcome = run_gate(config)
    return {"config": config, "outcome": outcome, "run_id": outcome.published["mlflow_run_id"]}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh repository on main whose results, stores and config files are ignored, so that its tree
    stays clean across runs (a clean tree is what lets a run count as the baseline's own code)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "ci@example.com"],
        ["config", "user.name", "CI"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    (repo / ".gitignore").write_text("out*/\nbaselines/\n.benchgate/\n*.toml\n")
    (repo / "bench.toml").write_text(REPO_AB_CONFIG)
    return repo


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A `serial` test is also `slow`: `make test-fast` runs the tests not marked slow on four workers,
    where a serial test's timing would take its neighbours' load."""
    unmarked = [
        i.nodeid for i in items if i.get_closest_marker("serial") and not i.get_closest_marker("slow")
    ]
    if unmarked:
        raise pytest.UsageError(f"marked serial but not slow: {', '.join(unmarked)}")
