"""The Workload protocol: what benchgate needs to know to train, time and evaluate a user's model.

A workload is any object with the members of `Workload`, returned by a factory named as 'module:function'
(``benchgate run --workload my_pkg.bench:make_workload --workload-arg size=large``); `load_workload`
imports and calls it. benchgate owns the loop, the timing, the seeds and the process group; the workload
owns the model and its data. No base class is inherited: the protocols here are types to check against.

    Workload                 required: name, tokens_per_step, build_model, make_optimizer, make_batch,
                             forward, loss
    SupportsFlopsPerToken    optional: flops_per_token() (FLOPs by hand; the counted FLOPs need nothing)
    SupportsParallelize      optional: parallelize(model, mesh) (without it: DDP at world sizes above 1)
    SupportsMeshDims         optional, with parallelize: mesh_dims (the mesh's shape)
    SupportsPeriodSteps      optional: period_steps (a periodic event every A/B round holds alike)
    SupportsEval             optional: logits(model, tokens) and eval_seq_len (without both: no eval stage)
    SupportsUnit             optional: unit, what tokens_per_step counts where not tokens ("images")
    SupportsEvalSkipped      optional: eval_skipped, why a workload without the eval hook has none

benchgate looks the optional members up by name (getattr), so a workload has each or not; each member's
docstring says what it must return. The members are checked when the workload is loaded
(`benchgate.workloads.contract.check_members`), and the pipeline's first task runs one real training
step on the bench's device to check the loss (`benchgate.workloads.training.check_training_step`), so a
broken contract is refused (exit 2) within seconds instead of after the benchmark.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import nn

from benchgate.errors import WorkloadError
from benchgate.workloads.contract import check_members  # what load_workload checks
from benchgate.workloads.flops import ModelShape, flops_per_token_6nd, flops_per_token_attention
from benchgate.workloads.origin import check_origin, confined_roots

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass(frozen=True)
class FlopsPerToken:
    """Training FLOPs per token: 6N (Kaplan et al.) and 6N + attention (PaLM appendix B).

    What a workload's optional `flops_per_token()` returns; both are model FLOPs per trained token,
    finite and > 0, and each gives the metrics an MFU figure of its own.
    """

    dense_6n: float
    attention_aware: float

    @classmethod
    def from_shape(cls, shape: ModelShape) -> FlopsPerToken:
        """Both figures computed from a transformer's shape (benchgate.workloads.flops)."""
        return cls(flops_per_token_6nd(shape), flops_per_token_attention(shape))


@runtime_checkable
class Workload(Protocol):
    """What benchgate benchmarks: a model, its optimizer and its data, behind seven required members.

    benchgate builds the model, seeds every rank, wraps it (DDP, or the workload's own `parallelize`),
    and times each step as the ranges data, forward, loss, backward and optimizer_step. The optional
    members are protocols of their own (SupportsFlopsPerToken, SupportsParallelize, SupportsMeshDims,
    SupportsPeriodSteps, SupportsEval). A minimal workload, run with
    ``benchgate run --workload my_bench:make_workload``::

        import torch

        class TinyRegression:
            name = "tiny-regression"
            tokens_per_step = 32

            def build_model(self, device):
                return torch.nn.Linear(8, 1).to(device)

            def make_optimizer(self, model):
                return torch.optim.SGD(model.parameters(), lr=0.01)

            def make_batch(self, generator, device):
                x = torch.randn(32, 8, generator=generator)
                return x.to(device), x.sum(dim=1, keepdim=True).to(device)

            def forward(self, model, batch):
                return model(batch[0])

            def loss(self, output, batch):
                return torch.nn.functional.mse_loss(output, batch[1])

        def make_workload():
            return TinyRegression()
    """

    name: str
    """Identifies workload and size in baselines ("gpt-tiny"); change it when the work per step changes,
    so that old baselines are not compared against. Letters, digits, '.', '_' and '-', starting with a
    letter or digit, at most 100 characters: it names a directory and goes into MLflow filters."""

    tokens_per_step: int
    """Tokens one rank (one data-parallel replica, see SupportsMeshDims) consumes per optimizer step, > 0:
    tokens/s is replicas x tokens_per_step / step time."""

    def build_model(self, device: torch.device) -> nn.Module:
        """The model, on `device`; benchgate seeds torch before calling it."""
        ...

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        """The optimizer of `model` (the model as it trains: wrapped or parallelized)."""
        ...

    def make_batch(self, generator: torch.Generator, device: torch.device) -> Any:
        """One step's batch, any object, on `device`; draw randomness only from `generator` (seeded per
        rank, or per data-parallel replica), so that every run draws the same batches."""
        ...

    def forward(self, model: nn.Module, batch: Any) -> Any:
        """The model's output for `batch`, anything `loss` takes (timed as the 'forward' range)."""
        ...

    def loss(self, output: Any, batch: Any) -> torch.Tensor:
        """The loss of `output`: a scalar tensor (shape []), floating point, finite, computed from the
        model so that it requires grad (timed as the 'loss' range)."""
        ...


@runtime_checkable
class SupportsFlopsPerToken(Protocol):
    """Optional: a workload that states its FLOPs by hand.

    Without it the metrics have no 6N or attention-aware figures; the counted FLOPs (one training step
    under torch's FlopCounterMode, benchgate.workloads.counted_flops) are there for every workload.
    """

    def flops_per_token(self) -> FlopsPerToken:
        """Model FLOPs per trained token by 6N and attention-aware, each a finite number > 0: a
        FlopsPerToken (or any object with its two fields). Called when the workload is loaded, and
        again for the metrics."""
        ...


@runtime_checkable
class SupportsParallelize(Protocol):
    """Optional: a workload that brings its own parallelism (benchgate.workloads.parallel).

    Without it benchgate wraps the model in DistributedDataParallel at world sizes above 1.
    """

    def parallelize(self, model: nn.Module, mesh: DeviceMesh) -> nn.Module:
        """The nn.Module to train: the workload's own parallelism (FSDP2's fully_shard, tensor parallel,
        activation checkpointing, float8, a compiled block) applied to build_model's `model`, given a
        DeviceMesh of the launch's ranks. Called at every world size, ws=1 included (a one-rank mesh), so
        that ws=1 and ws=N run the same code."""
        ...


@runtime_checkable
class SupportsMeshDims(SupportsParallelize, Protocol):
    """Optional, and only with `parallelize`: the shape of the mesh `parallelize` is given."""

    @property
    def mesh_dims(self) -> Mapping[str, int]:
        """The mesh's dimensions, outermost first, name -> size, one size may be -1 (the rest):
        {"dp": -1} by default, {"dp": -1, "tp": 2} for 2-way tensor parallel. Dimensions named "dp..."
        are data parallel: their ranks read different batches, and `tokens_per_step` counts one such
        replica's tokens. At each world size the sizes must fit it: multiply to it, or divide it where
        one is -1."""
        ...


@runtime_checkable
class SupportsPeriodSteps(Protocol):
    """Optional: a workload that does something every so many steps (none without it)."""

    period_steps: int
    """The steps from one of the workload's periodic events (a checkpoint, an eval, a log flush) to the
    next, by its own count, warmup included, > 0: every A/B round measures a whole number of such
    periods, at least one, so that each round holds the event alike (ab/round_plan.py)."""


@runtime_checkable
class SupportsEval(Protocol):
    """Optional: the eval hook, both members or neither (the eval stage is skipped without it)."""

    eval_seq_len: int
    """The context length the model accepts, > 0; the eval's windows are no longer."""

    def logits(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        """Next-byte logits [batch, time, 256], floating point and finite, for int64 byte tokens
        [batch, time]."""
        ...


@runtime_checkable
class SupportsUnit(Protocol):
    """Optional: what `tokens_per_step` counts, where it is not tokens (an image model's images)."""

    unit: str
    """A plural noun in lowercase letters, at most 20: "images", "clips" ("tokens" without it). The
    timing rows, tables and suite views name the rate after it ("images/s"); runs of different units
    are never compared."""


@runtime_checkable
class SupportsEvalSkipped(Protocol):
    """Optional, for a workload without the eval hook: why it has none, said where the eval is skipped."""

    eval_skipped: str
    """One sentence, e.g. "task=image-classification: an image classifier reads no bytes"
    (benchgate.workloads.hf); eval.json's `skipped` says it after "the workload has no eval hook: "."""


def load_workload(spec: str, args: dict[str, Any] | None = None) -> Workload:
    """Import 'module:function', call it with `args`, and check the result against the protocol.

    Returns the checked workload; anything wrong (the module does not import, the function is missing
    or raises, a member is missing or of the wrong type or value) is a WorkloadError (exit 2) naming
    `spec` and the member. For example::

        workload = load_workload("benchgate.workloads.gpt:make_workload", {"size": "tiny"})
        model = workload.build_model(torch.device("cpu"))
    """
    module_name, _, func_name = spec.partition(":")
    roots = confined_roots()
    if roots is not None:  # a checked-out commit: its own workloads or benchgate's (workloads/origin.py)
        check_origin(spec, roots)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any import-time failure of user code is a bad workload spec
        raise WorkloadError(
            f"bench.workload: cannot import module {module_name!r} ({type(e).__name__}: {e})"
        ) from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise WorkloadError(f"bench.workload: {module_name!r} has no callable {func_name!r}")
    try:
        workload = factory(**(args or {}))
    except Exception as e:
        raise WorkloadError(
            f"bench.workload: {spec}({_format_args(args)}) raised {type(e).__name__}: {e}"
        ) from None
    check_members(workload, f"bench.workload: {spec}")
    return workload  # type: ignore[no-any-return]


def _format_args(args: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in (args or {}).items())
