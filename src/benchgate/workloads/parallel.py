"""The workload's parallelism: the device mesh benchgate gives it, and who wraps the model.

By default benchgate wraps the model in DistributedDataParallel at world sizes above 1, as before. A
workload that brings its own parallelism (FSDP2 `fully_shard`, tensor parallel, activation
checkpointing, float8, a compiled block) has a `parallelize(model, mesh)` member: benchgate builds the
model, hands it over with a DeviceMesh of the launch's ranks, and trains what it returns, at every world
size, ws=1 included (a one-rank mesh), so ws=1 and ws=N run the same code and their scaling efficiency
compares like with like. The mesh is 1-D, named "dp", unless the workload asks for another shape with
`mesh_dims` (outermost first, one size may be -1 for "the rest"):

    mesh_dims = {"dp": -1, "tp": 2}        8 ranks: a (4, 2) mesh named ("dp", "tp")

Data-parallel replicas are the ranks that read different batches: the product of the sizes of the
dimensions whose names start with "dp" ("dp", "dp_shard", "dp_replicate"), 1 when there is none. Each
replica's ranks draw the same batches (their generator is seeded by the replica, not the rank), which
tensor parallelism needs, and `tokens_per_step` counts one replica's tokens: tokens/s is replicas x
tokens_per_step / step time.

Every stage that trains runs inside a process group (`process_group`): torchrun's at the bench, a
one-rank group of its own in the stages that run in one process (the contract check, the trace), so a
step that runs a collective (an all-reduce of the loss for logging, SyncBatchNorm, FSDP) works there.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import HashStore  # type: ignore[attr-defined]  # not in torch's stubs' __all__

from benchgate.errors import WorkloadError

DEFAULT_MESH_DIMS: dict[str, int] = {"dp": -1}
DATA_PARALLEL_PREFIX = "dp"


def member_error(where: str, member: str, problem: str) -> WorkloadError:
    # The message form of workloads/contract.py's, which imports this module (so this one cannot import it).
    return WorkloadError(f"{where}: workload member `{member}` {problem}")


def owns_parallelism(workload: Any) -> bool:
    return callable(getattr(workload, "parallelize", None))


def check_mesh_dims(workload: Any, where: str) -> dict[str, int]:
    """The workload's `mesh_dims` (default {"dp": -1}), checked: names, sizes >= 1 or one -1."""
    dims = getattr(workload, "mesh_dims", None)
    if dims is None:
        return dict(DEFAULT_MESH_DIMS)
    if not owns_parallelism(workload):
        raise member_error(
            where, "mesh_dims", "is set, but the workload has no `parallelize` method to use it"
        )
    if not isinstance(dims, Mapping) or not dims:
        raise member_error(
            where, "mesh_dims", f"is {dims!r}; expected a dict of name -> size, e.g. {{'dp': -1}}"
        )
    out: dict[str, int] = {}
    for name, size in dims.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise member_error(
                where, "mesh_dims", f"has the name {name!r}; expected an identifier such as 'tp'"
            )
        if isinstance(size, bool) or not isinstance(size, int) or (size < 1 and size != -1):
            raise member_error(where, f"mesh_dims[{name!r}]", f"is {size!r}; expected an int >= 1, or -1")
        out[name] = size
    if sum(size == -1 for size in out.values()) > 1:
        raise member_error(where, "mesh_dims", f"is {out}; at most one size may be -1 (the rest)")
    return out


def mesh_shape(dims: Mapping[str, int], world_size: int, where: str) -> tuple[int, ...]:
    """The sizes of `dims` at `world_size` ranks, the -1 resolved; WorkloadError when they do not fit."""
    fixed = math.prod(size for size in dims.values() if size != -1)
    if -1 in dims.values():
        if world_size % fixed:
            raise member_error(
                where, "mesh_dims", f"is {dict(dims)}: {world_size} ranks do not divide into parts of {fixed}"
            )
        return tuple(world_size // fixed if size == -1 else size for size in dims.values())
    if fixed != world_size:
        raise member_error(
            where, "mesh_dims", f"is {dict(dims)}: {fixed} ranks, but the launch has {world_size}"
        )
    return tuple(dims.values())


@dataclass(frozen=True)
class Parallelism:
    """Where this rank stands: its mesh (None where the default DDP needs none) and its replica."""

    mesh: Any  # torch.distributed.device_mesh.DeviceMesh | None
    replicas: int  # data-parallel replicas: ranks that read different batches
    replica: int  # this rank's replica, which seeds its batches

    def describe(self) -> str:
        if self.mesh is None:
            return f"DDP over {self.replicas} rank(s)" if self.replicas > 1 else "one rank, no wrapper"
        names = self.mesh.mesh_dim_names or ()
        dims = ", ".join(f"{n}={s}" for n, s in zip(names, self.mesh.mesh.shape, strict=True))
        return f"the workload's parallelize() on a mesh ({dims}), {self.replicas} data-parallel replica(s)"


def plan(workload: Any, device: torch.device, world_size: int, rank: int, where: str) -> Parallelism:
    """The mesh and replica of `rank` in a launch of `world_size` (inside a process group)."""
    if not owns_parallelism(workload):
        return Parallelism(mesh=None, replicas=world_size, replica=rank)
    from torch.distributed.device_mesh import init_device_mesh

    dims = check_mesh_dims(workload, where)
    shape = mesh_shape(dims, world_size, where)
    mesh = init_device_mesh(device.type, shape, mesh_dim_names=tuple(dims))
    coordinate = mesh.get_coordinate() or [0] * len(shape)
    replicas, replica = 1, 0
    for name, size, index in zip(dims, shape, coordinate, strict=True):
        if name.startswith(DATA_PARALLEL_PREFIX):
            replicas, replica = replicas * size, replica * size + index
    return Parallelism(mesh=mesh, replicas=replicas, replica=replica)


def parallelized(
    workload: Any, model: nn.Module, parallelism: Parallelism, device: torch.device, where: str
) -> nn.Module:
    """`model` as it trains: the workload's `parallelize(model, mesh)`, else DDP at more than one rank."""
    if parallelism.mesh is not None:
        try:
            wrapped = workload.parallelize(model, parallelism.mesh)
        except Exception as e:  # the user's code: whatever it raises is the workload's failure
            raise member_error(where, "parallelize(model, mesh)", f"raised {type(e).__name__}: {e}") from None
        if not isinstance(wrapped, nn.Module):
            raise member_error(
                where,
                "parallelize(model, mesh)",
                f"returned {type(wrapped).__name__}; expected the nn.Module to train",
            )
        return wrapped
    if parallelism.replicas > 1:
        device_ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    return model


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[None]:
    """A one-rank process group for a stage that trains in this process, unless one exists (torchrun's).

    In-memory store, no port: nothing outside the process takes part."""
    if dist.is_initialized():
        yield
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
