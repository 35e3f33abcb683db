"""Every free string, map and list of the CRD specs is bounded: in the committed CRDs (the API server
refuses an oversized object) and in the models (the controller refuses it too, naming the field). And
the tolerances take camelCase names as the rest of the CRD, their TOML names deprecated."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchgate.controller.decide import schedule as sched
from benchgate.controller.spec import crds
from benchgate.controller.spec.resources import (
    BenchmarkRunSpec,
    BenchmarkScheduleSpec,
    parse_spec,
    pipeline_arguments,
)
from benchgate.errors import ConfigError
from benchgate.kfp.run_request import pipeline_parameter_names

REPO = Path(__file__).resolve().parents[3]
RUN = {"repository": "https://example.com/r.git", "commit": "a" * 40}


def spec_schema(name: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / crds.DEFAULT_DIR / name).read_text(encoding="utf-8"))
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def unbounded(node: Any, where: str = "spec") -> list[str]:
    """The paths of strings without maxLength (nor a pattern or enum that bounds them), lists without
    maxItems and maps without maxProperties, below `node`."""
    found = []
    if not isinstance(node, dict):
        return found
    kind = node.get("type")
    if kind == "string" and "maxLength" not in node and "enum" not in node:
        pattern = str(node.get("pattern", ""))
        # A pattern of fixed length ({40}, {64}) bounds the string itself.
        if not (pattern.startswith("^(") and "{64}" in pattern):
            found.append(where)
    if kind == "array" and "maxItems" not in node:
        found.append(where)
    if kind == "object" and "additionalProperties" in node and "maxProperties" not in node:
        found.append(where)
    for key, child in (node.get("properties") or {}).items():
        found += unbounded(child, f"{where}.{key}")
    for key in ("items", "additionalProperties"):
        found += unbounded(node.get(key), f"{where}[]")
    return found


@pytest.mark.parametrize(
    "name", ["benchmarkruns.benchgate.dev.yaml", "benchmarkschedules.benchgate.dev.yaml"]
)
def test_the_crds_bound_every_free_string_list_and_map(name: str) -> None:
    assert unbounded(spec_schema(name)) == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("repository", "https://example.com/" + "r" * 2040, "spec.repository: got"),
        ("workload", "m" * 1020 + ":make", "spec.workload: got"),
        ("baselinePvc", "p" * 254, "spec.baselinePvc: got"),
        ("mlflowExperiment", "e" * 1025, "spec.mlflowExperiment: got"),
        ("nodeSelector", {f"k{i}": "v" for i in range(65)}, "spec.nodeSelector: got"),
        ("nodeSelector", {"pool": "v" * 64}, "spec.nodeSelector.pool: got"),
        ("tolerations", [{"key": "k", "operator": "Exists"}] * 65, "spec.tolerations: got"),
        ("workloadArgs", {"text": "x" * 1025}, "spec.workloadArgs.text"),
        (
            "suite",
            {"name": "s", "entries": [{"name": "e", "workload": "m" * 1020 + ":make"}]},
            "workload: got",
        ),
        (
            "suite",
            {"name": "s", "entries": [{"name": f"e{i}", "workload": "m:f"} for i in range(1001)]},
            "entries",
        ),
        (
            "suite",
            {"name": "s", "entries": [{"name": "e", "workload": "m:f", "workloadArgs": {"t": "x" * 1025}}]},
            "t",
        ),
    ],
)
def test_an_oversized_value_is_refused_naming_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match="at most") as caught:
        parse_spec(BenchmarkRunSpec, RUN | {field: value})
    assert message in str(caught.value)


def test_an_oversized_schedule_field_is_refused_naming_it() -> None:
    template = {"spec": {"repository": "https://example.com/r.git"}, "metadata": {"labels": {"a": "b" * 64}}}
    with pytest.raises(ConfigError, match=r"spec\.runTemplate\.metadata\.labels"):
        parse_spec(BenchmarkScheduleSpec, {"schedule": "0 2 * * *", "runTemplate": template})
    with pytest.raises(ConfigError, match=r"spec\.timeZone: got .* at most 253"):
        parse_spec(
            BenchmarkScheduleSpec, {"schedule": "0 2 * * *", "timeZone": "Z" * 254, "runTemplate": template}
        )


# ---------------------------------------------------------------- tolerances under camelCase names


def tolerances_of(given: dict[str, Any]) -> Any:
    return parse_spec(BenchmarkRunSpec, RUN | {"tolerances": given}).tolerances


def test_tolerances_take_camel_case_names_as_the_rest_of_the_crd() -> None:
    tolerances = tolerances_of({"throughputDropPct": 3, "lossSlopeSlowerPct": 20})
    assert (tolerances.throughput_drop_pct, tolerances.loss_slope_slower_pct) == (3.0, 20.0)
    arguments = pipeline_arguments(
        parse_spec(BenchmarkRunSpec, RUN | {"tolerances": {"throughputDropPct": 3}}),
        "",
        pipeline_parameter_names(),
    )
    assert arguments["tolerances"]["throughput_drop_pct"] == 3.0  # the pipeline keeps the TOML names


def test_snake_case_tolerances_still_work_and_two_names_for_one_are_refused() -> None:
    assert tolerances_of({"throughput_drop_pct": 4}).throughput_drop_pct == 4.0
    with pytest.raises(ConfigError, match="throughput_drop_pct and throughputDropPct both set"):
        tolerances_of({"throughput_drop_pct": 4, "throughputDropPct": 3})
    with pytest.raises(ConfigError, match=r"spec\.tolerances\.throughputDropPct: got 300"):
        tolerances_of({"throughputDropPct": 300})


@pytest.mark.parametrize(
    "name", ["benchmarkruns.benchgate.dev.yaml", "benchmarkschedules.benchgate.dev.yaml"]
)
def test_the_crd_lists_both_names_of_each_tolerance_without_defaults(name: str) -> None:
    schema = spec_schema(name)
    if "tolerances" not in schema["properties"]:
        schema = schema["properties"]["runTemplate"]["properties"]["spec"]
    properties = schema["properties"]["tolerances"]["properties"]
    assert "throughputDropPct" in properties and "throughput_drop_pct" in properties
    assert properties["throughput_drop_pct"]["description"].startswith("Deprecated: throughputDropPct")
    # A default under either name would be filled in by the API server beside the other one.
    assert [k for k, p in properties.items() if "default" in p] == []


def test_a_schedules_camel_case_tolerances_reach_its_runs() -> None:
    template = {"spec": {"repository": "https://example.com/r.git", "tolerances": {"throughputDropPct": 2}}}
    schedule = parse_spec(BenchmarkScheduleSpec, {"schedule": "0 2 * * *", "runTemplate": template})
    owner = {"metadata": {"name": "nightly", "namespace": "team-a", "uid": "u-1"}}
    manifest = sched.run_manifest(owner, schedule, "a" * 40, datetime(2026, 11, 22, tzinfo=UTC))
    assert manifest["spec"]["tolerances"]["throughputDropPct"] == 2.0
    assert parse_spec(BenchmarkRunSpec, manifest["spec"]).tolerances.throughput_drop_pct == 2.0
