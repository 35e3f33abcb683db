"""A workload with one planted slowdown, for benchmarks/attribution.py: copied into each A/B side's
source directory, the base with CAUSE = "none" and the candidate with one cause, so that the two sides'
code differs by that cause alone, as two commits would.

    make_workload(family="gpt")    the reference GPT (gpt-tiny)
    make_workload(family="gpt2")   Hugging Face GPT-2 from its config (2 layers, d=128), SDPA attention
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from benchgate.workloads import gpt

CAUSE = "none"  # replaced per side by benchmarks/attribution.py
# A planted cause repeats where once would cost the tiny models under 5% of a step: a cause too small
# to FAIL is not what a FAIL's explanation is for.
REPEAT = 16


def _block_forward(self: gpt.Block, x: torch.Tensor) -> torch.Tensor:
    """gpt.Block.forward with the planted cause (the reference's own code where CAUSE is "none")."""
    b, t, d = x.shape
    h = self.ln1(x)
    if CAUSE == "extra_layernorm":
        for _ in range(REPEAT):
            h = self.extra_ln(h)
    if CAUSE == "extra_copy":
        for _ in range(4 * REPEAT):
            h = h.clone()
    q, k, v = self.qkv(h).split(d, dim=2)
    q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
    if CAUSE == "extra_contiguous":  # copies only: the layout SDPA is given stays row-major
        for _ in range(REPEAT):
            q, k, v = (z.transpose(1, 2).contiguous().transpose(1, 2).contiguous() for z in (q, k, v))
    if CAUSE == "layout_drops_flash":  # one copy each into a column-major layout: SDPA's flash kernel
        # wants the last dimension contiguous, so the candidate runs SDPA's math path (its matmuls)
        q, k, v = (z.transpose(2, 3).contiguous().transpose(2, 3) for z in (q, k, v))
    if CAUSE == "eager_attention":
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
    else:
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if CAUSE == "python_loop":
        total = 0
        for i in range(80_000):  # host-side Python that no operator accounts for
            total += i * i
    x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
    hidden = self.ln2(x)
    if CAUSE == "slower_activation":
        up = self.mlp[0](hidden)
        # GELU's tanh form written out: several elementwise operators instead of one aten::gelu.
        act = 0.5 * up * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (up + 0.044715 * torch.pow(up, 3.0))))
        out = self.mlp[2](act)
    else:
        out = self.mlp(hidden)
    if CAUSE == "extra_dropout":
        for _ in range(REPEAT):
            out = F.dropout(out, p=0.1, training=True)
    if CAUSE == "extra_allreduce" and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(out.detach().clone())
    result: torch.Tensor = x + out
    return result


class PlantedGPT(gpt.GPTWorkload):
    def build_model(self, device: torch.device) -> nn.Module:
        size = self.size
        if CAUSE == "larger_mlp":
            size = gpt.GPTSize(size.n_layers, size.d_model, size.n_heads, size.seq_len, size.batch_size)
        model = gpt.GPT(size)
        for block in model.blocks:
            if CAUSE == "larger_mlp":
                d = size.d_model
                block.mlp = nn.Sequential(nn.Linear(d, 8 * d), nn.GELU(), nn.Linear(8 * d, d))
            if CAUSE == "extra_layernorm":
                block.extra_ln = nn.LayerNorm(size.d_model)
            block.forward = types.MethodType(_block_forward, block)
        return model.to(device)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        if CAUSE == "optimizer_for_loop":  # one parameter at a time instead of foreach
            return torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=0.0, foreach=False)
        return super().make_optimizer(model)

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        batch = super().make_batch(generator, device)
        if CAUSE == "slow_batch":
            for _ in range(80):  # tokens through Python lists, as a hand-written collate does
                batch = torch.tensor([[int(v) for v in row] for row in batch.tolist()], device=device)
        return batch

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        if CAUSE == "loss_in_float64":
            logits = output.reshape(-1, output.shape[-1]).double()
            return F.cross_entropy(logits, batch[:, 1:].reshape(-1)).float()
        if CAUSE == "logits_topk":
            for _ in range(REPEAT):
                torch.topk(output.detach(), k=64, dim=-1)  # a metric nobody reads, every step
        return super().loss(output, batch)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        out = super().forward(model, batch)
        if CAUSE == "forward_twice":  # the whole forward again, for a metric nobody reads
            out = out + 0.0 * super().forward(model, batch)
        return out


def _gpt2(device: torch.device) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=256,
        n_positions=128,
        n_embd=128,
        n_layer=2,
        n_head=4,
        n_inner=(1024 if CAUSE == "gpt2_larger_mlp" else None),
        activation_function="gelu_new" if CAUSE == "gpt2_gelu_new" else "gelu_pytorch_tanh",
        attn_implementation="eager" if CAUSE == "gpt2_eager_attention" else "sdpa",
    )
    model = GPT2LMHeadModel(config)
    if CAUSE == "gpt2_extra_layernorm":
        for block in model.transformer.h:
            block.ln_1 = nn.Sequential(block.ln_1, *(nn.LayerNorm(config.n_embd) for _ in range(REPEAT)))
    return model.to(device)


class PlantedGPT2(gpt.GPTWorkload):
    """GPT-2 from transformers at gpt-tiny's batch and sequence length, on the same bytes."""

    def build_model(self, device: torch.device) -> nn.Module:
        return _gpt2(device)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        out = model(input_ids=batch[:, :-1]).logits
        if CAUSE == "gpt2_python_loop":
            total = 0
            for i in range(320_000):
                total += i * i
        return out  # type: ignore[no-any-return]

    def logits(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return model(input_ids=tokens).logits  # type: ignore[no-any-return]


def make_workload(family: str = "gpt", **_: Any) -> gpt.GPTWorkload:
    workload_class = PlantedGPT2 if family == "gpt2" else PlantedGPT
    workload = workload_class("tiny", gpt.SIZES["tiny"])
    workload.name = f"planted-{family}"  # both sides: one name, as one workload at two commits
    return workload
