"""The pipeline's multi-node bench task (`trainjob/task.bench_multinode_task`, the body of the `bench ws=N
(TrainJob)` component) against kmock's emulated Kubernetes API, with the Trainer played by the test as in
test_trainjob.py: from the env task's setup directory to the results directory compare reads.

What it must leave is what the single-node bench task leaves: `metrics-ws<N>.json` (rank 0's bytes) and
`logs/bench-ws<N>.log` in its results, and the bench's figures in the KFP UI, so that compare gathers the
ws=N result into the run's bundle without knowing which branch of the pipeline ran. And the env task
of that branch, whose pod holds one node's GPUs: it checks that share, not the whole world size.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_trainjob import (  # trainer: a fixture
    NAMESPACE,
    REAL_METRICS,
    RUN_KEY_VALUE,
    SOURCE,
    Cluster,
    rank0_log,
    trainer,
)

from benchgate.config import RunConfig
from benchgate.kfp.params import SHM_SIZE_LIMIT, parameters_from_config
from benchgate.kfp.tasks import env_task, link_trace_or_copy
from benchgate.kfp.trainjob.client import TrainJobs
from benchgate.kfp.trainjob.job import trainjob_name
from benchgate.kfp.trainjob.task import ab_on_one_node, bench_multinode_task
from benchgate.kfp.trusted import copy_untrusted
from benchgate.kit.files import read_json, write_json
from benchgate.measure.env import usable_cpu_cores
from benchgate.results.bundle import RUN_FILE, load_bundle
from benchgate.results.figures import bench_figures

pytestmark = pytest.mark.asyncio
__all__ = ["trainer"]

STACK_RUN = REAL_METRICS.parent  # a real run's env.json and metrics files
IMAGE = "ghcr.io/benchgate/bench:0.1.0"
SELECTOR = {"cloud.google.com/gke-nodepool": "a100"}
TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


class Figures:
    """What the task logs into KFP's Output[Metrics]."""

    def __init__(self) -> None:
        self.logged: dict[str, float] = {}

    def log_metric(self, metric: str, value: float) -> None:
        self.logged[metric] = value


def env_task_setup(directory: Path) -> Path:
    """A setup directory as the env task writes it: config.json, env.json (with the code under test)
    and run.json (the pipeline run's id, which names the TrainJob)."""
    directory.mkdir(parents=True)
    write_json(
        directory / "config.json", RunConfig.model_validate({"bench": {"steps": 30}}).model_dump(mode="json")
    )
    write_json(directory / "env.json", {**read_json(STACK_RUN / "env.json"), "source": SOURCE, "base": {}})
    write_json(directory / RUN_FILE, {"run_key": RUN_KEY_VALUE, "kfp_run_id": RUN_KEY_VALUE})
    return directory


async def test_the_launcher_task_leaves_the_metrics_file_compare_gathers(
    trainer: Any, tmp_path: Path
) -> None:
    cluster = Cluster(trainer)
    setup = env_task_setup(tmp_path / "setup")
    results = tmp_path / "bench-n" / "results"
    figures = Figures()
    task = asyncio.ensure_future(
        asyncio.to_thread(
            bench_multinode_task,
            str(setup),
            2,
            1,
            "torch-distributed",
            IMAGE,
            "nvidia.com/gpu",
            SELECTOR,
            TOLERATIONS,
            "2",
            "8Gi",
            str(results),
            figures,
            jobs=TrainJobs(NAMESPACE, host=cluster.url),
            poll_s=0.05,
        )
    )
    (created,) = await cluster.wait(cluster.trainjobs, "the task's TrainJob")
    name = created["metadata"]["name"]
    assert name == trainjob_name(RUN_KEY_VALUE, 2)  # from run.json: a retried task attaches to it
    # The component's inputs become the nodes' pods: image, runtime, GPUs and requests, placement, shm.
    spec = created["spec"]
    assert spec["runtimeRef"] == {"name": "torch-distributed"}
    trainer_spec = spec["trainer"]
    assert (trainer_spec["image"], trainer_spec["numNodes"], trainer_spec["numProcPerNode"]) == (IMAGE, 2, 1)
    assert trainer_spec["resourcesPerNode"] == {  # exclusive placement by default: Guaranteed QoS
        "limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"},
        "requests": {"cpu": "2", "memory": "8Gi"},
    }
    assert trainer_spec["args"][-4:] == ["--repository", SOURCE["repository"], "--commit", SOURCE["commit"]]
    config = next(e["value"] for e in trainer_spec["env"] if e["name"] == "BENCHGATE_RUN_CONFIG")
    assert RunConfig.model_validate_json(config).bench.steps == 30  # config.json's
    job = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod = job["template"]["spec"]["template"]["spec"]
    assert (pod["nodeSelector"], pod["tolerations"]) == (SELECTOR, TOLERATIONS)
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": SHM_SIZE_LIMIT}

    await cluster.node_pod(name, 0, rank0_log(REAL_METRICS.read_bytes()))
    await cluster.set_status(name, {"type": "Complete", "reason": "JobsCompleted", "message": "done"})
    await asyncio.wait_for(task, 30)

    # The single-node bench task's outputs, byte for byte, and no error report.
    assert (results / "metrics-ws2.json").read_bytes() == REAL_METRICS.read_bytes()
    assert (results / "logs" / "bench-ws2.log").read_text() == rank0_log(REAL_METRICS.read_bytes())
    assert not (results.parent / "error.json").exists()
    metrics = json.loads(REAL_METRICS.read_text())
    assert figures.logged == bench_figures(metrics) and figures.logged
    assert cluster.trainjobs() == []

    # compare gathers setup and each task's results into the bundle, and reads ws=2 from there.
    bundle = tmp_path / "compare" / "results"
    bundle.mkdir(parents=True)
    bench_1 = tmp_path / "bench-1" / "results"
    bench_1.mkdir(parents=True)
    shutil.copy2(STACK_RUN / "metrics-ws1.json", bench_1)
    for directory in (setup, bench_1, results):
        copy_untrusted(directory, bundle, what=directory.name, copy_function=link_trace_or_copy)
    loaded = load_bundle(bundle)
    assert sorted(loaded.metrics) == [1, 2]
    assert loaded.metrics[2] == metrics


def exit_code_of(*args: Any, **kwargs: Any) -> int | str | None:
    """The task's exit code (None: it returned), as its pod would end: a SystemExit in a worker thread
    would end the event loop instead of coming back."""
    try:
        bench_multinode_task(*args, **kwargs)
    except SystemExit as exited:
        return exited.code
    return None


async def test_a_failed_trainjob_fails_the_task_with_its_reason_in_error_json(
    trainer: Any, tmp_path: Path
) -> None:
    """The task's error report, as kfp.local and `benchgate run` read it, names the Trainer's reason."""
    cluster = Cluster(trainer)
    setup = env_task_setup(tmp_path / "setup")
    results = tmp_path / "bench-n" / "results"
    call = asyncio.to_thread(
        exit_code_of,
        str(setup),
        2,
        1,
        "torch-distributed",
        IMAGE,
        "nvidia.com/gpu",
        {},
        [],
        "2",
        "8Gi",
        str(results),
        Figures(),
        jobs=TrainJobs(NAMESPACE, host=cluster.url),
        poll_s=0.05,
    )
    task = asyncio.ensure_future(call)
    (created,) = await cluster.wait(cluster.trainjobs, "the task's TrainJob")
    await cluster.set_status(
        created["metadata"]["name"],
        {"type": "Failed", "reason": "DeadlineExceeded", "message": "TrainJob exceeded its deadline"},
    )
    assert await asyncio.wait_for(task, 30) == 3  # RunFailedError's exit code
    report = read_json(results.parent / "error.json")
    assert report["type"] == "RunFailedError"
    assert "failed: DeadlineExceeded: TrainJob exceeded its deadline" in report["message"]
    assert not (results / "metrics-ws2.json").exists()
    assert cluster.trainjobs() == []


def env_config(tmp_path: Path) -> RunConfig:
    return RunConfig.model_validate(
        {
            "bench": {"device": "cpu", "workload_args": {"size": "tiny"}},
            "eval": {"enabled": False},
            "gate": {"baseline_dir": str(tmp_path / "baselines")},
            "tracking": {
                "enabled": False,
                "local_dir": str(tmp_path / "m"),
                "spool_dir": str(tmp_path / "s"),
            },
        }
    )


def test_the_env_task_across_nodes_checks_one_nodes_share_against_this_machine(tmp_path: Path) -> None:
    """Its pod holds one node's GPUs (gpus_per_node), not world_size_n: that share is what must fit."""
    node = usable_cpu_cores()
    setup = tmp_path / "capture-env" / "setup"
    parameters = parameters_from_config(env_config(tmp_path), [1, 2 * node])
    # On one node, twice this machine's devices is refused: the env task's usual check.
    with pytest.raises(SystemExit):
        env_task(parameters, "", "", "", "", "{{id}}", "{{name}}", str(setup))
    assert (
        f"bench.world_sizes: got {2 * node}, but this machine has only {node}"
        in read_json(setup.parent / "error.json")["message"]
    )
    (setup.parent / "error.json").unlink()
    env_task(
        parameters, "", "", "", "", "{{id}}", "{{name}}", str(setup), multi_node=True, gpus_per_node=node
    )
    assert not (setup.parent / "error.json").exists()
    assert read_json(setup / "config.json")["bench"]["world_sizes"] == [1, 2 * node]


def test_the_env_task_refuses_multi_node_for_a_world_size_that_fits_one_node(tmp_path: Path) -> None:
    setup = tmp_path / "capture-env" / "setup"
    parameters = parameters_from_config(env_config(tmp_path), [1, 4])
    with pytest.raises(SystemExit) as exited:
        env_task(
            parameters, "", "", "", "", "{{id}}", "{{name}}", str(setup), multi_node=True, gpus_per_node=8
        )
    assert exited.value.code == 2
    report = read_json(setup.parent / "error.json")
    assert report["message"].startswith("multi_node: got true with world_size_n 4 (a run across nodes needs")


@pytest.mark.parametrize(
    ("worlds", "multi_node", "expected"),
    [
        ([1, 16], False, [1, 16]),  # one node: A/B decides both
        ([1, 16], True, [1]),  # ws=16 ran across nodes: only ws=1 goes to A/B
        ([16], True, []),  # nothing left: the screen's verdict is final, and compare publishes it
        ([1], True, [1]),  # ws=16 passed the screen: nothing to say
    ],
)
def test_ab_is_never_asked_to_decide_the_world_size_that_ran_across_nodes(
    worlds: list[int], multi_node: bool, expected: list[int]
) -> None:
    decided, note = ab_on_one_node(worlds, [1, 16], multi_node)
    assert decided == expected
    assert (note != "") == (16 in worlds and multi_node)
    if note:
        assert note == (
            "ws=16 ran across nodes; A/B runs on one node, so it does not decide ws=16: its screened verdict "
            "stands"
        )
