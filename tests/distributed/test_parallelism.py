"""Tensor parallel (DTensor) through real torchrun launches on 2 CPU ranks over gloo: tokens/s counts one
data-parallel replica, its ranks read the same batches, and the counted FLOPs per token are the
model's at ws=1 and ws=2, although every rank sees the DTensor ops at their global shape. FSDP2 and a
collective in the step run through the whole gate in tests/gate/test_parallel_gate.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import make_config

from benchgate.kit.files import read_json
from benchgate.measure.launch import stage_bench

pytestmark = pytest.mark.slow


def bench(tmp_path: Path, workload: str, world_size: int, **bench: Any) -> dict[str, Any]:
    config = make_config(
        tmp_path,
        bench={
            "workload": workload,
            "steps": 6,
            "warmup": 1,
            "world_sizes": [1, 2],
            "timeout_s": 30.0,
            **bench,
        },
    )
    return read_json(stage_bench(config, world_size, tmp_path / f"ws{world_size}"))


def counted(metrics: dict[str, Any]) -> float:
    counting = metrics["mfu"]["counting"]
    assert "error" not in counting, counting
    return float(counting["per_token"])


def test_tensor_parallel_counts_the_model_once_and_one_replica_of_tokens(tmp_path: Path) -> None:
    one = bench(tmp_path, "bg_parallel_workloads:tensor_parallel", 1)
    two = bench(tmp_path, "bg_parallel_workloads:tensor_parallel", 2)
    # Both ranks hold half of each Linear and read the same batch (the workload checks it at every step).
    assert two["data_parallel_replicas"] == 1 and two["tokens_per_step_global"] == 16
    assert "tp=2" in two["parallelism"]
    # forward 2(W1+W2), weight grads 2(W1+W2), the second layer's input grad 2 W2 (W1 = W2 = 64 x 256):
    # every rank sees the DTensor ops at their global shape, and counts its half.
    by_hand = 2 * 32768 + 2 * 32768 + 2 * 16384
    assert counted(one) == counted(two) == by_hand
    assert two["mfu"]["counting"]["ranks"] == 2
