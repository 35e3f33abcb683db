"""The committed pipeline, component and CRD YAML: recompiled in fresh processes and compared byte for byte,
and the GPU task's platform spec."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchgate import __version__
from benchgate.kfp.bisect.pipeline import BISECT_PIPELINE_FILE
from benchgate.kfp.compile import COMPONENTS_DIR, PIPELINE_FILE, sorted_header
from benchgate.kfp.suite.pipeline import SUITE_PIPELINE_FILE

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")


CRDS_DIR = Path("charts/benchgate/files/crds")


def _load(path: Path) -> list[Any]:
    return list(yaml.safe_load_all(path.read_text(encoding="utf-8")))


def _compile_in_a_fresh_process(root: Path, hash_seed: str) -> dict[Path, bytes]:
    """`benchgate compile` (what `make compile` runs) into `root`: {path under root: bytes}."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("BENCHGATE_IMAGE_REPOSITORY", "BENCHGATE_IMAGE_DIGEST")
    }
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
            REPO / SUITE_PIPELINE_FILE,
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
    found = _in_branch(spec, _tasks_by_display_name(spec, display_name), ONE_NODE)
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
        # The A/B runs user code: no MLflow credential (tests/pipeline/test_task_trust.py).
        assert "secretAsEnv" not in k8s


def test_the_ws_1_tasks_ask_for_one_gpu(pipeline: tuple[dict[str, Any], dict[str, Any]]) -> None:
    spec, _ = pipeline
    # One node, and across nodes; eval once more in each branch of baseline_pvc (its trusted baseline
    # task mounts the volume in one of them).
    for name, uses in (("bench ws=1", 2), ("eval", 4), ("trace", 2)):
        found = _tasks_by_display_name(spec, name)
        assert len(found) == uses, name
        for _, task in found:
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


def _conditions(spec: dict[str, Any], dag_name: str) -> list[str]:
    """The display names of the conditions around a DAG, outermost first ([] for the root DAG)."""
    dags = {"root": spec["root"], **{k: c for k, c in spec["components"].items() if "dag" in c}}
    parents = {
        task["componentRef"]["name"]: (name, task)
        for name, component in dags.items()
        for task in component["dag"]["tasks"].values()
        if "componentRef" in task
    }
    names: list[str] = []
    while dag_name in parents:
        dag_name, task = parents[dag_name]
        if task.get("triggerPolicy", {}).get("condition"):
            names.insert(0, task["taskInfo"]["name"])
    return names


ONE_NODE, ACROSS_NODES = "one node", "across nodes: TrainJob"
VOLUME_BRANCHES = {"no volume: pod-local stores", "baseline volume"}


def _in_branch(
    spec: dict[str, Any], found: list[tuple[str, dict[str, Any]]], branch: str
) -> list[tuple[str, dict[str, Any]]]:
    """The tasks of `found` inside the multi_node branch `branch` (ONE_NODE or ACROSS_NODES)."""
    return [(dag, task) for dag, task in found if _conditions(spec, dag)[:1] == [branch]]


def _volume_branch(spec: dict[str, Any], dag_name: str) -> str:
    """The baseline_pvc branch a DAG sits in ("" outside both)."""
    return next((name for name in _conditions(spec, dag_name) if name in VOLUME_BRANCHES), "")


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


def test_only_the_volume_branch_mounts_the_pvc_on_baseline_compare_and_publish(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    # compare and publish read the baseline cache and write the baseline and the MLflow spool, and
    # baseline reads the store for eval: on the volume when baseline_pvc names one, else in pod-local
    # directories. Each branch has the whole tail. eval and the A/B run user code: never a volume.
    spec, platform = pipeline
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    mounted = {label for label, k8s in executors.items() if "pvcMount" in k8s}
    names = ("baseline", "eval", "compare", "A/B", "publish", "gate", "gate (A/B)")
    holders = ("baseline", "compare", "publish")
    for name, nodes in itertools.product(names, (ONE_NODE, ACROSS_NODES)):
        found = _in_branch(spec, _tasks_by_display_name(spec, name), nodes)
        by_branch = {_volume_branch(spec, dag): task for dag, task in found}
        assert len(found) == 2, name
        assert set(by_branch) == VOLUME_BRANCHES, name
        for branch, task in by_branch.items():
            executor = _executor(spec, task)
            wants_mount = branch == "baseline volume" and name in holders
            assert (executor in mounted) is wants_mount, (name, branch)
            if wants_mount:
                (mount,) = executors[executor]["pvcMount"]
                assert mount["mountPath"] == "/mnt/benchgate"
                assert mount["pvcNameParameter"]["componentInputParameter"] == "pipelinechannel--baseline_pvc"
            if name in holders:
                # A real input in both branches: the task decides where its stores live from it.
                assert task["inputs"]["parameters"]["baseline_pvc"] == {
                    "componentInputParameter": "pipelinechannel--baseline_pvc"
                }, (name, branch)
    # No other task mounts anything.
    assert len(mounted) == 6


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
    # Each task in both multi_node branches (ws=N's only on one node), A/B in both volume branches too.
    assert len(found) == {"A/B": 4, "eval": 4, "bench ws=N": 1}.get(display_name, 2)
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
    assert len(found) == 4  # one in each branch of baseline_pvc, in each branch of multi_node
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
    task = spec["root"]["dag"]["tasks"]["bisect"]
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


def _accelerator_count(spec: dict[str, Any], task: dict[str, Any]) -> list[str] | str:
    """The task's GPU count: the pipeline parameter(s) it is wired to, or the constant."""
    resources = spec["deploymentSpec"]["executors"][_executor(spec, task)]["container"]["resources"]
    count = resources["accelerator"]["resourceCount"]
    return PLACEHOLDER.findall(count) or str(count)


def test_the_run_branches_on_multi_node_and_runs_on_one_node_by_default(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    spec, _ = pipeline
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert parameters["multi_node"]["defaultValue"] is False
    assert parameters["gpus_per_node"]["defaultValue"] == 8
    assert parameters["trainer_runtime"]["defaultValue"] == "torch-distributed"
    # The root holds the If/Else alone: every task of the run sits in one of its two branches.
    ((_, outer),) = spec["root"]["dag"]["tasks"].items()
    branches = {
        task["taskInfo"]["name"]: task["triggerPolicy"]["condition"]
        for task in spec["components"][outer["componentRef"]["name"]]["dag"]["tasks"].values()
    }
    assert branches == {
        ONE_NODE: "inputs.parameter_values['pipelinechannel--multi_node'] == false",
        ACROSS_NODES: "!(inputs.parameter_values['pipelinechannel--multi_node'] == false)",
    }
    # The single-node bench only in the first, the TrainJob's launcher only in the second.
    (single,) = _tasks_by_display_name(spec, "bench ws=N")
    (launcher,) = _tasks_by_display_name(spec, "bench ws=N (TrainJob)")
    assert _conditions(spec, single[0]) == [ONE_NODE]
    assert _conditions(spec, launcher[0]) == [ACROSS_NODES]


def test_the_local_pipeline_is_the_one_node_branch_alone_with_the_same_parameters(
    pipeline: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    """`benchgate run` compiles the pipeline without the branch it can never take: the same parameters,
    the same one-node tasks and their pod settings, no TrainJob launcher and no multi_node condition."""
    from benchgate.kfp.compile import compile_to
    from benchgate.kfp.pipeline import local_pipeline

    cluster, _ = pipeline
    local, _ = _load(compile_to(local_pipeline(), tmp_path / "local.yaml"))
    assert local["root"]["inputDefinitions"] == cluster["root"]["inputDefinitions"]
    assert not _tasks_by_display_name(local, "bench ws=N (TrainJob)")
    (single,) = _tasks_by_display_name(local, "bench ws=N")
    assert _conditions(local, single[0]) == []
    assert "pipelinechannel--multi_node'] == false" not in yaml.safe_dump(local)
    one_node = sorted(
        name
        for component in cluster["components"].values()
        if "dag" in component
        for name in (t["taskInfo"]["name"] for t in component["dag"]["tasks"].values())
    )
    in_local = sorted(
        name
        for component in [local["root"], *local["components"].values()]
        if "dag" in component
        for name in (t["taskInfo"]["name"] for t in component["dag"]["tasks"].values())
    )
    # Every task of the local pipeline is one of the cluster's, and it has half of the run's tasks.
    # (KFP numbers its condition-branches groups afresh in each; the named tasks must match.)
    named = {name for name in in_local if not name.startswith("condition-")}
    assert named <= set(one_node) and ONE_NODE not in in_local
    assert in_local.count("bench ws=1") == 1 and one_node.count("bench ws=1") == 2


def test_the_trainjob_launcher_is_a_light_cpu_pod_that_passes_the_nodes_settings_on(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    spec, platform = pipeline
    ((dag_name, task),) = _tasks_by_display_name(spec, "bench ws=N (TrainJob)")
    executor = _executor(spec, task)
    container = spec["deploymentSpec"]["executors"][executor]["container"]
    resources = container["resources"]
    assert "accelerator" not in resources  # the GPUs are the TrainJob's pods', not the launcher's
    assert (resources["resourceCpuRequest"], resources["resourceMemoryRequest"]) == ("500m", "1Gi")
    assert _shm_mounts(platform, executor) == []
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]
    assert "nodeSelector" not in k8s and "tolerations" not in k8s  # it runs anywhere
    # The TrainJob runs user code: no MLflow credential, only git's (for the nodes' checkout).
    assert "secretAsEnv" not in k8s
    assert [m["mountPath"] for m in k8s["secretAsVolume"]] == ["/var/run/secrets/benchgate/git"]
    assert "bench_multinode_task" in " ".join(container["command"] + container.get("args", []))
    inputs = task["inputs"]["parameters"]
    for name, parameter in {
        "world_size": "world_size_n",
        "gpus_per_node": "gpus_per_node",
        "trainer_runtime": "trainer_runtime",
        "accelerator_type": "accelerator_type",
        "gpu_node_selector": "gpu_node_selector",
        "gpu_tolerations": "gpu_tolerations",
        "gpu_cpu_request": "gpu_cpu_request",
        "gpu_memory_request": "gpu_memory_request",
        "queue_name": "queue_name",
        "git_secret": "git_secret",
    }.items():
        channel = inputs[name]["componentInputParameter"]
        assert _root_parameter(spec, dag_name, task, name) == parameter, (name, channel)
    # Its own pod's name and uid (the downward API): the TrainJob's owner, collected with an evicted pod.
    assert k8s["fieldPathAsEnv"] == [
        {"fieldPath": "metadata.name", "name": "BENCHGATE_POD_NAME"},
        {"fieldPath": "metadata.uid", "name": "BENCHGATE_POD_UID"},
    ]
    # The nodes run the image the pipeline was compiled with, as every task does.
    assert inputs["image"]["runtimeValue"]["constant"].endswith(f"/bench:{__version__}")
    # After the ws=1 bench, as the single-node ws=N bench: nothing else is timed on the GPU pool meanwhile.
    siblings = spec["components"][dag_name]["dag"]["tasks"]
    assert {siblings[t]["taskInfo"]["name"] for t in task["dependentTasks"]} == {"env", "bench ws=1"}


def test_across_nodes_every_gpu_pod_asks_for_at_most_one_nodes_gpus(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """The env task records the profile of the machine the ws=N bench runs on: on one node, the
    world_size_n GPUs; across nodes, one node of gpus_per_node. A/B stays on one node (ws=1) there."""
    spec, _ = pipeline
    counts = {
        (name, branch): _accelerator_count(spec, task)
        for name in ("env", "A/B")
        for branch in (ONE_NODE, ACROSS_NODES)
        for _, task in _in_branch(spec, _tasks_by_display_name(spec, name), branch)
    }
    assert counts == {
        ("env", ONE_NODE): ["pipelinechannel--world_size_n"],
        ("env", ACROSS_NODES): ["pipelinechannel--gpus_per_node"],
        ("A/B", ONE_NODE): ["pipelinechannel--world_size_n"],
        ("A/B", ACROSS_NODES): "1",
    }
    for name in ("env", "compare"):
        for branch, expected in ((ONE_NODE, False), (ACROSS_NODES, True)):
            for _, task in _in_branch(spec, _tasks_by_display_name(spec, name), branch):
                assert task["inputs"]["parameters"]["multi_node"]["runtimeValue"]["constant"] is expected


def test_every_task_mounts_the_git_secret_where_git_looks_and_starts_without_it(
    pipeline: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """A private repository's credentials (docs/kubernetes.md): any task may fetch the commit."""
    _, platform = pipeline
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name, executor in executors.items():
        assert executor["secretAsVolume"] == [
            {
                "mountPath": "/var/run/secrets/benchgate/git",
                "optional": True,
                "secretNameParameter": {"componentInputParameter": "pipelinechannel--git_secret"},
            }
        ], name
