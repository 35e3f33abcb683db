"""The samples in operator/samples/ and the README's Kubernetes section, held to the CRDs and models.

A sample must pass what an API server checks (the generated CRD schema) and what the controller checks
before it submits anything (the pydantic models, the pipeline's argument validation, the schedule's cron
and time zone). Bad variants of them must be refused, naming the field. The README must describe every
status field the CRDs declare, so a new field without documentation fails here.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import REPO, load_yaml, schema_errors

from benchgate.controller.decide.schedule import check_schedule, run_manifest
from benchgate.controller.spec.resources import (
    BenchmarkRunSpec,
    BenchmarkScheduleSpec,
    parse_spec,
    pipeline_arguments,
)
from benchgate.errors import ConfigError
from benchgate.kfp.run_request import pipeline_parameter_names

SAMPLES = REPO / "operator" / "samples"
CRDS = REPO / "charts" / "benchgate" / "files" / "crds"
MLFLOW = "http://mlflow.example"
PLURALS = {"BenchmarkRun": "benchmarkruns", "BenchmarkSchedule": "benchmarkschedules"}
SAMPLE_FILES = sorted(SAMPLES.glob("*.yaml"))


def sample(name: str) -> dict[str, Any]:
    (document,) = load_yaml(SAMPLES / name)
    return document


def run_sample() -> dict[str, Any]:
    return sample("benchmarkrun.yaml")


def schedule_sample() -> dict[str, Any]:
    return sample("benchmarkschedule.yaml")


def with_spec(manifest: dict[str, Any], **changes: Any) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    changed["spec"].update(changes)
    return changed


def test_there_are_samples_of_both_kinds() -> None:
    kinds = sorted(d["kind"] for path in SAMPLE_FILES for d in load_yaml(path))
    assert kinds == ["BenchmarkRun", "BenchmarkRun", "BenchmarkSchedule"]


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_every_sample_passes_the_crd_schema(path: Path) -> None:
    for document in load_yaml(path):
        assert document["apiVersion"] == "benchgate.dev/v1alpha1"
        assert schema_errors(PLURALS[document["kind"]], document) == []


def test_the_run_sample_is_what_the_controller_submits() -> None:
    manifest = run_sample()
    spec = parse_spec(BenchmarkRunSpec, manifest["spec"])
    arguments = pipeline_arguments(spec, MLFLOW, pipeline_parameter_names())
    assert arguments["commit"] == manifest["spec"]["commit"] and len(arguments["commit"]) == 40
    assert arguments["repository"].startswith("https://")
    assert arguments["branch"] == manifest["spec"]["branch"]
    assert arguments["world_size_n"] == manifest["spec"]["worldSize"] == 8
    assert arguments["steps"] == manifest["spec"]["steps"]
    assert arguments["gpu_node_selector"] == manifest["spec"]["nodeSelector"]
    assert (
        arguments["tolerances"]["throughput_drop_pct"]
        == manifest["spec"]["tolerances"]["throughput_drop_pct"]
    )
    assert arguments["mlflow_tracking_uri"] == MLFLOW
    assert spec.active_deadline_seconds and spec.ttl_seconds_after_finished is not None


def test_the_suite_sample_is_one_run_of_the_suite_pipeline() -> None:
    manifest = sample("benchmarkrun-suite.yaml")
    spec = parse_spec(BenchmarkRunSpec, manifest["spec"])
    arguments = pipeline_arguments(spec, MLFLOW, pipeline_parameter_names())
    assert arguments["suite_name"] == manifest["spec"]["suite"]["name"]
    assert arguments["world_size_n"] == 8 and arguments["config"]["trace"] == {"enabled": False}
    entries = [json.loads(text) for text in arguments["entries"]]
    assert [e["name"] for e in entries] == [e["name"] for e in manifest["spec"]["suite"]["entries"]]
    assert entries[1]["config"] == {"bench": {"precision": "bf16", "compile": True}}
    assert entries[2]["workload_args"] == {"size": "small", "batch_size": 16}
    assert "workload" not in arguments
    # With workload beside suite it is refused, naming both.
    both = {**manifest["spec"], "workload": "my_pkg:make"}
    with pytest.raises(ConfigError, match=r"spec\.suite: set together with workload"):
        parse_spec(BenchmarkRunSpec, both)


def test_the_schedule_sample_is_valid_and_its_runs_are_too() -> None:
    manifest = schedule_sample()
    spec = parse_spec(BenchmarkScheduleSpec, manifest["spec"])
    assert check_schedule(spec).key == manifest["spec"]["timeZone"]
    assert spec.concurrency_policy == "Forbid" and spec.run_template.spec.branch == "main"
    # The BenchmarkRun the schedule creates for a resolved branch head passes the same checks.
    schedule = {**manifest, "metadata": {**manifest["metadata"], "uid": "0000-uid"}}
    due = datetime(2025, 1, 1, 1, 0, tzinfo=UTC)
    created = run_manifest(schedule, spec, "a" * 40, due)
    assert schema_errors("benchmarkruns", created) == []
    run_spec = parse_spec(BenchmarkRunSpec, created["spec"])
    assert pipeline_arguments(run_spec, MLFLOW, pipeline_parameter_names())["branch"] == "main"


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        ({"commit": "main"}, "spec.commit", "'main'"),
        ({"commit": "9fceb02"}, "spec.commit", "'9fceb02'"),
        ({"worldSize": -8}, "spec.worldSize", "-8"),
        ({"stepz": 100}, "spec.stepz", "100"),
    ],
    ids=["ref", "short-sha", "negative-world-size", "unknown-field"],
)
def test_bad_runs_are_refused_naming_the_field(change: dict[str, Any], field: str, value: str) -> None:
    manifest = with_spec(run_sample(), **change)
    (key,) = change
    # The API server refuses it ...
    errors = schema_errors("benchmarkruns", manifest)
    assert errors and any(key in e for e in errors), errors
    # ... and so does the controller, where the API server lacks the schema.
    with pytest.raises(ConfigError) as refused:
        parse_spec(BenchmarkRunSpec, manifest["spec"])
    assert field in str(refused.value) and value in str(refused.value)


def test_a_bad_run_template_field_is_refused_naming_it() -> None:
    manifest = schedule_sample()
    manifest["spec"]["runTemplate"]["spec"]["worldSize"] = 0
    errors = schema_errors("benchmarkschedules", manifest)
    assert errors and any("runTemplate.spec.worldSize" in e for e in errors), errors
    with pytest.raises(ConfigError, match=r"spec\.runTemplate\.spec\.worldSize: got 0"):
        parse_spec(BenchmarkScheduleSpec, manifest["spec"])


def test_a_commit_in_a_run_template_is_refused() -> None:
    """A schedule resolves the branch head itself: a pinned commit in the template is a mistake."""
    manifest = schedule_sample()
    manifest["spec"]["runTemplate"]["spec"]["commit"] = "a" * 40
    assert schema_errors("benchmarkschedules", manifest)
    with pytest.raises(ConfigError, match=r"spec\.runTemplate\.spec\.commit"):
        parse_spec(BenchmarkScheduleSpec, manifest["spec"])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schedule": "0 0 2 * * *"}, "spec.schedule"),  # six fields: seconds first (Quartz style)
        ({"schedule": "at two every night"}, "spec.schedule"),
        ({"timeZone": "Europe/Atlantis"}, "spec.timeZone"),
    ],
    ids=["six-fields", "not-cron", "unknown-zone"],
)
def test_bad_cron_and_zones_pass_the_schema_but_not_the_controller(
    change: dict[str, Any], field: str
) -> None:
    """The schema checks only that they are strings; the controller's check names the field (and sets
    the schedule's Valid condition to False with an event)."""
    manifest = with_spec(schedule_sample(), **change)
    assert schema_errors("benchmarkschedules", manifest) == []
    spec = parse_spec(BenchmarkScheduleSpec, manifest["spec"])
    with pytest.raises(ConfigError) as refused:
        check_schedule(spec)
    assert str(refused.value).startswith(f"{field}: got {next(iter(change.values()))!r}")


CRD_FILES = ["benchmarkruns.benchgate.dev.yaml", "benchmarkschedules.benchgate.dev.yaml"]


def crd_schema(crd_file: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / crd_file).read_text(encoding="utf-8"))
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def schema_nodes(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every node under `node`: its properties, list items ([]) and map values ({}), recursively."""
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += schema_nodes(child, f"{path}.{name}")
    for key, mark in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(node.get(key), dict):
            found += schema_nodes(node[key], path + mark)
    return found


@pytest.mark.parametrize("crd_file", CRD_FILES)
def test_every_status_and_spec_field_has_a_description(crd_file: str) -> None:
    """`kubectl explain` (and an editor's schema hints) say what each field is, down to list items and
    map values."""
    schema = crd_schema(crd_file)
    nodes = [n for part in ("spec", "status") for n in schema_nodes(schema["properties"][part], part)]
    assert len(nodes) > 40  # the CRD was read, nested nodes included
    assert any(path.endswith(("[]", "{}")) for path, _ in nodes)
    assert [path for path, node in nodes if not node.get("description")] == []


@pytest.mark.parametrize("crd_file", CRD_FILES)
def test_conditions_are_a_list_map(crd_file: str) -> None:
    """Per the API conventions: one condition per type, which the API server enforces and server-side
    apply merges by."""
    conditions = crd_schema(crd_file)["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert {"type", "status"} <= set(item["required"])  # a map key must be required
    assert item["properties"]["observedGeneration"]["type"] == "integer"


def readme_section(title: str) -> str:
    """The Kubernetes documentation, docs/kubernetes.md (the README links to it), titled `title`."""
    text = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    assert text.startswith(f"# {title}"), "docs/kubernetes.md: unexpected title"
    return text


def code_words(markdown: str) -> set[str]:
    """Every identifier inside an inline code span or a code block (`status.verdict.result` gives
    status, verdict and result)."""
    spans = re.findall(r"```.*?```|`[^`\n]+`", markdown, flags=re.DOTALL)
    return {word for span in spans for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}


def status_fields(crd_file: str) -> set[str]:
    """The status fields a CRD declares, nested objects' fields included."""
    crd = yaml.safe_load((CRDS / crd_file).read_text(encoding="utf-8"))
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    fields: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        for name, child in node.get("properties", {}).items():
            fields.add(name)
            walk(child)

    walk(status)
    return fields


@pytest.mark.parametrize(
    "crd_file", ["benchmarkruns.benchgate.dev.yaml", "benchmarkschedules.benchgate.dev.yaml"]
)
def test_the_readme_describes_every_status_field(crd_file: str) -> None:
    fields = status_fields(crd_file)
    assert "phase" in fields or "lastScheduleTime" in fields  # the CRD was read, not an empty schema
    assert fields - code_words(readme_section("On Kubernetes")) == set()


def test_the_readme_names_the_samples_and_every_phase() -> None:
    section = readme_section("On Kubernetes")
    for path in SAMPLE_FILES:
        assert f"operator/samples/{path.name}" in section
    crd = yaml.safe_load((CRDS / "benchmarkruns.benchgate.dev.yaml").read_text(encoding="utf-8"))
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert set(status["properties"]["phase"]["enum"]) - code_words(section) == set()


@pytest.mark.parametrize(
    "crd_file", ["benchmarkruns.benchgate.dev.yaml", "benchmarkschedules.benchgate.dev.yaml"]
)
def test_the_readme_shows_the_printer_columns(crd_file: str) -> None:
    """The example `kubectl get` output has kubectl's header for the CRD's additionalPrinterColumns."""
    crd = yaml.safe_load((CRDS / crd_file).read_text(encoding="utf-8"))
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    header = " ".join(["NAME", *(c["name"].upper() for c in columns)])
    shown = [" ".join(line.split()) for line in readme_section("On Kubernetes").splitlines()]
    assert header in shown
