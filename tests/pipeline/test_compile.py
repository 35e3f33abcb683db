"""The committed pipeline and component YAML: recompiled and compared, and the GPU task's platform spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchgate import __version__
from benchgate.kfp.compile import COMPONENTS_DIR, PIPELINE_FILE, compile_all

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")


def _load(path: Path) -> list[Any]:
    return list(yaml.safe_load_all(path.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compiled")
    compile_all(root)
    return root


@pytest.fixture(scope="module")
def pipeline() -> tuple[dict[str, Any], dict[str, Any]]:
    spec, platform = _load(REPO / PIPELINE_FILE)
    return spec, platform


def test_compiled_yaml_matches_the_committed_files(compiled: Path) -> None:
    # Parsed, not byte-compared: KFP writes some dict defaults in hash order inside comments.
    fresh = sorted(p.relative_to(compiled) for p in compiled.rglob("*.yaml"))
    committed = sorted(
        p.relative_to(REPO) for p in [REPO / PIPELINE_FILE, *(REPO / COMPONENTS_DIR).glob("*.yaml")]
    )
    assert fresh == committed, "run `make compile` and commit the result"
    for relative in fresh:
        assert _load(compiled / relative) == _load(REPO / relative), f"{relative}: run `make compile`"


def _task_by_display_name(spec: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the task, the DAG it sits in), searching the root DAG and the condition sub-DAGs."""
    dags = [spec["root"]["dag"], *(c["dag"] for c in spec["components"].values() if "dag" in c)]
    for dag in dags:
        for task in dag["tasks"].values():
            if task["taskInfo"]["name"] == name:
                return task, dag
    raise AssertionError(f"no task named {name!r}")


def _executor(spec: dict[str, Any], task: dict[str, Any]) -> str:
    return str(spec["components"][task["componentRef"]["name"]]["executorLabel"])


@pytest.mark.parametrize("display_name", ["bench ws=N", "A/B"])
def test_the_ws_n_tasks_carry_gpu_limit_selector_and_tolerations_from_parameters(
    pipeline: tuple[dict[str, Any], dict[str, Any]], display_name: str
) -> None:
    spec, platform = pipeline
    found = _tasks_by_display_name(spec, display_name)
    assert found
    for _, task in found:  # A/B: one in each branch of baseline_pvc
        executor = _executor(spec, task)
        accelerator = spec["deploymentSpec"]["executors"][executor]["container"]["resources"]["accelerator"]
        # The count and type are the pipeline parameters world_size_n and accelerator_type.
        assert PLACEHOLDER.findall(accelerator["resourceCount"]) == ["pipelinechannel--world_size_n"]
        assert PLACEHOLDER.findall(accelerator["resourceType"]) == ["pipelinechannel--accelerator_type"]
        k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]
        assert k8s["nodeSelector"]["nodeSelectorJson"]["componentInputParameter"].endswith(
            "gpu_node_selector"
        )
        assert k8s["tolerations"][0]["tolerationJson"]["componentInputParameter"].endswith("gpu_tolerations")
        secret = k8s["secretAsEnv"][0]
        assert secret["optional"] is True
        assert secret["secretNameParameter"]["componentInputParameter"].endswith("mlflow_secret")


def test_the_ws_1_tasks_ask_for_one_gpu(pipeline: tuple[dict[str, Any], dict[str, Any]]) -> None:
    spec, _ = pipeline
    for name in ("bench ws=1", "eval", "trace"):
        task, _ = _task_by_display_name(spec, name)
        resources = spec["deploymentSpec"]["executors"][_executor(spec, task)]["container"]["resources"]
        assert resources["accelerator"]["resourceCount"] == "1", name


def test_every_placeholder_a_dag_uses_is_one_of_its_inputs(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    # A condition's sub-DAG only receives the pipeline parameters its tasks declare as inputs; a
    # placeholder to anything else fails at run time (kfp.local and the KFP backend alike).
    spec, _ = pipeline
    dags = {"root": spec["root"], **{k: c for k, c in spec["components"].items() if "dag" in c}}
    for name, component in dags.items():
        inputs = set(component.get("inputDefinitions", {}).get("parameters", {}))
        used = set(PLACEHOLDER.findall(yaml.safe_dump(component["dag"])))
        assert used <= inputs, f"{name}: {sorted(used - inputs)} not passed into the DAG"


def test_no_task_is_cached_and_every_image_is_this_version(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    spec, _ = pipeline
    dags = [spec["root"]["dag"], *(c["dag"] for c in spec["components"].values() if "dag" in c)]
    for dag in dags:
        for task in dag["tasks"].values():
            if "componentRef" in task and "executorLabel" in spec["components"][task["componentRef"]["name"]]:
                assert task["cachingOptions"].get("enableCache", False) is False, task["taskInfo"]["name"]
    for executor in spec["deploymentSpec"]["executors"].values():
        assert executor["container"]["image"].endswith(f"/bench:{__version__}")
        # no pip install at pod start: the image carries benchgate and kfp
        assert "pip install" not in " ".join(executor["container"]["command"])


def _tasks_by_display_name(spec: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    """(the DAG's component name, the task) for every task of that display name, in every DAG."""
    dags = {"root": spec["root"], **{k: c for k, c in spec["components"].items() if "dag" in c}}
    return [
        (dag_name, task)
        for dag_name, component in dags.items()
        for task in component["dag"]["tasks"].values()
        if task["taskInfo"]["name"] == name
    ]


def _outer_condition(spec: dict[str, Any], dag_name: str) -> str:
    """The display name of the outermost condition around a DAG ("" for the root DAG)."""
    dags = {"root": spec["root"], **{k: c for k, c in spec["components"].items() if "dag" in c}}
    parents = {
        task["componentRef"]["name"]: (name, task)
        for name, component in dags.items()
        for task in component["dag"]["tasks"].values()
        if "componentRef" in task
    }
    outer = ""
    while dag_name in parents:
        dag_name, task = parents[dag_name]
        if task.get("triggerPolicy", {}).get("condition"):
            outer = task["taskInfo"]["name"]
    return outer


def test_the_baseline_volume_is_optional_and_off_by_default(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    spec, _ = pipeline
    parameter = spec["root"]["inputDefinitions"]["parameters"]["baseline_pvc"]
    assert parameter["defaultValue"] == "" and parameter["isOptional"] is True
    conditions = {
        task["taskInfo"]["name"]: task["triggerPolicy"]["condition"]
        for component in spec["components"].values()
        for task in component.get("dag", {}).get("tasks", {}).values()
        if "pipelinechannel--baseline_pvc" in task.get("triggerPolicy", {}).get("condition", "")
    }
    assert conditions == {
        "no volume: pod-local stores": "inputs.parameter_values['pipelinechannel--baseline_pvc'] == ''",
        "baseline volume": "!(inputs.parameter_values['pipelinechannel--baseline_pvc'] == '')",
    }


def test_only_the_volume_branch_mounts_the_pvc_on_compare_and_ab(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    # compare and A/B read the baseline cache and write the baseline and the MLflow spool: on the volume
    # when baseline_pvc names one, else in pod-local directories. Each branch has the whole tail.
    spec, platform = pipeline
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    mounted = {label for label, k8s in executors.items() if "pvcMount" in k8s}
    for name in ("compare", "A/B", "gate", "gate (A/B)"):
        found = _tasks_by_display_name(spec, name)
        by_branch = {_outer_condition(spec, dag): task for dag, task in found}
        assert len(found) == 2, name
        assert set(by_branch) == {"no volume: pod-local stores", "baseline volume"}, name
        for branch, task in by_branch.items():
            executor = _executor(spec, task)
            wants_mount = branch == "baseline volume" and name in ("compare", "A/B")
            assert (executor in mounted) is wants_mount, (name, branch)
            if wants_mount:
                (mount,) = executors[executor]["pvcMount"]
                assert mount["mountPath"] == "/mnt/benchgate"
                assert mount["pvcNameParameter"]["componentInputParameter"] == "pipelinechannel--baseline_pvc"
            if name in ("compare", "A/B"):
                # A real input in both branches: the task decides where its stores live from it.
                assert task["inputs"]["parameters"]["baseline_pvc"] == {
                    "componentInputParameter": "pipelinechannel--baseline_pvc"
                }, (name, branch)
    # No other task mounts anything.
    assert len(mounted) == 2


def test_the_env_task_gets_the_kfp_run_id_as_the_mlflow_run_key(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    spec, _ = pipeline
    task, _ = _task_by_display_name(spec, "env")
    parameters = task["inputs"]["parameters"]
    assert parameters["kfp_run_id"]["runtimeValue"]["constant"] == "{{$.pipeline_job_uuid}}"
    assert parameters["kfp_run_name"]["runtimeValue"]["constant"] == "{{$.pipeline_job_name}}"
