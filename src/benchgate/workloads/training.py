"""One training step of a workload, split into the named ranges the profiler trace shows.

bench (timed), trace (profiled), the env task's contract check and the tests share this step, so what
is timed is what is traced, and what is checked.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn
from torch.profiler import record_function

from benchgate.errors import ConfigError, WorkloadError
from benchgate.workloads.base import Workload
from benchgate.workloads.contract import check_logits, check_loss, member_error, supports_eval
from benchgate.workloads.parallel import Parallelism, parallelized, plan, process_group

RANGES = ("data", "forward", "loss", "backward", "optimizer_step")
T = TypeVar("T")


def resolve_device(requested: str, local_rank: int = 0) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def resolve_precision(requested: str, device: torch.device) -> str:
    if requested == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return requested


def autocast_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The precision of a step: bf16 autocast, or nothing (fp32)."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class Trainer:
    workload: Workload
    model: nn.Module  # as it trains: DDP-wrapped, or as the workload's parallelize() returned it
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    device: torch.device
    precision: str
    parallelism: Parallelism = field(default_factory=lambda: Parallelism(mesh=None, replicas=1, replica=0))

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        return autocast_context(self.precision, self.device)

    def step(self) -> torch.Tensor:
        """Run one optimizer step; returns the detached loss without synchronising the device."""
        loss = self.compute_loss()
        self.update(loss)
        return loss.detach()

    def compute_loss(self) -> torch.Tensor:
        """The first half of a step: a batch, the forward pass and the loss."""
        with record_function("data"):
            batch = self.workload.make_batch(self.generator, self.device)
        with self._autocast():
            with record_function("forward"):
                output = self.workload.forward(self.model, batch)
            with record_function("loss"):
                loss: torch.Tensor = self.workload.loss(output, batch)
        return loss

    def update(self, loss: torch.Tensor) -> None:
        """The second half: backward and the optimizer step."""
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer_step"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)


def build_trainer(
    workload: Workload,
    device: torch.device,
    precision: str,
    seed: int,
    *,
    world_size: int = 1,
    rank: int = 0,
    after_parallelize: Callable[[nn.Module], None] | None = None,
    compile: bool = False,
    where: str = "bench.workload",
) -> Trainer:
    """The workload's model as it trains at `world_size` (workloads/parallel.py: the workload's own
    `parallelize(model, mesh)`, else DDP above one rank), its optimizer and this rank's batch generator.

    A workload with `parallelize` needs a process group (torchrun's, or `parallel.process_group`).
    `after_parallelize` sees the model once parallelized, before compilation (the bench counts its FLOPs
    there, every rank at once, so a collective in the step has all its ranks). `compile`
    (bench.compile) wraps it in torch.compile, which compiles it at the first step (the bench's warmup).
    """
    # Same seed on every rank: data parallelism needs identical initial weights; batches differ per replica.
    torch.manual_seed(seed)
    model = workload.build_model(device)
    parallelism = plan(workload, device, world_size, rank, where)
    model = parallelized(workload, model, parallelism, device, where)
    if after_parallelize is not None:
        after_parallelize(model)
    if compile:
        # Around DDP, as PyTorch documents it: the compiler splits the graph at DDP's gradient buckets so
        # communication still overlaps the backward pass. The optimizer sees the same parameters.
        model = torch.compile(model)  # type: ignore[assignment]
    optimizer = workload.make_optimizer(model)
    # Seeded by the data-parallel replica: the ranks of one replica (tensor parallel) read the same batches.
    generator = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + parallelism.replica)
    return Trainer(workload, model, optimizer, generator, device, precision, parallelism)


def check_training_step(
    workload: Workload,
    where: str,
    seed: int = 0,
    eval_seq_len: int | None = None,
    device: torch.device | None = None,
) -> float:
    """One real training step of `workload` in this process, checking the contract on the way.

    The pipeline's first task runs it, so that a loss of the wrong shape or a step that raises is refused
    (WorkloadError, exit 2) within seconds, not after the benchmark. It runs on the bench's device (the
    env task has the bench's GPUs on a cluster; CPU by default), so a workload written for CUDA is
    checked where it will run and a large model's step takes GPU seconds, not CPU minutes; and in fp32
    whatever the bench's precision: what it checks (types, shapes, a finite loss, a step that completes)
    does not depend on it, and without bf16 autocast a rounding effect of the precision is not blamed on
    the contract (a loss that only diverges in bf16 is the bench's to report: the metrics' `diverged`
    record, measure/divergence.py).
    `eval_seq_len`, when the eval will run, also checks the eval hook with one `logits` call on that
    many tokens. Returns the loss.
    """
    device = device or torch.device("cpu")
    with process_group(device):  # as the bench's ws=1 runs it: a collective in the step works here too
        return _checked_step(workload, where, seed, eval_seq_len, device)


def _checked_step(
    workload: Workload, where: str, seed: int, eval_seq_len: int | None, device: torch.device
) -> float:
    on = f"one training step on {'CPU' if device.type == 'cpu' else device.type.upper()}"
    trainer = _attempt(
        lambda: build_trainer(workload, device, "fp32", seed, where=where),
        f"{where}: {on}",
        "build_model/parallelize/make_optimizer",
    )
    loss = _attempt(trainer.compute_loss, f"{where}: {on}", "make_batch/forward/loss")
    check_loss(loss, where)
    if not loss.requires_grad:
        raise member_error(where, "loss", "does not require grad; expected a loss computed from the model")
    value = float(loss.detach())
    if not math.isfinite(value):
        raise member_error(where, "loss", f"is {value} after {on}; expected a finite number")
    _attempt(lambda: trainer.update(loss), f"{where}: {on}", "backward/optimizer step")
    if eval_seq_len is not None and supports_eval(workload):
        accepted = workload.eval_seq_len  # type: ignore[attr-defined]
        if eval_seq_len > accepted:
            # The same refusal as the eval stage's, which would otherwise come after the benchmark.
            raise ConfigError(
                f"eval.seq_len: got {eval_seq_len}, but workload {workload.name} accepts at most "
                f"{accepted} tokens"
            )
        tokens = (torch.arange(eval_seq_len) % 256).unsqueeze(0).to(device)
        with torch.no_grad():
            logits = _attempt(lambda: workload.logits(trainer.model, tokens), f"{where}: {on}", "logits")  # type: ignore[attr-defined]
        check_logits(logits, tokens, where)
    return value


def _attempt(call: Callable[[], T], where: str, members: str) -> T:
    try:
        return call()
    except WorkloadError:  # already names the member and what it did (parallelize, mesh_dims)
        raise
    except Exception as e:  # the user's code: whatever it raises is the workload's failure
        raise WorkloadError(f"{where}: {members} raised {type(e).__name__}: {e}") from None
