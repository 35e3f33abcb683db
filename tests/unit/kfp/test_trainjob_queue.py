"""A BenchmarkRun's `spec.queueName` (a Kueue LocalQueue) from the CRD to the KFP run's `queue_name`,
which the multi-node launcher puts on its TrainJob (tests/pipeline/test_trainjob.py follows it there);
a BenchmarkSchedule's run template carries it to each run. A name Kueue could not use is refused, by
the shipped CRD and by the controller's models alike, naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from benchgate.controller.spec.resources import (
    BenchmarkRunSpec,
    BenchmarkScheduleSpec,
    parse_spec,
    pipeline_arguments,
)
from benchgate.errors import ConfigError
from benchgate.kfp.run_request import pipeline_parameter_names

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "charts" / "benchgate" / "files" / "crds" / "benchmarkruns.benchgate.dev.yaml"
RUN = {
    "commit": "a" * 40,
    "repository": "https://github.com/example/trainer.git",
    "worldSize": 16,
    "multiNode": {"gpusPerNode": 8},
}


def crd_errors(spec: dict[str, Any]) -> list[str]:
    (document,) = yaml.safe_load_all(CRD.read_text(encoding="utf-8"))
    schema = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return [e.message for e in jsonschema.Draft4Validator(schema).iter_errors(spec)]


def test_a_runs_queue_name_reaches_the_pipelines_queue_name() -> None:
    spec = {**RUN, "queueName": "team-a-gpus"}
    assert crd_errors(spec) == []
    arguments = pipeline_arguments(parse_spec(BenchmarkRunSpec, spec), "", pipeline_parameter_names())
    assert arguments["queue_name"] == "team-a-gpus"
    assert arguments["multi_node"] is True


def test_without_a_queue_name_the_run_is_not_queued() -> None:
    arguments = pipeline_arguments(parse_spec(BenchmarkRunSpec, RUN), "", pipeline_parameter_names())
    assert arguments["queue_name"] == ""


@pytest.mark.parametrize("bad", ["Team-A", "gpus/", "-gpus", "q" * 64, "gpu queue"])
def test_a_queue_name_kueue_could_not_use_is_refused_naming_the_field(bad: str) -> None:
    assert crd_errors({**RUN, "queueName": bad}) != []
    with pytest.raises(ConfigError, match=r"spec\.queueName: got"):
        parse_spec(BenchmarkRunSpec, {**RUN, "queueName": bad})


def test_a_schedules_run_template_carries_the_queue_name() -> None:
    schedule = parse_spec(
        BenchmarkScheduleSpec,
        {
            "schedule": "0 2 * * *",
            "runTemplate": {"spec": {"repository": RUN["repository"], "queueName": "nightly"}},
        },
    )
    assert schedule.run_template.spec.queue_name == "nightly"


def test_the_documented_example_run_is_valid_and_queued() -> None:
    """docs/kubernetes.md, "Clusters that queue GPUs": its BenchmarkRun passes the CRD and the
    controller's models, and its queueName is the LocalQueue the example defines."""
    text = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    section = text.split("## Clusters that queue GPUs", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in section.split("```yaml\n")[1:]]
    documents = [d for block in blocks for d in yaml.safe_load_all(block.split("```", 1)[0]) if d]
    kinds = {d["kind"]: d for d in documents}
    run, local_queue = kinds["BenchmarkRun"], kinds["LocalQueue"]
    assert crd_errors(run["spec"]) == []
    arguments = pipeline_arguments(parse_spec(BenchmarkRunSpec, run["spec"]), "", pipeline_parameter_names())
    assert arguments["queue_name"] == local_queue["metadata"]["name"]
    assert local_queue["metadata"]["namespace"] == run["metadata"]["namespace"]
    assert local_queue["spec"]["clusterQueue"] == kinds["ClusterQueue"]["metadata"]["name"]
