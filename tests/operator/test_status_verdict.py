"""The verdict in a BenchmarkRun's status comes from the gate run in MLflow: two real gate runs are
logged to a real `mlflow server`, the second tagged with the KFP run the controller submitted."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from operator_harness import Cluster, cluster, fake_kfp, kmock_options, run_manifest

from benchgate.kfp.local_run import run_gate
from benchgate.tracking.client import TAG_KFP_RUN_ID
from conftest import make_config

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
EXPERIMENT = f"operator-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def second_gate_run(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A baseline run and a second run compared with it, both logged to MLflow (real torchrun)."""
    tmp = tmp_path_factory.mktemp("verdict")
    sections: dict[str, Any] = {
        "bench": {"steps": 6, "warmup": 1, "world_sizes": [1]},
        "eval": {"enabled": False},
        "trace": {"enabled": False},
        "tracking": {
            "enabled": True,
            "uri": mlflow_server,
            "experiment": EXPERIMENT,
            "local_dir": str(tmp / "mlflow"),
            "spool_dir": str(tmp / "spool"),
        },
    }
    first = make_config(tmp, **sections, gate={"baseline_dir": str(tmp / "b"), "update_baseline": "always"})
    run_gate(first.model_copy(update={"out": tmp / "first"}))
    second = make_config(tmp, **sections, gate={"baseline_dir": str(tmp / "b"), "update_baseline": "never"})
    outcome = run_gate(second.model_copy(update={"out": tmp / "second"}))
    return {"run_id": outcome.published["mlflow_run_id"], "comparison": outcome.comparison}


@pytest.mark.parametrize("cluster", [{"mlflow": True, "mlflow_ui": "https://mlflow.example"}], indirect=True)
async def test_verdict_and_figures_reach_the_status(
    cluster: Cluster, second_gate_run: dict[str, Any], mlflow_server: str
) -> None:
    await cluster.create(run_manifest("pr-10", mlflowExperiment=EXPERIMENT))
    await cluster.phase("pr-10", "Running")
    kfp_run_id = cluster.status("pr-10")["kfpRunId"]
    # The pipeline tags its gate run with the KFP run id it ran under; here the real run gets it.
    MlflowClient(tracking_uri=mlflow_server).set_tag(second_gate_run["run_id"], TAG_KFP_RUN_ID, kfp_run_id)
    comparison = second_gate_run["comparison"]
    final = "SUCCEEDED" if comparison.verdict in ("PASS", "WARN") else "FAILED"
    cluster.kfp.force(kfp_run_id, final, "SUCCEEDED" if final == "SUCCEEDED" else "GATE_FAILED")
    status = await cluster.phase("pr-10", "Succeeded" if final == "SUCCEEDED" else "Failed")
    verdict = status["verdict"]
    assert verdict["result"] == comparison.verdict
    (timing,) = [c for c in comparison.checks if c.metric == "tokens_per_s"]
    assert verdict["tokensPerSecondChangePct"] == {"ws1": round(timing.change, 2)}
    assert verdict["throughputChange"] == f"{timing.change:+.1f}% (ws=1)"
    assert sum(verdict["checks"].values()) == len(comparison.checks)
    assert status["mlflowRunId"] == second_gate_run["run_id"]
    assert status["mlflowRunUrl"].startswith("https://mlflow.example/#/experiments/")
    assert status["mlflowRunUrl"].endswith(f"/runs/{second_gate_run['run_id']}?workflowType=machine_learning")
    assert next(c for c in status["conditions"] if c["type"] == "VerdictRead")["reason"] == "FromMLflow"
