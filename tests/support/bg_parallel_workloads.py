"""Workloads that bring their own parallelism, or run collectives in their step, as real training code
does: importable by torchrun workers through PYTHONPATH (conftest). All run on CPU over gloo.

`logged_loss`    the loss is all-reduced for logging every step (a common training-loop line): a
                 collective inside the step, on every rank
`logged_fsdp2_gpt` the reference GPT sharded by FSDP2 (`parallel=fsdp2`), its loss logged the same way
`tensor_parallel` a two-layer MLP split by torch's tensor parallel API (ColwiseParallel then
                 RowwiseParallel) over a mesh of every rank: one data-parallel replica at any world size
`fsdp_stack`     equal Linear + GELU layers, each and the root `fully_shard`ed (FSDP2)
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from bg_test_workloads import Sleepy
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from benchgate.workloads.gpt import SIZES, FSDP2GPTWorkload

WIDTH = 64
HIDDEN = 256
BATCH = 16


class _LoggedLoss(Sleepy):
    """sleepy whose loss is all-reduced for logging at every step, as `loss.item()` logging of a global
    loss does in real loops: the collective runs on every rank, inside the step."""

    name = "logged-loss"

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        loss = F.mse_loss(output, batch)
        _all_reduced_for_logging(loss)
        return loss


def logged_loss(step_ms: float = 20.0) -> Sleepy:
    return _LoggedLoss(step_ms)


def _all_reduced_for_logging(loss: torch.Tensor) -> None:
    logged = loss.detach().clone()
    dist.all_reduce(logged)  # every rank's loss, summed: what rank 0 would print


class _LoggedFSDP2GPT(FSDP2GPTWorkload):
    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        loss = super().loss(output, batch)
        _all_reduced_for_logging(loss)
        return loss


def logged_fsdp2_gpt(size: str = "tiny") -> FSDP2GPTWorkload:
    return _LoggedFSDP2GPT(size, SIZES[size])


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, WIDTH))


class TensorParallelMLP:
    """One replica split over every rank of a "tp" mesh: the first Linear by columns, the second by rows
    (one all-reduce in the forward, one in the backward). Both ranks read the same batch."""

    name = "tp-mlp"
    tokens_per_step = BATCH
    mesh_dims: ClassVar[dict[str, int]] = {"tp": -1}

    def build_model(self, device: torch.device) -> nn.Module:
        return mlp().to(device)

    def parallelize(self, model: nn.Module, mesh: DeviceMesh) -> nn.Module:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        return parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.05)

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        batch = torch.randn(BATCH, WIDTH, generator=generator).to(device)
        # Tensor parallelism needs one batch per replica: a rank that drew another would train garbage.
        if dist.is_initialized() and dist.get_world_size() > 1:
            low, high = batch.sum().reshape(1), batch.sum().reshape(1)
            dist.all_reduce(low, op=dist.ReduceOp.MIN)
            dist.all_reduce(high, op=dist.ReduceOp.MAX)
            if not torch.equal(low, high):
                raise RuntimeError("the ranks of one tensor-parallel replica drew different batches")
        return batch

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch)  # type: ignore[no-any-return]

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(output, batch)


def tensor_parallel() -> TensorParallelMLP:
    return TensorParallelMLP()


class FSDPStack:
    """Equal Linear + GELU layers sharded by FSDP2, each layer and then the root."""

    tokens_per_step = BATCH

    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.name = f"fsdp-stack-{layers}"

    def build_model(self, device: torch.device) -> nn.Module:
        layers = (nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.GELU()) for _ in range(self.layers))
        return nn.Sequential(*layers).to(device)

    def parallelize(self, model: nn.Module, mesh: DeviceMesh) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        return torch.randn(BATCH, HIDDEN, generator=generator).to(device)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> Any:
        return model(batch)

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(output, batch)


def fsdp_stack(layers: int = 4) -> FSDPStack:
    return FSDPStack(layers)
