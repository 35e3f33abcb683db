"""Counted FLOPs (workloads/counted_flops.py): one real training step under FlopCounterMode.

The reference GPT's count is checked against a count made by hand from its shapes: every matmul is 6
FLOPs per weight per token (2 forward, 4 backward: the non-embedding weights without biases and
LayerNorms, plus the tied output head), and each layer's causal attention is 7 products of T x d
per token (QK^T and AV forward; the backward's recomputed scores, dV, dP, dQ, dK), 2 FLOPs each,
halved for the causal mask. The CUDA formulas are called directly with the arguments the CUDA
kernels receive (schemas of torch 2.13), since no GPU is here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from benchgate.measure.mfu import count_flops_or_why, mfu_block
from benchgate.workloads import counted_flops as cf
from benchgate.workloads.gpt import GPTSize, GPTWorkload

aten = torch.ops.aten
CPU = torch.device("cpu")
# A mid size: as deep as small, narrower and shorter, so a CPU step takes a second or so.
MID = GPTSize(n_layers=6, d_model=256, n_heads=8, seq_len=256, batch_size=2)
TINY = GPTSize(n_layers=4, d_model=128, n_heads=4, seq_len=128, batch_size=8)


def matmul_weights(size: GPTSize) -> int:
    """The GPT's weights that multiply activations: qkv, proj, the MLP and the tied output head."""
    d = size.d_model
    return size.n_layers * (3 * d * d + d * d + 8 * d * d) + d * 256


def causal_attention_by_hand(size: GPTSize) -> float:
    """Per token: 7 products of T x d (2 forward, 5 backward), 2 FLOPs each, half of them for causal."""
    return size.n_layers * 7 * 2 * size.seq_len * size.d_model / 2


def counted(size: GPTSize) -> cf.CountedFlops:
    workload = GPTWorkload("under-count", size)
    torch.manual_seed(0)
    model = workload.build_model(CPU)
    return cf.count_training_step(workload, model, CPU, seed=0)


@pytest.mark.parametrize("size", [TINY, MID], ids=["tiny", "mid"])
def test_reference_gpt_counts_its_matmuls_and_causal_attention_as_computed_by_hand(size: GPTSize) -> None:
    result = counted(size)
    workload = GPTWorkload("under-count", size)
    declared = workload.flops_per_token()
    assert result.tokens == size.batch_size * size.seq_len
    # Attention is counted on CPU (torch alone counts 0 there), and as the causal kernel runs it.
    assert result.attention_per_token == causal_attention_by_hand(size)
    assert set(result.by_op) == {
        "aten.mm",
        "aten.addmm",
        "aten._scaled_dot_product_flash_attention_for_cpu",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward",
    }
    matmuls = (result.by_op["aten.mm"] + result.by_op["aten.addmm"]) / result.tokens
    assert matmuls == 6 * matmul_weights(size)
    # Against 6N: the matmuls are within a few percent (6N has biases and LayerNorms, not the head).
    assert matmuls / declared.dense_6n == pytest.approx(1.0, abs=0.05)
    causal_palm = declared.dense_6n + (declared.attention_aware - declared.dense_6n) / 2
    assert result.per_token / causal_palm == pytest.approx(1.0, abs=0.06)
    assert result.per_token == matmuls + result.attention_per_token
    assert result.seconds > 0


def test_torch_alone_counts_no_attention_on_cpu_which_is_why_formulas_are_supplied() -> None:
    q = torch.randn(2, 4, 64, 16, requires_grad=True)
    with FlopCounterMode(display=False) as plain:
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    assert plain.get_total_flops() == 0  # if torch learns to count it, the mapping must not double it
    with FlopCounterMode(display=False, custom_mapping=cf.attention_formulas()) as ours:
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    full = 2 * 2 * 4 * 64 * 64 * 16  # one T x T x d product over batch and heads
    assert ours.get_total_flops() == 7 * full // 2
    # The mapping is this counter's own: torch's global registry is left as it was.
    assert aten._scaled_dot_product_flash_attention_for_cpu not in flop_registry


def test_causal_attention_counts_half_and_an_explicit_mask_counts_in_full() -> None:
    q = torch.randn(1, 2, 32, 8, requires_grad=True)
    mask = torch.ones(32, 32, dtype=torch.bool).tril()
    totals = {}
    for name, kwargs in (("full", {}), ("causal", {"is_causal": True}), ("mask", {"attn_mask": mask})):
        with FlopCounterMode(display=False, custom_mapping=cf.attention_formulas()) as counter:
            F.scaled_dot_product_attention(q, q, q, **kwargs).sum().backward()
        totals[name] = counter.get_total_flops()
    assert totals["full"] == 7 * 2 * 2 * 32 * 32 * 8
    assert totals["causal"] * 2 == totals["full"]
    # The CPU kernel computes every block under an explicit mask: as executed, that is full work.
    assert totals["mask"] == totals["full"]


# The CUDA kernels' arguments (torch 2.13 schemas): shapes where the op takes tensors, as
# FlopCounterMode passes them to a formula that is not raw.
B, H, T, D = 2, 12, 1024, 64
Q = K = V = OUT = (B, H, T, D)
LSE = (B, H, T)
FULL_FORWARD = 2 * (2 * B * H * T * T * D)  # QK^T and AV
FULL_BACKWARD = 5 * (2 * B * H * T * T * D)  # recomputed scores, dV, dP, dQ, dK


@pytest.mark.parametrize("is_causal", [False, True])
def test_cuda_formulas_read_is_causal_where_each_kernel_receives_it(is_causal: bool) -> None:
    share = 0.5 if is_causal else 1.0
    forward, backward = FULL_FORWARD * share, FULL_BACKWARD * share
    formulas = cf.attention_formulas()
    # _scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask,
    #   *, scale)
    flash = formulas[aten._scaled_dot_product_flash_attention]
    assert flash(Q, K, V, 0.0, is_causal, False, scale=None) == forward
    # ..._flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k,
    #   max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale)
    flash_bwd = formulas[aten._scaled_dot_product_flash_attention_backward]
    assert flash_bwd(OUT, Q, K, V, OUT, LSE, None, None, T, T, 0.0, is_causal, (), (), scale=None) == backward
    # _scaled_dot_product_efficient_attention(query, key, value, attn_bias, compute_log_sumexp,
    #   dropout_p, is_causal, *, scale); cuDNN's forward has the same leading arguments
    for op in (aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_cudnn_attention):
        assert formulas[op](Q, K, V, None, True, 0.0, is_causal) == forward
    # ..._efficient_attention_backward(grad_out_, query, key, value, attn_bias, out, logsumexp,
    #   philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, *, scale)
    efficient_bwd = formulas[aten._scaled_dot_product_efficient_attention_backward]
    assert efficient_bwd(OUT, Q, K, V, None, OUT, LSE, (), (), 0.0, [True] * 4, is_causal) == backward
    # ..._cudnn_attention_backward(grad_out, query, key, value, out, logsumexp, philox_seed,
    #   philox_offset, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, *, scale)
    cudnn_bwd = formulas[aten._scaled_dot_product_cudnn_attention_backward]
    assert cudnn_bwd(OUT, Q, K, V, OUT, LSE, (), (), None, None, None, T, T, 0.0, is_causal) == backward
    # Without is_causal, each agrees with torch's own formula (which never discounts a causal mask).
    if not is_causal:
        assert flop_registry[aten._scaled_dot_product_flash_attention](
            Q, K, V, 0.0, False, False, out_val=None
        ) == forward


@pytest.mark.parametrize("is_causal", [False, True])
def test_low_level_kernel_formulas_halve_torchs_count_when_causal(is_causal: bool) -> None:
    # These take tensors (FlopCounterMode passes them raw); meta tensors carry the shapes without
    # memory, laid out as torch's formula reads a tensor that is not nested: [batch, heads, seq, dim].
    q, lse = torch.empty(Q, device="meta"), torch.empty(LSE, device="meta")
    share = 0.5 if is_causal else 1.0
    formulas = cf.attention_formulas()
    # _flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    #   is_causal, return_debug_mask, ...)
    args = (q, q, q, None, None, T, T, 0.0, is_causal, False)
    assert formulas[aten._flash_attention_forward](*args) == FULL_FORWARD * share
    assert flop_registry[aten._flash_attention_forward](*args) == FULL_FORWARD  # torch: never halved
    # _flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k,
    #   max_q, max_k, dropout_p, is_causal, rng_state, unused, ...)
    args = (q, q, q, q, q, lse, None, None, T, T, 0.0, is_causal, None, None)
    assert formulas[aten._flash_attention_backward](*args) == FULL_BACKWARD * share
    # _efficient_attention_forward(query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    #   max_seqlen_k, dropout_p, custom_mask_type, ...): 1 and 2 are causal (from the top or bottom)
    for mask_type in (1, 2) if is_causal else (0,):
        args = (q, q, q, None, None, None, T, T, 0.0, mask_type)
        assert formulas[aten._efficient_attention_forward](*args) == FULL_FORWARD * share
        # _efficient_attention_backward(grad_out_, query, key, value, bias, out, cu_seqlens_q,
        #   cu_seqlens_k, max_seqlen_q, max_seqlen_k, logsumexp, dropout_p, philox_seed,
        #   philox_offset, custom_mask_type, ...)
        args = (q, q, q, q, None, q, None, None, T, T, lse, 0.0, None, None, mask_type)
        assert formulas[aten._efficient_attention_backward](*args) == FULL_BACKWARD * share


def test_grouped_query_attention_counts_the_query_heads() -> None:
    q, kv = (2, 8, 64, 16), (2, 2, 64, 16)
    assert cf.attention_forward_flops(q, kv, kv, is_causal=False) == 2 * 2 * 2 * 8 * 64 * 64 * 16


class _Dropout(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(F.linear(x, torch.ones(4, 4)), p=0.5, training=True)


class _DropoutWorkload:
    name = "dropout"
    tokens_per_step = 8

    def build_model(self, device: torch.device) -> nn.Module:
        return nn.Sequential(nn.Linear(4, 4), _Dropout()).to(device)

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        return torch.randn(8, 4, generator=generator).to(device)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch)  # type: ignore[no-any-return]

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return output.pow(2).mean()


def test_counting_leaves_gradients_and_random_streams_as_they_were() -> None:
    workload = _DropoutWorkload()
    model = workload.build_model(CPU)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    result = cf.count_training_step(workload, model, CPU, seed=0)
    assert torch.equal(torch.get_rng_state(), before)  # the dropout in the count drew from a fork
    assert all(p.grad is None for p in model.parameters())
    # Per row, 2 FLOPs per weight per product: the Linear's forward and weight gradient (its input
    # needs none), the constant matmul's forward and input gradient (its weight needs none).
    assert result.per_token == 4 * 2 * 16
    assert result.attention_per_token == 0


def test_the_model_inside_ddp_or_compile_is_the_one_counted() -> None:
    inner = nn.Linear(2, 2)

    class Compiled(nn.Module):  # the attribute torch.compile's OptimizedModule keeps the original in
        def __init__(self) -> None:
            super().__init__()
            self._orig_mod = inner

    assert cf.unwrapped(Compiled()) is inner
    assert cf.unwrapped(inner) is inner


class _Unfollowable(_DropoutWorkload):
    name = "unfollowable"

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("an op the counter cannot follow")


def test_a_count_that_fails_loses_only_the_counted_figure(capsys: pytest.CaptureFixture[str]) -> None:
    counting = count_flops_or_why(_Unfollowable(), nn.Linear(4, 4), CPU, "fp32", seed=0)
    assert counting == {
        "error": "counting one training step under FlopCounterMode raised RuntimeError: "
        "an op the counter cannot follow"
    }
    assert "an op the counter cannot follow" in capsys.readouterr().err
    block = mfu_block(_Unfollowable(), counting, 1000.0, None, 1, "no peak for dtype 'fp32'")
    assert block["flops_per_token"] == {"dense_6n": None, "attention_aware": None, "counted": None}
    assert block["counted"] is None and block["counting"] == counting
