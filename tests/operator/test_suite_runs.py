"""A BenchmarkRun with `spec.suite`: real kopf, kmock's API, the FAKE KFP server, and (for the verdict)
the real `mlflow server`. The suite becomes one KFP run of the benchgate-suite pipeline."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from operator_harness import Cluster, run_manifest, schema_errors

from benchgate.config import parse_config
from benchgate.controller.decide.schedule import run_manifest as schedule_run
from benchgate.controller.spec.resources import (
    BenchmarkRunSpec,
    BenchmarkScheduleSpec,
    parse_spec,
    pipeline_arguments,
)
from benchgate.errors import ConfigError
from benchgate.kfp.run_request import pipeline_parameter_names
from benchgate.tracking import client as tracking
from benchgate.tracking.suite_record import log_suite
from benchgate.tracking.suite_runs import mark_suite_run

pytestmark = pytest.mark.asyncio
MLFLOW = "http://mlflow.example:5000"
SUITE = {
    "name": "models",
    "entries": [
        {
            "name": "gpt-tiny-fp32",
            "workload": "benchgate.workloads.gpt:make_workload",
            "workloadArgs": {"size": "tiny"},
            "variant": {"precision": "fp32", "batchSize": 8},
            "config": {"eval": {"enabled": False}},
        },
        {
            "name": "gpt-tiny-bf16",
            "workload": "benchgate.workloads.gpt:make_workload",
            "variant": {"precision": "bf16"},
        },
    ],
}


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [c for c in status.get("conditions", []) if c["type"] == kind]
    return dict(found)


@pytest.mark.parametrize("cluster", [{"mlflow_uri": MLFLOW}], indirect=True)
async def test_a_suite_run_is_one_kfp_run_of_the_suite_pipeline_with_its_entries(cluster: Cluster) -> None:
    manifest = run_manifest("suite-1", suite=SUITE, steps=20)
    assert schema_errors("benchmarkruns", manifest) == []
    await cluster.create(manifest)
    status = await cluster.phase("suite-1", "Running")
    (body,) = cluster.kfp.created_runs
    spec = body["pipeline_spec"].get("pipeline_spec", body["pipeline_spec"])
    assert spec["pipelineInfo"]["name"] == "benchgate-suite"
    assert body["display_name"] == status["kfpRunName"]
    parameters = body["runtime_config"]["parameters"]
    assert parameters["suite_name"] == "models" and parameters["steps"] == 20
    assert parameters["mlflow_tracking_uri"] == MLFLOW
    assert "workload" not in parameters and "multi_node" not in parameters
    first, second = (json.loads(text) for text in parameters["entries"])
    assert first == {
        "name": "gpt-tiny-fp32",
        "workload": "benchgate.workloads.gpt:make_workload",
        "workload_args": {"size": "tiny", "batch_size": 8},
        "variant": {"precision": "fp32", "batch_size": 8},
        # The eval follows the variant's batch size, as a local suite's does.
        "config": {"eval": {"enabled": False, "batch_size": 8}, "bench": {"precision": "fp32"}},
    }
    assert second["config"] == {"bench": {"precision": "bf16"}}
    # A gate run beside it still runs the gate pipeline: one compiled package per pipeline.
    await cluster.create(run_manifest("gate-1"))
    await cluster.phase("gate-1", "Running")
    gate_body = cluster.kfp.created_runs[1]
    gate_spec = gate_body["pipeline_spec"].get("pipeline_spec", gate_body["pipeline_spec"])
    assert gate_spec["pipelineInfo"]["name"] == "benchgate"


def _entry(index: int, **fields: Any) -> dict[str, Any]:
    return {**SUITE, "entries": [*SUITE["entries"][:index], {**SUITE["entries"][index], **fields}]}


@pytest.mark.parametrize(
    ("spec", "message", "schema_refuses"),
    [
        (
            {"suite": SUITE, "workload": "my_pkg:make"},
            "spec.suite: set together with workload (a suite names each entry's workload",
            False,
        ),
        (
            {"suite": SUITE, "multiNode": {"gpusPerNode": 4}},
            "spec.suite: set together with multiNode",
            False,
        ),
        (
            {"suite": _entry(1, name="gpt-tiny-fp32")},
            "spec.suite.entries[1] 'gpt-tiny-fp32': name: got 'gpt-tiny-fp32', the name of "
            "spec.suite.entries[0] too",
            False,
        ),
        (
            {"suite": _entry(0, config={"tracking": {"experiment": "x"}})},
            "spec.suite.entries[0] 'gpt-tiny-fp32': config.tracking: set by the [suite] config file",
            False,
        ),
        ({"suite": _entry(1, variant={"flash": True})}, "spec.suite.entries.1.variant.flash", True),
        (
            {"suite": _entry(0, config={"eval": {"enabled": "maybe"}})},
            "entry 'gpt-tiny-fp32': eval.enabled: got 'maybe'",
            False,
        ),
        # Valid entries, but this controller has no MLflow, where a suite's verdicts meet.
        ({"suite": SUITE}, "spec.suite: mlflow_tracking_uri: got ''", False),
    ],
)
async def test_bad_suite_specs_are_refused_naming_the_field(
    cluster: Cluster, spec: dict[str, Any], message: str, schema_refuses: bool
) -> None:
    manifest = run_manifest("bad-suite", **spec)
    assert bool(schema_errors("benchmarkruns", manifest)) == schema_refuses
    await cluster.create(manifest)
    status = await cluster.phase("bad-suite", "Failed")
    assert message in condition(status, "Submitted")["message"]
    assert cluster.kfp.requests == []  # KFP never heard of it


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [{"mlflow": True, "mlflow_ui": "https://mlflow.example"}], indirect=True)
async def test_a_suite_runs_verdict_is_its_suite_parents_worst(
    cluster: Cluster, mlflow_server: str, tmp_path: Path
) -> None:
    await cluster.create(run_manifest("suite-2", suite=SUITE, mlflowExperiment="suites-on-k8s"))
    await cluster.phase("suite-2", "Running")
    kfp_run_id = cluster.status("suite-2")["kfpRunId"]
    # What the suite gate of that KFP run logs: a FAIL entry and a PASS one (kfp/suite/task.py).
    tracker = tracking.connect(
        parse_config(
            {"tracking": {"uri": mlflow_server, "experiment": "suites-on-k8s", "local_dir": str(tmp_path)}}
        )
    )
    entries = [
        {"name": "gpt-tiny-fp32", "workload": "w:f", "args": {}, "variant": {}, "out": "gpt-tiny-fp32",
         "state": "done", "verdict": "FAIL", "exit_code": 1, "error": None, "seconds": 30.0},
        {"name": "gpt-tiny-bf16", "workload": "w:f", "args": {}, "variant": {}, "out": "gpt-tiny-bf16",
         "state": "done", "verdict": "PASS", "exit_code": 0, "error": None, "seconds": 31.0},
    ]  # fmt: skip
    record = {"suite": "models", "suite_file": "KFP run x", "started": "", "entries": entries, "exit_code": 1}
    suite_run = log_suite(tracker, tmp_path, record, 61.0)
    mark_suite_run(tracker, suite_run, kfp_run_id, "x", "FAIL")
    cluster.kfp.force(kfp_run_id, "FAILED", "GATE_FAILED")
    status = await cluster.phase("suite-2", "Failed")
    assert condition(status, "Finished")["reason"] == "Regression"
    assert status["verdict"]["result"] == "FAIL" and status["mlflowRunId"] == suite_run
    assert condition(status, "VerdictRead")["reason"] == "FromMLflow"


async def test_a_schedules_history_check_is_refused_for_a_suite() -> None:
    template = {"spec": {"repository": "https://github.com/example/trainer.git", "suite": SUITE}}
    spec = {"schedule": "0 2 * * *", "runTemplate": template, "historyCheck": {"recent": 5}}
    with pytest.raises(ConfigError, match=r"spec\.historyCheck: set with runTemplate\.spec\.suite"):
        parse_spec(BenchmarkScheduleSpec, spec)
    # Without the check a schedule of a suite is fine, and so are the runs it creates: its template
    # reaches them with every default filled in (workload among them), which is no clash with the suite.
    parsed = parse_spec(BenchmarkScheduleSpec, {k: v for k, v in spec.items() if k != "historyCheck"})
    schedule = {"metadata": {"name": "nightly", "namespace": "team-a", "uid": "0000-uid"}, "spec": spec}
    created = schedule_run(schedule, parsed, "a" * 40, datetime(2025, 1, 1, 2, 0, tzinfo=UTC))
    assert schema_errors("benchmarkruns", created) == []
    run_spec = parse_spec(BenchmarkRunSpec, created["spec"])
    arguments = pipeline_arguments(run_spec, MLFLOW, pipeline_parameter_names())
    assert arguments["suite_name"] == "models" and len(arguments["entries"]) == 2
