"""The GPU pods' CPU and memory requests from every entry point: a BenchmarkRun's `cpuRequest` and
`memoryRequest` (the committed CRD's schema and the controller's models), `benchgate submit --param`,
and the pipeline's own defaults. A request reaches the KFP run as the quantity string KFP's driver
parses when it makes the pod; one it could not parse, or a zero (a BestEffort pod), is refused first,
naming the field. The compiled pipeline's side is in tests/pipeline/test_compile.py."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hyp

from benchgate.controller.spec.resources import (
    BenchmarkRunSpec,
    BenchmarkScheduleSpec,
    parse_spec,
    pipeline_arguments,
)
from benchgate.errors import ConfigError
from benchgate.kfp.params import CPU_QUANTITY_PATTERN, MEMORY_QUANTITY_PATTERN, request_parameter
from benchgate.kfp.pipeline import cluster_pipeline
from benchgate.kfp.run_request import build_arguments, pipeline_parameter_names

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "charts" / "benchgate" / "files" / "crds" / "benchmarkruns.benchgate.dev.yaml"
SHA = "a" * 40
GOOD_RUN = {"commit": SHA, "repository": "https://github.com/example/trainer.git"}
FUZZ = settings(max_examples=200, deadline=None, derandomize=True)
# Each pattern's number, without its suffix: what the quantity is worth before the unit.
NUMBER = re.compile(r"[0-9.]+")


def crd_errors(spec: dict[str, Any]) -> list[str]:
    """What an API server with the shipped BenchmarkRun CRD says about `spec`."""
    (document,) = yaml.safe_load_all(CRD.read_text(encoding="utf-8"))
    schema = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return [
        f"{'.'.join(map(str, e.path))}: {e.message}"
        for e in jsonschema.Draft4Validator(schema).iter_errors(spec)
    ]


def arguments_for(spec: dict[str, Any]) -> dict[str, Any]:
    return pipeline_arguments(parse_spec(BenchmarkRunSpec, spec), "", pipeline_parameter_names())


def test_the_requests_of_a_benchmark_run_reach_the_kfp_run_parameters() -> None:
    spec = {**GOOD_RUN, "cpuRequest": "16", "memoryRequest": "64Gi"}
    assert crd_errors(spec) == []
    arguments = arguments_for(spec)
    assert (arguments["gpu_cpu_request"], arguments["gpu_memory_request"]) == ("16", "64Gi")


def test_a_run_without_requests_gets_the_pipelines_defaults() -> None:
    defaults = inspect.signature(cluster_pipeline().pipeline_func).parameters
    arguments = arguments_for(GOOD_RUN)
    assert arguments["gpu_cpu_request"] == defaults["gpu_cpu_request"].default == "8"
    assert arguments["gpu_memory_request"] == defaults["gpu_memory_request"].default == "32Gi"


def test_a_schedules_run_template_takes_the_requests() -> None:
    template = {"spec": {"repository": GOOD_RUN["repository"], "cpuRequest": "4", "memoryRequest": "16Gi"}}
    schedule = parse_spec(BenchmarkScheduleSpec, {"schedule": "0 2 * * *", "runTemplate": template})
    assert (schedule.run_template.spec.cpu_request, schedule.run_template.spec.memory_request) == (
        "4",
        "16Gi",
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpuRequest", "0"),
        ("cpuRequest", "0.0"),
        ("cpuRequest", "0m"),
        ("cpuRequest", "eight"),
        ("cpuRequest", "-1"),
        ("cpuRequest", "8Gi"),
        ("cpuRequest", 8),
        ("memoryRequest", "0Gi"),
        ("memoryRequest", "32GB"),
        ("memoryRequest", "1K"),
        ("memoryRequest", "32 Gi"),
        ("memoryRequest", ""),
    ],
)
def test_a_request_kfp_could_not_use_is_refused_by_the_crd_and_the_controller(field: str, value: Any) -> None:
    spec = {**GOOD_RUN, field: value}
    errors = crd_errors(spec)
    assert errors and all(e.startswith(f"{field}: ") for e in errors), errors
    with pytest.raises(ConfigError, match=re.escape(f"spec.{field}: got {value!r}")):
        parse_spec(BenchmarkRunSpec, spec)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpuRequest", "500m"),
        ("cpuRequest", "0.5"),
        ("cpuRequest", "96"),
        ("memoryRequest", "64G"),
        ("memoryRequest", "1.5Ti"),
        ("memoryRequest", "34359738368"),
    ],
)
def test_ordinary_quantities_are_accepted_by_both(field: str, value: str) -> None:
    spec = {**GOOD_RUN, field: value}
    assert crd_errors(spec) == []
    parameter = {"cpuRequest": "gpu_cpu_request", "memoryRequest": "gpu_memory_request"}[field]
    assert arguments_for(spec)[parameter] == value


def test_submit_params_become_quantity_strings() -> None:
    """`--param gpu_cpu_request=8` reads as the number 8; the pipeline's parameter is a string."""
    arguments = build_arguments(
        SHA,
        GOOD_RUN["repository"],
        "",
        {"gpu_cpu_request": 8, "gpu_memory_request": "48Gi"},
        pipeline_parameter_names(),
    )
    assert (arguments["gpu_cpu_request"], arguments["gpu_memory_request"]) == ("8", "48Gi")
    assert request_parameter("gpu_cpu_request", 0.5) == "0.5"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("gpu_cpu_request", 0),
        ("gpu_cpu_request", True),
        ("gpu_cpu_request", "1e3"),
        ("gpu_memory_request", "32GB"),
        ("gpu_memory_request", {"Gi": 32}),
    ],
)
def test_submit_refuses_a_request_naming_the_parameter(name: str, value: Any) -> None:
    with pytest.raises(
        ConfigError, match=re.escape(f"{name}: got {value!r} (expected a Kubernetes quantity")
    ):
        build_arguments(SHA, GOOD_RUN["repository"], "", {name: value}, pipeline_parameter_names())


@FUZZ
@given(cpu=hyp.from_regex(CPU_QUANTITY_PATTERN, fullmatch=True))
def test_every_cpu_quantity_the_pattern_accepts_is_above_zero(cpu: str) -> None:
    assert float(NUMBER.match(cpu)[0]) > 0, cpu  # type: ignore[index]


@FUZZ
@given(memory=hyp.from_regex(MEMORY_QUANTITY_PATTERN, fullmatch=True))
def test_every_memory_quantity_the_pattern_accepts_is_above_zero(memory: str) -> None:
    assert float(NUMBER.match(memory)[0]) > 0, memory  # type: ignore[index]


@FUZZ
@given(
    whole=hyp.integers(min_value=0, max_value=10**6),
    fraction=hyp.integers(min_value=0, max_value=999),
    unit=hyp.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi", "Ti"]),
)
def test_every_quantity_above_zero_is_accepted(whole: int, fraction: int, unit: str) -> None:
    number = f"{whole}.{fraction:03d}" if fraction else str(whole)
    if float(number) > 0:
        assert re.fullmatch(MEMORY_QUANTITY_PATTERN, number + unit), number + unit
        assert re.fullmatch(CPU_QUANTITY_PATTERN, number), number
        assert not fraction or re.fullmatch(CPU_QUANTITY_PATTERN, f"{whole * 1000 + fraction}m")
