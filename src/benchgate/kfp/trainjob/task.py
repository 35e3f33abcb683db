"""The pipeline's task bodies for a world size across nodes (docs/multinode.md): the ws=N bench as a
Kubeflow Trainer TrainJob this CPU-only task launches and follows, and what that means for A/B.

`bench_multinode_task` leaves what `tasks.bench_task` leaves, `metrics-ws<N>.json` and
`logs/bench-ws<N>.log` in its results directory, and logs the same figures, so compare reads either
alike. Like every task body (tasks.py), it runs inside `task_harness`: a BenchgateError ends the task
with its exit code and `error.json`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchgate.kfp.params import SHM_SIZE_LIMIT
from benchgate.kfp.task_harness import MetricsSink, reporting_errors, stage, start_task
from benchgate.kit.files import read_json

if TYPE_CHECKING:
    from benchgate.kfp.trainjob.client import TrainJobs


def bench_multinode_task(
    setup_dir: str,
    world_size: int,
    gpus_per_node: int,
    runtime: str,
    image: str,
    accelerator_type: str,
    node_selector: dict[str, str],
    tolerations: list[dict[str, Any]],
    cpu_request: str,
    memory_request: str,
    results_dir: str,
    figures: MetricsSink,
    jobs: TrainJobs | None = None,
    poll_s: float = 10.0,
    queue_name: str = "",
    exclusive: bool = True,
    git_secret: str = "",
) -> None:
    """Run the benchmark at `world_size` across nodes, as a Kubeflow Trainer TrainJob this CPU-only task
    creates, waits for and deletes (kfp/trainjob/job.py): `results_dir` gets rank 0's metrics-ws<N>.json
    and node 0's log, as `bench_task` leaves them, so compare reads either alike. Each node's pod asks
    for `gpus_per_node` x `accelerator_type` and the requests, on the nodes `node_selector` and
    `tolerations` choose; `queue_name`, a Kueue LocalQueue that admits the TrainJob ("" for none);
    `exclusive`, one bench per node with Guaranteed QoS (kfp/trainjob/placement.py); `git_secret`, the
    git Secret each node mounts to fetch a private repository ("" for none). `jobs`: the
    TrainJobs of this pod's namespace unless given (tests)."""
    from benchgate.kfp.trainjob.client import TrainJobs as ClusterTrainJobs
    from benchgate.kfp.trainjob.client import current_namespace
    from benchgate.kfp.trainjob.job import Nodes, launch
    from benchgate.results.bundle import RUN_FILE
    from benchgate.results.figures import bench_figures

    with reporting_errors(f"bench ws={world_size}", results_dir):
        config, env, out = start_task(setup_dir, results_dir)
        run_key = str(read_json(Path(setup_dir) / RUN_FILE)["run_key"])
        nodes = Nodes(
            image=image,
            gpus_per_node=gpus_per_node,
            runtime=runtime,
            accelerator=accelerator_type,
            cpu=cpu_request,
            memory=memory_request,
            shm=SHM_SIZE_LIMIT,
            node_selector=dict(node_selector),
            tolerations=list(tolerations),
            queue_name=queue_name,
            exclusive=exclusive,
            git_secret=git_secret,
        )
        with stage(f"bench ws={world_size} (TrainJob)"):
            metrics_path = launch(
                config,
                env.get("source") or {},
                world_size,
                out,
                nodes,
                run_key,
                jobs or ClusterTrainJobs(current_namespace()),
                poll_s=poll_s,
            )
        # The figures `tasks.bench_task` logs (tasks imports this module: no import back).
        for name, value in bench_figures(read_json(metrics_path)).items():
            figures.log_metric(name, value)


def ab_on_one_node(worlds: list[int], world_sizes: list[int], multi_node: bool) -> tuple[list[int], str]:
    """The world sizes A/B may decide, and why one it may not was left out ("" when none was): A/B runs
    base and candidate in one pod, so a world size that ran across nodes (the largest, with
    `multi_node`) keeps its screened verdict."""
    across = max(world_sizes) if multi_node and world_sizes else None
    if across is None or across not in worlds:
        return worlds, ""
    note = (
        f"ws={across} ran across nodes; A/B runs on one node, so it does not decide ws={across}: its "
        "screened verdict stands"
    )
    return [ws for ws in worlds if ws != across], note
