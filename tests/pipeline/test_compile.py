"""The committed pipeline, component and CRD YAML: recompiled in fresh processes and compared byte for byte,
and the GPU task's platform spec."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchgate import __version__
from benchgate.kfp.bisect_pipeline import BISECT_PIPELINE_FILE
from benchgate.kfp.compile import COMPONENTS_DIR, PIPELINE_FILE, sorted_header

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")


CRDS_DIR = Path("charts/benchgate/files/crds")


def _load(path: Path) -> list[Any]:
    return list(yaml.safe_load_all(path.read_text(encoding="utf-8")))


def _compile_in_a_fresh_process(root: Path, hash_seed: str) -> dict[Path, bytes]:
    """`benchgate compile` (what `make compile` runs) into `root`: {path under root: bytes}."""
    env = {k: v for k, v in os.environ.items() if k != "BENCHGATE_IMAGE_REPOSITORY"}
    env["PYTHONHASHSEED"] = hash_seed
    done = subprocess.run(
        [sys.executable, "-m", "benchgate", "compile", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*.yaml"))}


@pytest.fixture(scope="module")
def fresh_compiles(tmp_path_factory: pytest.TempPathFactory) -> list[dict[Path, bytes]]:
    # Two processes with different hash seeds (and, with them, different address-space layouts, which
    # is what moved the order of the header's defaults: protobuf's map iteration).
    return [_compile_in_a_fresh_process(tmp_path_factory.mktemp(f"seed{s}"), s) for s in ("0", "1")]


@pytest.fixture(scope="module")
def pipeline() -> tuple[dict[str, Any], dict[str, Any]]:
    spec, platform = _load(REPO / PIPELINE_FILE)
    return spec, platform


def test_compiling_twice_gives_the_same_bytes_whatever_the_hash_seed(
    fresh_compiles: list[dict[Path, bytes]],
) -> None:
    first, second = fresh_compiles
    assert sorted(first) == sorted(second)
    for relative, data in first.items():
        assert data == second[relative], f"{relative}: differs between two compiles"


def test_the_committed_files_are_byte_identical_to_a_fresh_compile(
    fresh_compiles: list[dict[Path, bytes]],
) -> None:
    committed = sorted(
        p.relative_to(REPO)
        for p in [
            REPO / PIPELINE_FILE,
            REPO / BISECT_PIPELINE_FILE,
            *(REPO / COMPONENTS_DIR).glob("*.yaml"),
            *(REPO / CRDS_DIR).glob("*.yaml"),
        ]
    )
    fresh = fresh_compiles[0]
    assert sorted(fresh) == committed, "run `make compile` and commit the result"
    for relative in committed:
        assert (REPO / relative).read_bytes() == fresh[relative], f"{relative}: run `make compile`"


def test_the_header_lists_dict_defaults_with_sorted_keys() -> None:
    # What KFP 2.17 writes: str() of each default, dict keys in protobuf map order.
    header = (
        "# PIPELINE DEFINITION\n"
        "# Description: one line that mentions x: list [Default: {'b': 1, 'a': 2}] in passing\n"
        "# Inputs:\n"
        "#    gpu_tolerations: list [Default: [{'operator': 'Exists', 'key': 'k', 'effect': 'NoSchedule'}]]\n"
        "#    selector: dict [Default: {'zone': 'b', 'pool': {'z': 1.0, 'a': [2.0, 1.0]}}]\n"
        "#    note: str [Default: 'it's']\n"
        "#    steps: int [Default: 60.0]\n"
        "components:\n"
        "  x: {b: 1, a: 2}  # [Default: {'b': 1, 'a': 2}]\n"
    )
    assert sorted_header(header) == (
        "# PIPELINE DEFINITION\n"
        "# Description: one line that mentions x: list [Default: {'b': 1, 'a': 2}] in passing\n"
        "# Inputs:\n"
        "#    gpu_tolerations: list [Default: [{'effect': 'NoSchedule', 'key': 'k', 'operator': 'Exists'}]]\n"
        "#    selector: dict [Default: {'pool': {'a': [2.0, 1.0], 'z': 1.0}, 'zone': 'b'}]\n"
        "#    note: str [Default: 'it's']\n"
        "#    steps: int [Default: 60.0]\n"
        "components:\n"
        "  x: {b: 1, a: 2}  # [Default: {'b': 1, 'a': 2}]\n"
    )
    assert sorted_header(sorted_header(header)) == sorted_header(header)


def test_the_committed_header_names_the_default_tolerations_in_sorted_order() -> None:
    header = (REPO / PIPELINE_FILE).read_text(encoding="utf-8").splitlines()[:30]
    assert (
        "#    gpu_tolerations: list [Default: [{'effect': 'NoSchedule', 'key': 'nvidia.com/gpu', "
        "'operator': 'Exists'}]]"
    ) in header


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


GPU_TASKS = ("env", "bench ws=1", "bench ws=N", "eval", "trace", "A/B")
LIGHT_TASKS = ("compare", "gate", "gate (A/B)")


def _root_parameter(spec: dict[str, Any], dag_name: str, task: dict[str, Any], name: str) -> str:
    """The pipeline parameter the task input `name` of `task` (in DAG `dag_name`) is wired to, followed
    up through the condition sub-DAGs; fails where the chain ends anywhere else (a constant, a missing
    DAG input: what KFP leaves where it did not thread a parameter into a sub-DAG)."""
    dags = {"root": spec["root"], **{k: c for k, c in spec["components"].items() if "dag" in c}}
    parents = {
        t["componentRef"]["name"]: (parent, t)
        for parent, component in dags.items()
        for t in component["dag"]["tasks"].values()
        if t["componentRef"]["name"] in dags
    }
    while True:
        source = task["inputs"]["parameters"][name]
        assert set(source) == {"componentInputParameter"}, (dag_name, name, source)
        name = source["componentInputParameter"]
        assert name in dags[dag_name].get("inputDefinitions", {}).get("parameters", {}), (dag_name, name)
        if dag_name == "root":
            return name
        dag_name, task = parents[dag_name]


def _shm_mounts(platform: dict[str, Any], executor: str) -> list[dict[str, Any]]:
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"].get(executor, {})
    return [m for m in k8s.get("emptyDirMounts", []) if m["mountPath"] == "/dev/shm"]


@pytest.mark.parametrize("display_name", GPU_TASKS)
def test_every_gpu_task_requests_cpu_and_memory_from_the_parameters_and_mounts_a_memory_shm(
    pipeline: tuple[dict[str, Any], dict[str, Any]], display_name: str
) -> None:
    """Not BestEffort: the pod requests CPU and memory, the pipeline parameters gpu_cpu_request and
    gpu_memory_request, wired into every DAG the task sits in (the A/B task's two condition levels too);
    and a memory-backed /dev/shm for NCCL and DataLoader workers, not the runtime's 64 MiB."""
    spec, platform = pipeline
    found = _tasks_by_display_name(spec, display_name)
    assert len(found) == (2 if display_name == "A/B" else 1)
    for dag_name, task in found:
        executor = _executor(spec, task)
        resources = spec["deploymentSpec"]["executors"][executor]["container"]["resources"]
        for field, parameter in (
            ("resourceCpuRequest", "gpu_cpu_request"),
            ("resourceMemoryRequest", "gpu_memory_request"),
        ):
            (channel,) = PLACEHOLDER.findall(resources[field])
            assert channel == f"pipelinechannel--{parameter}", (display_name, field)
            assert _root_parameter(spec, dag_name, task, channel) == parameter, (display_name, dag_name)
        assert "resourceMemoryLimit" not in resources  # an OOM kill mid-measurement is no result
        (shm,) = _shm_mounts(platform, executor)
        assert shm["medium"] == "Memory" and shm["sizeLimit"] == "16Gi", display_name


def test_the_request_parameters_default_to_a_floor_for_an_8_gpu_node(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    spec, _ = pipeline
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert parameters["world_size_n"]["defaultValue"] == 8
    assert parameters["gpu_cpu_request"]["defaultValue"] == "8"
    assert parameters["gpu_memory_request"]["defaultValue"] == "32Gi"


@pytest.mark.parametrize("display_name", LIGHT_TASKS)
def test_the_cpu_tasks_request_a_little_and_mount_no_shm(
    pipeline: tuple[dict[str, Any], dict[str, Any]], display_name: str
) -> None:
    spec, platform = pipeline
    found = _tasks_by_display_name(spec, display_name)
    assert len(found) == 2  # one in each branch of baseline_pvc
    for _, task in found:
        executor = _executor(spec, task)
        resources = spec["deploymentSpec"]["executors"][executor]["container"]["resources"]
        assert (resources["resourceCpuRequest"], resources["resourceMemoryRequest"]) == ("500m", "1Gi")
        assert "accelerator" not in resources and _shm_mounts(platform, executor) == []


def test_no_executor_of_either_pipeline_is_best_effort() -> None:
    """Every executor, whatever its task: a nonzero CPU and memory request (a placeholder resolves to a
    parameter, which `benchgate submit` and the controller check is above zero)."""
    for path in (REPO / PIPELINE_FILE, REPO / BISECT_PIPELINE_FILE):
        spec, _ = _load(path)
        for label, executor in spec["deploymentSpec"]["executors"].items():
            resources = executor["container"].get("resources", {})
            for field in ("resourceCpuRequest", "resourceMemoryRequest"):
                value = resources.get(field, "")
                assert PLACEHOLDER.fullmatch(value) or re.search("[1-9]", value), (path.name, label, field)


def test_the_bisect_task_requests_cpu_and_memory_and_mounts_a_memory_shm() -> None:
    spec, platform = _load(REPO / BISECT_PIPELINE_FILE)
    (task,) = spec["root"]["dag"]["tasks"].values()
    executor = _executor(spec, task)
    resources = spec["deploymentSpec"]["executors"][executor]["container"]["resources"]
    for field, parameter in (
        ("resourceCpuRequest", "gpu_cpu_request"),
        ("resourceMemoryRequest", "gpu_memory_request"),
    ):
        (channel,) = PLACEHOLDER.findall(resources[field])
        assert _root_parameter(spec, "root", task, channel) == parameter
    (shm,) = _shm_mounts(platform, executor)
    assert shm["medium"] == "Memory"
