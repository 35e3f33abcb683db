"""Counted FLOPs: one training step of a workload under torch's FlopCounterMode, per trained token.

The third estimator beside 6N and attention-aware (`flops.py`), and the only one a workload gets
without writing `flops_per_token()` by hand. One step is counted: forward, loss and backward of the
model as it trains (DDP-wrapped, or as the workload's parallelize() made it) but not compiled, on every
rank at once, not the optimizer step (element-wise work that neither 6N nor PaLM counts). Each rank
counts its own work, and its share of an op on DTensors (tensor parallel), which every rank of the
DTensor's mesh sees at its global shape; the launch's count is their sum (`combine_ranks`). The batch
comes from a generator of its own, so the measured sequence of batches is unchanged, and the
gradients are cleared afterwards.

Attention is counted as the kernels execute it. torch's own formulas (torch/utils/flop_counter.py,
torch 2.13) have two gaps that this module fills through FlopCounterMode's `custom_mapping`, never by
registering globally (which would change every other counter in the process):

- the CPU flash kernel (`_scaled_dot_product_flash_attention_for_cpu` and its backward) has no
  formula, so `scaled_dot_product_attention` counts 0 on CPU;
- the CUDA formulas (`sdpa_flop`, `sdpa_backward_flop` for the flash, efficient and cuDNN kernels)
  ignore `is_causal`, so a causal kernel, which skips the blocks above the diagonal, counts twice
  the work it does.

With `is_causal` this module counts half of the QK^T and AV products (forward and backward), the
convention of FlashAttention's and torchtitan's causal FLOPs. An explicit mask (`attn_mask`, an
attention bias) is computed in full by these kernels and is counted in full; so is attention written
as matmuls (eager attention, the math fallback under dropout), which FlopCounterMode sees as bmm.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten

# Seeds the counted step's own batch generator: a stream apart from every rank's measured batches.
COUNTING_SEED_OFFSET = 7_919


def causal_share(is_causal: bool) -> float:
    """The share of the score matrix a kernel computes: half under a causal mask (the blocks above the
    diagonal are skipped), all of it otherwise."""
    return 0.5 if is_causal else 1.0


def attention_forward_flops(query_shape: Any, key_shape: Any, value_shape: Any, is_causal: bool) -> int:
    """QK^T and AV of one attention call ([batch, heads, seq, head_dim] shapes; GQA allowed)."""
    return int(sdpa_flop_count(query_shape, key_shape, value_shape) * causal_share(is_causal))


def attention_backward_flops(
    grad_out_shape: Any, query_shape: Any, key_shape: Any, value_shape: Any, is_causal: bool
) -> int:
    """The backward's five products (scores recomputed, dV, dP, dQ, dK), halved under a causal mask."""
    total = sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)
    return int(total * causal_share(is_causal))


# The formulas take the ops' arguments as their schemas name them (FlopCounterMode passes tensors as
# shapes, every other argument as given, plus `out_shape`); `is_causal` keeps its default where the
# schema gives it one. Schemas read from torch 2.13 (`torch.ops.aten.<op>.default._schema`).


def cpu_flash_forward(
    query: Any, key: Any, value: Any, dropout_p: float = 0.0, is_causal: bool = False, **_: Any
) -> int:
    """aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, *,
    attn_mask, scale)"""
    return attention_forward_flops(query, key, value, is_causal)


def cpu_flash_backward(
    grad_out: Any,
    query: Any,
    key: Any,
    value: Any,
    out: Any,
    logsumexp: Any,
    dropout_p: float,
    is_causal: bool,
    **_: Any,
) -> int:
    """aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out,
    logsumexp, dropout_p, is_causal, *, attn_mask, scale)"""
    return attention_backward_flops(grad_out, query, key, value, is_causal)


def cuda_flash_forward(
    query: Any, key: Any, value: Any, dropout_p: float = 0.0, is_causal: bool = False, *_: Any, **__: Any
) -> int:
    """aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal,
    return_debug_mask, *, scale)"""
    return attention_forward_flops(query, key, value, is_causal)


def cuda_flash_backward(
    grad_out: Any,
    query: Any,
    key: Any,
    value: Any,
    out: Any,
    logsumexp: Any,
    cum_seq_q: Any,
    cum_seq_k: Any,
    max_q: Any,
    max_k: Any,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    **__: Any,
) -> int:
    """aten._scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, logsumexp,
    cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale)"""
    return attention_backward_flops(grad_out, query, key, value, is_causal)


def cuda_biased_forward(
    query: Any,
    key: Any,
    value: Any,
    attn_bias: Any,
    compute_log_sumexp: bool,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *_: Any,
    **__: Any,
) -> int:
    """aten._scaled_dot_product_efficient_attention and aten._scaled_dot_product_cudnn_attention:
    (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)"""
    return attention_forward_flops(query, key, value, is_causal)


def cuda_efficient_backward(
    grad_out_: Any,
    query: Any,
    key: Any,
    value: Any,
    attn_bias: Any,
    out: Any,
    logsumexp: Any,
    philox_seed: Any,
    philox_offset: Any,
    dropout_p: float,
    grad_input_mask: Any,
    is_causal: bool = False,
    **_: Any,
) -> int:
    """aten._scaled_dot_product_efficient_attention_backward(grad_out_, query, key, value, attn_bias,
    out, logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, *, scale)"""
    return attention_backward_flops(grad_out_, query, key, value, is_causal)


def cuda_cudnn_backward(
    grad_out: Any,
    query: Any,
    key: Any,
    value: Any,
    out: Any,
    logsumexp: Any,
    philox_seed: Any,
    philox_offset: Any,
    attn_bias: Any,
    cum_seq_q: Any,
    cum_seq_k: Any,
    max_q: Any,
    max_k: Any,
    dropout_p: float,
    is_causal: bool,
    **_: Any,
) -> int:
    """aten._scaled_dot_product_cudnn_attention_backward(grad_out, query, key, value, out, logsumexp,
    philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
    *, scale)"""
    return attention_backward_flops(grad_out, query, key, value, is_causal)


def _halved_when_causal(torch_formula: Callable[..., int], causal_at: int) -> Callable[..., int]:
    """torch's formula of a low-level kernel (it takes tensors: nested ones are unpacked per sequence),
    scaled by the causal share read from argument `causal_at`."""

    def formula(*args: Any, **kwargs: Any) -> int:
        is_causal = bool(args[causal_at]) if len(args) > causal_at else bool(kwargs.get("is_causal"))
        return int(torch_formula(*args, **kwargs) * causal_share(is_causal))

    formula._get_raw = True  # type: ignore[attr-defined]  # FlopCounterMode passes it tensors, not shapes
    return formula


def _efficient_kernel(torch_formula: Callable[..., int], mask_type_at: int) -> Callable[..., int]:
    """The low-level efficient kernels say causal as `custom_mask_type` (0 none, 1 and 2 causal)."""

    def formula(*args: Any, **kwargs: Any) -> int:
        mask_type = args[mask_type_at] if len(args) > mask_type_at else kwargs.get("custom_mask_type", 0)
        return int(torch_formula(*args, **kwargs) * causal_share(mask_type in (1, 2)))

    formula._get_raw = True  # type: ignore[attr-defined]
    return formula


def attention_formulas() -> dict[Any, Callable[..., int]]:
    """FlopCounterMode's `custom_mapping`: every attention kernel of torch 2.13, causal counted as half."""
    registry = flop_counter.flop_registry
    return {
        aten._scaled_dot_product_flash_attention_for_cpu: cpu_flash_forward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_flash_backward,
        aten._scaled_dot_product_flash_attention: cuda_flash_forward,
        aten._scaled_dot_product_flash_attention_backward: cuda_flash_backward,
        aten._scaled_dot_product_efficient_attention: cuda_biased_forward,
        aten._scaled_dot_product_efficient_attention_backward: cuda_efficient_backward,
        aten._scaled_dot_product_cudnn_attention: cuda_biased_forward,
        aten._scaled_dot_product_cudnn_attention_backward: cuda_cudnn_backward,
        # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
        aten._flash_attention_forward: _halved_when_causal(registry[aten._flash_attention_forward], 8),
        # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
        #  is_causal, ...)
        aten._flash_attention_backward: _halved_when_causal(registry[aten._flash_attention_backward], 11),
        # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
        #  custom_mask_type, ...)
        aten._efficient_attention_forward: _efficient_kernel(registry[aten._efficient_attention_forward], 9),
        # (grad_out_, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
        #  max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type, ...)
        aten._efficient_attention_backward: _efficient_kernel(
            registry[aten._efficient_attention_backward], 14
        ),
    }


ATTENTION_OPS = frozenset(str(op) for op in attention_formulas())


def _dtensor_type() -> type[Any] | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch built without distributed has no DTensor, so nothing to share
        return None
    return DTensor


def ranks_counting_alike(args: Any, kwargs: Any) -> int:
    """How many ranks count this op alike. FlopCounterMode dispatches above tensor subclasses, so an op
    on DTensors (tensor parallel) is counted at its global shape, on every rank of the DTensor's mesh;
    an op on plain tensors (DDP, FSDP2's unsharded parameters, hand-sharded layers) only on its own."""
    dtensor = _dtensor_type()
    if dtensor is None:
        return 1
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, dtensor):
            return int(leaf.device_mesh.size())
    return 1


def _this_ranks_share(formula: Callable[..., Any]) -> Callable[..., float]:
    def share(*args: Any, **kwargs: Any) -> float:
        return float(formula(*args, **kwargs)) / ranks_counting_alike(args, kwargs)

    share._get_raw = True  # type: ignore[attr-defined]  # it needs the tensors, to see DTensors
    return share


def counting_formulas() -> dict[Any, Callable[..., float]]:
    """Every formula this count uses (torch's, with the attention ones above in place of torch's), each
    counting this rank's share: summed over the ranks of a launch, an op on DTensors counts once."""
    formulas: dict[Any, Callable[..., Any]] = dict(flop_counter.flop_registry)  # they take raw arguments
    for op, formula in attention_formulas().items():
        formulas[op] = formula if getattr(formula, "_get_raw", False) else flop_counter.shape_wrapper(formula)
    return {op: _this_ranks_share(formula) for op, formula in formulas.items()}


@dataclass(frozen=True)
class CountedFlops:
    """One training step counted on one rank: its FLOPs (its share of ops on DTensors), per token of its
    replica's batch, the attention's part, and what counting cost."""

    flops: float
    attention_flops: float
    tokens: int
    seconds: float
    by_op: dict[str, float] = field(default_factory=dict)  # FLOPs of each op counted

    @property
    def per_token(self) -> float:
        """FLOPs per token where this rank is the whole launch (ws=1); else see `combine_ranks`."""
        return self.flops / self.tokens

    @property
    def attention_per_token(self) -> float:
        return self.attention_flops / self.tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "flops": self.flops,
            "attention_flops": self.attention_flops,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "by_op": dict(self.by_op),
        }


def combine_ranks(counts: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    """A launch's count from every rank's `CountedFlops.to_dict()`: the FLOPs of one step of the whole
    launch (summed: each rank counted its own work, and its share of ops on DTensors) per token the
    launch trains in a step (`tokens`: replicas x tokens_per_step)."""
    total = sum(float(c["flops"]) for c in counts)
    by_op: dict[str, float] = {}
    for count in counts:
        for op, flops in count["by_op"].items():
            by_op[op] = by_op.get(op, 0.0) + float(flops) / tokens
    return {
        "per_token": total / tokens,
        "attention_per_token": sum(float(c["attention_flops"]) for c in counts) / tokens,
        "tokens": tokens,
        "ranks": len(counts),
        "seconds": max(float(c["seconds"]) for c in counts),
        "by_op": by_op,
    }


def unwrapped(model: nn.Module) -> nn.Module:
    """The module inside a torch.compile'd one: a compiled graph hides its ops from the counter. A DDP or
    FSDP wrapper stays: every rank counts at once, so its collectives have all their ranks."""
    while hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
        model = model._orig_mod
    return model


@contextmanager
def _rng_kept(device: torch.device) -> Iterator[None]:
    # Dropout in the counted step draws from torch's global generators; the measured steps must draw
    # the same numbers as they would without the count.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        yield


def count_training_step(
    workload: Any,
    model: nn.Module,
    device: torch.device,
    seed: int,
    autocast: Callable[[], AbstractContextManager[Any]] | None = None,
) -> CountedFlops:
    """Count one forward + loss + backward of `workload` on `model` (uncompiled first) on this rank.

    Every rank of a launch counts at once (a collective in the step, a DDP or FSDP wrapper, has all its
    ranks); `combine_ranks` sums them. `autocast` is the bench's precision context (bf16 autocast or
    none): a kernel choice may depend on the dtype, so the step is counted as it will run. Gradients are
    set to None afterwards.
    """
    model = unwrapped(model)
    started = time.perf_counter()
    generator = torch.Generator(device="cpu").manual_seed(seed + COUNTING_SEED_OFFSET)
    counter = FlopCounterMode(display=False, custom_mapping=counting_formulas())
    try:
        with _rng_kept(device):
            batch = workload.make_batch(generator, device)
            with counter:
                with autocast() if autocast is not None else nullcontext():
                    output = workload.forward(model, batch)
                    loss = workload.loss(output, batch)
                loss.backward()
    finally:
        # The first measured step starts from no gradients, as it would without the count.
        model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    counts = counter.get_flop_counts().get("Global", {})
    by_op = {str(op): float(flops) for op, flops in counts.items()}
    return CountedFlops(
        flops=float(counter.get_total_flops()),
        attention_flops=sum(v for op, v in by_op.items() if op in ATTENTION_OPS),
        tokens=int(workload.tokens_per_step),
        seconds=time.perf_counter() - started,
        by_op=by_op,
    )
