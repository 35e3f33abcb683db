"""The verdict in a BenchmarkRun's status comes from the gate run in MLflow: two real gate runs are
logged to a real `mlflow server` (conftest.logged_gate_run, second_logged_run), the second tagged with
the KFP run the controller submitted."""

from __future__ import annotations

from typing import Any

import pytest
from mlflow import MlflowClient
from operator_harness import Cluster, run_manifest

from benchgate.tracking.client import TAG_KFP_RUN_ID

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest.mark.parametrize("cluster", [{"mlflow": True, "mlflow_ui": "https://mlflow.example"}], indirect=True)
async def test_verdict_and_figures_reach_the_status(
    cluster: Cluster, second_logged_run: dict[str, Any], mlflow_server: str
) -> None:
    # conftest.second_logged_run: a gate run at ws=1 and 2 compared with the session's baseline run.
    experiment = second_logged_run["config"].tracking.experiment
    await cluster.create(run_manifest("pr-10", mlflowExperiment=experiment))
    await cluster.phase("pr-10", "Running")
    kfp_run_id = cluster.status("pr-10")["kfpRunId"]
    # The pipeline tags its gate run with the KFP run id it ran under; here the real run gets it.
    MlflowClient(tracking_uri=mlflow_server).set_tag(second_logged_run["run_id"], TAG_KFP_RUN_ID, kfp_run_id)
    comparison = second_logged_run["outcome"].comparison
    final = "SUCCEEDED" if comparison.verdict in ("PASS", "WARN") else "FAILED"
    cluster.kfp.force(kfp_run_id, final, "SUCCEEDED" if final == "SUCCEEDED" else "GATE_FAILED")
    status = await cluster.phase("pr-10", "Succeeded" if final == "SUCCEEDED" else "Failed")
    verdict = status["verdict"]
    assert verdict["result"] == comparison.verdict
    timing = {c.world_size: c.change for c in comparison.checks if c.metric == "tokens_per_s"}
    assert verdict["tokensPerSecondChangePct"] == {
        f"ws{ws}": round(change, 2) for ws, change in timing.items()
    }
    worst = min(timing, key=lambda ws: timing[ws])
    assert verdict["throughputChange"] == f"{timing[worst]:+.1f}% (ws={worst})"
    assert sum(verdict["checks"].values()) == len(comparison.checks)
    assert status["mlflowRunId"] == second_logged_run["run_id"]
    assert status["mlflowRunUrl"].startswith("https://mlflow.example/#/experiments/")
    assert status["mlflowRunUrl"].endswith(
        f"/runs/{second_logged_run['run_id']}?workflowType=machine_learning"
    )
    assert next(c for c in status["conditions"] if c["type"] == "VerdictRead")["reason"] == "FromMLflow"
