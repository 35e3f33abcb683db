"""Two real torchrun "nodes" on this host that do what the TrainJob's pods do (measure/node.py): one world
over two torchruns with the Trainer's PET_* variables, node 0 printing rank 0's metrics file in its log
(kit/log_payload.py), and a rank's failure named on its own node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness import free_port, make_config

from benchgate.config import RunConfig
from benchgate.kit import log_payload


def start_nodes(tmp_path: Path, config: RunConfig) -> list[subprocess.Popen[str]]:
    """Two processes as the TrainJob's two pods run them, with the Trainer's variables: one world of
    2 CPU ranks over two torchruns, rendezvous at node 0 (127.0.0.1)."""
    port = str(free_port())
    nodes = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "BENCHGATE_RUN_CONFIG": json.dumps(config.model_dump(mode="json")),
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "1",
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": port,
        }
        command = [sys.executable, "-m", "benchgate.measure.node", "--world-size", "2"]
        command += ["--out-dir", str(tmp_path / f"node{rank}")]
        nodes.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    return nodes


@pytest.mark.slow
def test_two_nodes_on_this_host_run_one_world_and_node_0_prints_rank_0s_metrics(tmp_path: Path) -> None:
    config = make_config(tmp_path, bench={"workload": "bg_test_workloads:sleepy", "steps": 8, "warmup": 1})
    nodes = start_nodes(tmp_path, config)
    logs = [node.communicate(timeout=240)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], logs
    written = tmp_path / "node0" / "metrics-ws2.json"
    payload = log_payload.decode(logs[0], "node 0")
    assert payload == log_payload.Payload("metrics-ws2.json", written.read_bytes())
    metrics = json.loads(payload.data)
    assert metrics["world_size"] == 2 and len(metrics["samples"]["step_time_s_per_rank"]) == 2
    assert log_payload.BEGIN not in logs[1]
    assert not (tmp_path / "node1" / "metrics-ws2.json").exists()
    assert "ranks 1-1 of 2, rank 0 at 127.0.0.1" in logs[1]


@pytest.mark.slow
def test_a_rank_that_fails_on_node_1_is_named_there_and_node_0s_rank_is_not_called_hung(
    tmp_path: Path,
) -> None:
    """Each node knows its own ranks' error files only: node 1 names rank 1's error and does not take
    rank 0, on another node, for a silent rank."""
    bench = {"workload": "bg_test_workloads:failing", "steps": 8, "warmup": 1, "timeout_s": 30}
    config = make_config(tmp_path, bench={**bench, "workload_args": {"rank": 1, "at_step": 3}})
    nodes = start_nodes(tmp_path, config)
    logs = [node.communicate(timeout=240)[0] for node in nodes]
    assert nodes[1].returncode == 3, logs[1]
    assert (
        "benchgate node: error: bench ws=2: rank 1 failed: RuntimeError: injected failure at step 3"
        in logs[1]
    )
    assert "probably hung" not in logs[1]
    assert nodes[0].returncode != 0 and log_payload.BEGIN not in logs[0]
