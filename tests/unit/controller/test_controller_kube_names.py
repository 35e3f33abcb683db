"""Kubernetes' name, label and annotation rules as benchgate checks them (controller/spec/kube_names.py),
the names and labels of a schedule's runs, and a run template's labels and annotations."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from benchgate.controller.decide import schedule as sched
from benchgate.controller.spec import kube_names as kn
from benchgate.controller.spec.resources import BenchmarkScheduleSpec, parse_spec
from benchgate.errors import ConfigError

DUE = datetime(2026, 11, 22, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize("value", ["", "a", "team-a", "A_b.c-9", "x" * 63])
def test_valid_label_values(value: str) -> None:
    assert kn.label_value_problem(value) is None


@pytest.mark.parametrize("value", ["x" * 64, "-a", "a-", "a b", "a/b", "ä"])
def test_invalid_label_values_name_the_value(value: str) -> None:
    problem = kn.label_value_problem(value)
    assert problem is not None and repr(value) in problem and "63" in problem


@pytest.mark.parametrize("key", ["team", "benchgate.dev/schedule", "a.b-c/X_y.z", f"{'p' * 253}/{'n' * 63}"])
def test_valid_keys(key: str) -> None:
    assert kn.key_problem(key) is None


@pytest.mark.parametrize(
    "key", ["", "/name", "Bench.dev/x", "a_b.dev/x", "dev/", "n" * 64, f"{'p' * 254}/x", "a/b/c", "-x"]
)
def test_invalid_keys_name_the_key(key: str) -> None:
    problem = kn.key_problem(key)
    assert problem is not None and repr(key) in problem


@pytest.mark.parametrize("name", ["a", "nightly", "a.b-c", "x" * 253])
def test_valid_names(name: str) -> None:
    assert kn.name_problem(name) is None


@pytest.mark.parametrize("name", ["", "x" * 254, "Nightly", "a_b", "a.-b", "-a", "a."])
def test_invalid_names(name: str) -> None:
    assert kn.name_problem(name) is not None


def test_annotations_are_at_most_256_kib_in_all() -> None:
    assert kn.annotations_problem({"a": "x" * (256 * 1024 - 1)}) is None
    problem = kn.annotations_problem({"a": "x" * (256 * 1024)})
    assert problem is not None and "262145 bytes" in problem


def test_label_safe_keeps_a_valid_value_and_shortens_a_long_one_distinctly() -> None:
    assert kn.label_safe("nightly") == "nightly"
    long_a, long_b = "n" * 100 + "-a", "n" * 100 + "-b"
    assert kn.label_safe(long_a) != kn.label_safe(long_b)
    for text in (long_a, "x" * 252 + ".", "a" * 52 + "." + "b" * 60, "-" * 70):
        assert kn.label_value_problem(kn.label_safe(text)) is None


def owner(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": "0" * 8 + "-0000-0000-0000-" + "0" * 12}}


def template_spec(**metadata: Any) -> BenchmarkScheduleSpec:
    data = {
        "schedule": "0 2 * * *",
        "runTemplate": {"metadata": metadata, "spec": {"repository": "https://example.com/r.git"}},
    }
    return parse_spec(BenchmarkScheduleSpec, data)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "name", ["nightly", "n" * 64, "n" * 253, "a" * 190 + "." + "b" * 62, "a" * 197 + "-" + "b" * 55]
)
def test_every_valid_schedule_name_gives_a_valid_run_and_labels(name: str) -> None:
    """A schedule name is any object name (253 characters): its runs' names must be valid object
    names, their schedule label a valid label value, and the full name stays in an annotation."""
    manifest = sched.run_manifest(owner(name), template_spec(), "a" * 40, DUE)
    meta = manifest["metadata"]
    assert kn.name_problem(meta["name"]) is None, meta["name"]
    assert kn.labels_problem(meta["labels"]) is None
    assert kn.annotations_problem(meta["annotations"]) is None
    assert meta["annotations"][sched.SCHEDULE_NAME_ANNOTATION] == name
    label = meta["labels"][sched.SCHEDULE_LABEL]
    assert label == (name if len(name) <= 63 else kn.label_safe(name))
    assert sched.runs_selector(name) == f"{sched.SCHEDULE_LABEL}={label}"


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"labels": {"team": "in fra"}}, "labels['team']: value got 'in fra'"),
        ({"labels": {"team": "x" * 64}}, "labels.team: got 'xxx"),  # the schema's maxLength
        ({"labels": {"bad key": "x"}}, "labels: key got 'bad key'"),
        ({"annotations": {"Example.com/note": "x"}}, "annotations: key got 'Example.com/note'"),
        ({"annotations": {"note": "x" * (256 * 1024)}}, "annotations: 262148 bytes"),
    ],
)
def test_a_bad_template_label_or_annotation_names_the_field_and_value(
    metadata: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        template_spec(**metadata)
    text = str(caught.value)
    assert text.startswith("spec.runTemplate.metadata.") and message in text
    assert len(text) < 2000  # the value is cut, not repeated whole


def test_the_run_name_never_joins_with_a_dot_or_dash() -> None:
    for name in ("a" * 199 + "." + "b" * 53, "a" * 199 + "-" + "b" * 53):
        run = sched.run_name(name, DUE)
        assert kn.name_problem(run) is None and not re.search(r"[.-]{2}", run), run
