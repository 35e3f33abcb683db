"""Who holds the tracking credential: in every compiled pipeline, every task that runs the code under
test (components.USER_CODE_COMPONENTS) has neither the MLflow secret nor the baseline volume, and that
list is checked against what each component's task function actually does."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchgate.kfp import components as c
from benchgate.kfp.bisect import pipeline as bisect_pipeline
from benchgate.kfp.bisect.pipeline import BISECT_PIPELINE_FILE
from benchgate.kfp.compile import PIPELINE_FILE
from benchgate.kfp.components import USER_CODE_COMPONENTS
from benchgate.kfp.suite import pipeline as suite_pipeline
from benchgate.kfp.suite.pipeline import SUITE_PIPELINE_FILE

REPO = Path(__file__).resolve().parents[2]
PIPELINES = (PIPELINE_FILE, SUITE_PIPELINE_FILE, BISECT_PIPELINE_FILE)
# The trusted tasks and what each holds: compare, publish and the gates read or write MLflow; baseline,
# compare and publish keep the baseline store (and spool) on the volume when one is given, so that eval
# gets the stored baseline's eval from the volume where MLflow is unreachable or not used.
HOLDS_SECRET = {"baseline", "compare", "publish", "gate", "suite-gate", "log-bisection"}
HOLDS_VOLUME = {"baseline", "compare", "publish"}
# What running the code under test looks like in a task function: fetching or checking out the
# repository, importing the workload, or launching the TrainJob whose pods run it.
RUNS_USER_CODE = re.compile(
    r"\b(fetch_code_under_test|use_source|checkout|stage_check_workload|load_workload|launch)\("
)


def _base_name(component: str) -> str:
    """comp-gate-2 -> gate: KFP numbers a component's second and later uses in one spec."""
    return re.sub(r"-\d+$", "", component.removeprefix("comp-"))


def _tasks(path: Path) -> dict[str, dict[str, Any]]:
    """{executor label: {"component": base name, "secret": bool, "volume": bool}} of a compiled pipeline."""
    spec, platform = yaml.safe_load_all((REPO / path).read_text(encoding="utf-8"))
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    found = {}
    for name, component in spec["components"].items():
        label = component.get("executorLabel")
        if label is None:  # a DAG (a condition's, a loop's, the nested pipeline): no pod of its own
            continue
        k8s = executors.get(label, {})
        found[label] = {
            "component": _base_name(name),
            "secret": bool(k8s.get("secretAsEnv")),
            "volume": bool(k8s.get("pvcMount")),
        }
    return found


@pytest.mark.parametrize("path", PIPELINES, ids=str)
def test_no_task_that_runs_user_code_holds_the_secret_or_the_volume(path: Path) -> None:
    tasks = _tasks(path)
    assert tasks
    for label, task in tasks.items():
        name = task["component"]
        if name in USER_CODE_COMPONENTS:
            assert not task["secret"], f"{path}: {label} runs user code and holds the MLflow secret"
            assert not task["volume"], f"{path}: {label} runs user code and mounts the baseline volume"
        else:
            assert name in HOLDS_SECRET, f"{path}: {label} ({name}) is in neither list: classify it"
            assert task["secret"] == (name in HOLDS_SECRET), f"{path}: {label}"
            # One branch of each pipeline mounts no volume (baseline_pvc empty): its compare has none.
            assert not task["volume"] or name in HOLDS_VOLUME, f"{path}: {label}"


def test_the_trusted_tasks_are_where_the_pipelines_put_them() -> None:
    holders = {
        str(path): sorted({t["component"] for t in _tasks(path).values() if t["secret"]})
        for path in PIPELINES
    }
    assert holders == {
        str(PIPELINE_FILE): ["baseline", "compare", "gate", "publish"],
        str(SUITE_PIPELINE_FILE): ["baseline", "compare", "gate", "publish", "suite-gate"],
        str(BISECT_PIPELINE_FILE): ["log-bisection"],
    }
    volumes = {
        str(path): sorted({t["component"] for t in _tasks(path).values() if t["volume"]})
        for path in PIPELINES
    }
    assert volumes == {
        str(PIPELINE_FILE): ["baseline", "compare", "publish"],
        str(SUITE_PIPELINE_FILE): ["baseline", "compare", "publish"],
        str(BISECT_PIPELINE_FILE): [],
    }


COMPONENTS = (*c.ALL, bisect_pipeline.bisect, bisect_pipeline.log_bisection, suite_pipeline.suite_gate)


def _task_function(component: Any) -> Any:
    """The task function a component's body imports and calls (components.py: two lines over one)."""
    body = inspect.getsource(component.python_func)
    module, name = re.search(r"from (benchgate\.[\w.]+) import (\w+)", body).groups()  # type: ignore[union-attr]
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda comp: comp.name)
def test_the_user_code_list_says_what_each_component_does(component: Any) -> None:
    source = inspect.getsource(_task_function(component))
    runs_user_code = bool(RUNS_USER_CODE.search(source))
    name = component.name.replace("_", "-")
    assert (name in USER_CODE_COMPONENTS) == runs_user_code, (
        f"{name}: its task function {'runs' if runs_user_code else 'does not run'} the code under test"
    )


def test_every_listed_component_exists() -> None:
    assert {comp.name.replace("_", "-") for comp in COMPONENTS} >= USER_CODE_COMPONENTS
