"""Gate runs logged_gate_run to a real MLflow server and read back through the MLflow client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from benchgate.config import RunConfig
from benchgate.kfp.local_run import GateOutcome
from benchgate.kit.files import read_json
from benchgate.results.bundle import load_bundle
from benchgate.results.figures import run_figures
from benchgate.store.baseline import read_meta
from benchgate.tracking.client import TAG_PARENT, TAG_RUN_KEY
from benchgate.tracking.refresh import refresh_baseline

pytestmark = pytest.mark.slow


def test_parent_run_carries_the_runs_identity_config_and_figures(logged_gate_run: dict[str, Any]) -> None:
    outcome: GateOutcome = logged_gate_run["outcome"]
    parent = logged_gate_run["parent"]
    env = read_json(outcome.out_dir / "env.json")
    run = read_json(outcome.out_dir / "run.json")
    tags = parent.data.tags
    assert parent.info.status == "FINISHED"
    assert tags["benchgate.machine_profile"] == env["machine_profile"]
    assert tags["benchgate.workload"] == "gpt-tiny"
    assert tags["mlflow.source.git.commit"] == env["git"]["commit"]
    assert tags["benchgate.kfp_run_id"] == run["kfp_run_id"] != ""
    assert tags[TAG_RUN_KEY] == run["run_key"]
    assert tags["benchgate.version"]
    assert tags["benchgate.verdict"] == outcome.comparison.verdict
    assert tags["benchgate.baseline"] == "true"
    assert parent.data.params["bench.steps"] == "6"
    assert parent.data.params["gate.tolerances.throughput_drop_pct"] == "10.0"
    expected = run_figures(load_bundle(outcome.out_dir), outcome.comparison)
    assert {
        "ws1/tokens_per_s_p50",
        "ws2/tokens_per_s_p50",
        "scaling_efficiency_pct",
        "eval/perplexity",
    } <= set(expected)
    for name, value in expected.items():
        assert parent.data.metrics[name] == pytest.approx(value, rel=1e-9), name


def test_per_step_series_and_system_metrics_read_back(logged_gate_run: dict[str, Any]) -> None:
    client: MlflowClient = logged_gate_run["client"]
    outcome: GateOutcome = logged_gate_run["outcome"]
    samples = read_json(outcome.out_dir / "metrics-ws2.json")["samples"]
    series = client.get_metric_history(logged_gate_run["parent"].info.run_id, "ws2/step_time_ms")
    assert [m.step for m in sorted(series, key=lambda m: m.step)] == list(range(6))
    assert [m.value for m in sorted(series, key=lambda m: m.step)] == pytest.approx(
        [s * 1e3 for s in samples["step_time_s"]]
    )
    child = _children(logged_gate_run)["bench ws=2"]
    assert len(client.get_metric_history(child.info.run_id, "tokens_per_s")) == 6
    cpu = client.get_metric_history(child.info.run_id, "system/cpu_utilization_percentage")
    assert cpu and all(0 <= m.value <= 100 * 64 for m in cpu)


def _children(logged_gate_run: dict[str, Any]) -> dict[str, Any]:
    runs = logged_gate_run["client"].search_runs(
        [logged_gate_run["experiment_id"]],
        filter_string=f"tags.`{TAG_PARENT}` = '{logged_gate_run['parent'].info.run_id}'",
    )
    return {r.info.run_name: r for r in runs}


def test_children_per_world_size_and_eval_and_the_artifacts(
    logged_gate_run: dict[str, Any], tmp_path: Path
) -> None:
    client: MlflowClient = logged_gate_run["client"]
    parent_id = logged_gate_run["parent"].info.run_id
    children = _children(logged_gate_run)
    assert set(children) == {"bench ws=1", "bench ws=2", "eval"}
    assert (
        children["eval"].data.metrics["perplexity"]
        == logged_gate_run["parent"].data.metrics["eval/perplexity"]
    )
    assert children["bench ws=1"].data.params["world_size"] == "1"
    names = {a.path for a in client.list_artifacts(parent_id)}
    assert {
        "env.json",
        "config.json",
        "metrics-ws1.json",
        "metrics-ws2.json",
        "eval.json",
        "compare.json",
        "compare.md",
        "report.html",
        "trace",
    } <= names
    assert any(a.path.endswith(".pt.trace.json.gz") for a in client.list_artifacts(parent_id, "trace"))
    local = client.download_artifacts(parent_id, "compare.json", str(tmp_path))
    outcome: GateOutcome = logged_gate_run["outcome"]
    assert json.loads(Path(local).read_text()) == read_json(outcome.out_dir / "compare.json")
    report = Path(client.download_artifacts(parent_id, "report.html", str(tmp_path))).read_text()
    assert report.count("data:image/png;base64,") == 3


def test_second_run_compares_against_the_baseline_fetched_from_mlflow(
    logged_gate_run: dict[str, Any], second_logged_run: dict[str, Any]
) -> None:
    tmp: Path = logged_gate_run["tmp"]
    first: RunConfig = logged_gate_run["config"]
    # A fresh machine (conftest.second_logged_run): an empty directory store, so the baseline can only
    # come from MLflow.
    outcome = second_logged_run["outcome"]
    parent_id = logged_gate_run["parent"].info.run_id
    assert outcome.tracking["baseline_run_id"] == parent_id
    meta = read_meta(tmp / "fresh-baselines", outcome.comparison.machine_profile, "gpt-tiny")
    assert meta is not None and meta["mlflow_run_id"] == parent_id
    statuses = {c.name: c.status for c in outcome.comparison.checks}
    assert statuses["tokens/s (ws=1)"] != "NEW" and statuses["perplexity (held-out)"] != "NEW"
    # The second run is in MLflow too, with the first in its report's history.
    assert outcome.published["mlflow_run_id"] not in (None, parent_id)
    assert [p["run_id"] for p in outcome.tracking["history"]] == [parent_id]
    # The first run's own store holds that baseline already (it wrote it): nothing is downloaded.
    assert refresh_baseline(first, outcome.out_dir)["baseline_run_id"] == parent_id
    own = read_meta(tmp / "baselines", outcome.comparison.machine_profile, "gpt-tiny")
    assert own is not None and "mlflow_run_id" not in own
