"""The chart README's security table (who can submit, promote, log, read Secrets), held to what the
chart renders, the controller's RBAC and code, and the compiled pipelines: each row's cells are
derived here from those, and the table must say the same (by the words each cell starts with)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from test_chart import CHART_DIR, render, triples

from benchgate.controller.access import KFP_ACCESS, required_access
from benchgate.kfp.bisect.pipeline import BISECT_PIPELINE_FILE
from benchgate.kfp.compile import PIPELINE_FILE
from benchgate.kfp.components import USER_CODE_COMPONENTS
from benchgate.kfp.suite.pipeline import SUITE_PIPELINE_FILE

REPO = Path(__file__).resolve().parents[2]
CONTROLLER = REPO / "src" / "benchgate" / "controller"
COLUMNS = ("submit KFP runs", "promote baselines", "log to MLflow", "read Secrets")
ROWS = {
    "people": "people who may edit a namespace",
    "controller": "the controller's ServiceAccount",
    "user code": "the tasks that run the code under test",
    "trusted": "benchgate's trusted tasks",
    "hook": "the uninstall hook's ServiceAccount",
}
# MLflow client calls that write: logging a run, its figures, tags or files, or its end.
MLFLOW_WRITES = {
    "create_run",
    "log_artifact",
    "log_artifacts",
    "log_batch",
    "log_dict",
    "log_metric",
    "log_metrics",
    "log_param",
    "log_params",
    "log_text",
    "set_tag",
    "set_tags",
    "set_terminated",
    "start_run",
}
GIT_MOUNT = "/var/run/secrets/benchgate/git"


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded


def table() -> dict[str, dict[str, str]]:
    """The README's security table: {row key: {column: cell}}."""
    text = (CHART_DIR / "README.md").read_text(encoding="utf-8")
    section = text.split("## Security", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["identity", *COLUMNS]
    rows = {}
    for line in lines[2:]:
        identity, *cells = (c.strip() for c in line.strip("|").split("|"))
        (key,) = [k for k, start in ROWS.items() if identity.startswith(start)]
        rows[key] = dict(zip(COLUMNS, cells, strict=True))
    assert set(rows) == set(ROWS)
    return rows


def executors() -> Iterator[tuple[str, dict[str, Any]]]:
    """(component base name, its Kubernetes settings) of every task pod of every compiled pipeline."""
    for path in (PIPELINE_FILE, SUITE_PIPELINE_FILE, BISECT_PIPELINE_FILE):
        spec, platform = yaml.safe_load_all((REPO / path).read_text(encoding="utf-8"))
        settings = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        for name, component in spec["components"].items():
            if "executorLabel" in component:
                base = re.sub(r"-\d+$", "", name.removeprefix("comp-"))
                yield base, settings.get(component["executorLabel"], {})


def said(cell: str) -> str:
    """What a cell says, by its first words: yes, no, through a run, or which Secrets."""
    for start in ("yes", "no", "through a BenchmarkRun", "git's only", "the MLflow and git Secrets"):
        if cell.startswith(start):
            return start
    raise AssertionError(f"a cell the table's test cannot read: {cell!r}")


def controller_calls() -> set[str]:
    """Every method name the controller's code calls."""
    names = set()
    for path in CONTROLLER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                names.add(node.func.attr)
    return names


def controller_imports() -> set[str]:
    modules = set()
    for path in CONTROLLER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module)
            elif isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
    return modules


def test_people_act_only_through_benchmarkruns(chart: helm_python.Chart) -> None:
    row = table()["people"]
    roles = [
        r for r in render(chart, {}) if r["kind"] == "ClusterRole" and r["metadata"]["name"].endswith("-edit")
    ]
    (edit,) = roles
    granted = triples(edit["rules"])
    assert ("benchgate.dev", "benchmarkruns", "create") in granted
    assert not any(
        resource == "secrets" or group == "pipelines.kubeflow.org" for group, resource, _ in granted
    )
    assert said(row["submit KFP runs"]) == said(row["promote baselines"]) == "through a BenchmarkRun"
    assert said(row["log to MLflow"]) == "no" and said(row["read Secrets"]) == "no"


def test_the_controller_submits_reads_verdicts_and_no_secret() -> None:
    row = table()["controller"]
    runs = {verb for a in KFP_ACCESS if a.resource == "runs" for verb in a.verbs}
    assert {"create", "terminate"} <= runs and said(row["submit KFP runs"]) == "yes"
    # No code of the controller writes to MLflow or publishes: it reads each run's verdict only.
    assert not controller_calls() & MLFLOW_WRITES
    assert not any(m.startswith(("benchgate.publish", "benchgate.store")) for m in controller_imports())
    assert said(row["promote baselines"]) == said(row["log to MLflow"]) == "no"
    for namespaced in (False, True):
        for peering in (False, True):
            access = required_access(namespaced=namespaced, peering=peering)
            assert not any(a.resource == "secrets" for a in access)
    assert said(row["read Secrets"]) == "no"


def test_the_code_under_test_holds_no_tracking_credential() -> None:
    row = table()["user code"]
    found = [(name, k8s) for name, k8s in executors() if name in USER_CODE_COMPONENTS]
    assert {name for name, _ in found} >= {"capture-env", "bench", "evaluate", "trace", "ab", "bisect"}
    for name, k8s in found:
        assert "secretAsEnv" not in k8s and "pvcMount" not in k8s, name
        assert [m["mountPath"] for m in k8s.get("secretAsVolume", [])] == [GIT_MOUNT], name
    assert [said(row[c]) for c in COLUMNS] == ["no", "no", "no", "git's only"]


def test_only_benchgates_own_tasks_log_and_promote() -> None:
    row = table()["trusted"]
    trusted = [(name, k8s) for name, k8s in executors() if name not in USER_CODE_COMPONENTS]
    assert {name for name, _ in trusted} >= {
        "baseline",
        "compare",
        "publish",
        "gate",
        "suite-gate",
        "log-bisection",
    }
    for name, k8s in trusted:
        keys = {e["envVar"] for s in k8s.get("secretAsEnv", []) for e in s["keyToEnv"]}
        assert keys == {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"}, name
        assert {m["mountPath"] for m in k8s.get("secretAsVolume", [])} <= {GIT_MOUNT}, name
    assert [said(row[c]) for c in COLUMNS] == ["no", "yes", "yes", "the MLflow and git Secrets"]


def test_the_uninstall_hook_patches_benchgates_kinds_only(chart: helm_python.Chart) -> None:
    row = table()["hook"]
    hook = render(chart, {}, uninstall="only")
    (role,) = [o for o in hook if o["kind"] in ("Role", "ClusterRole")]
    assert {(g, r) for g, r, _ in triples(role["rules"])} == {
        ("benchgate.dev", "benchmarkruns"),
        ("benchgate.dev", "benchmarkschedules"),
    }
    assert [said(row[c]) for c in COLUMNS] == ["no", "no", "no", "no"]
