"""The reference workload: a decoder-only transformer over bytes, trained on the bundled shard.

Sizes:
    tiny   4 layers, d=128, T=128, batch 8     ~0.8M params; a CPU step in tens of milliseconds
    small  12 layers, d=768, T=1024, batch 8   GPT-2-124M-like (85M non-embedding params), for GPUs
    auto   small where CUDA is available, tiny otherwise

Parallelism (`parallel`): "ddp", benchgate's DDP wrap above one rank (the default), or "fsdp2", the
model sharded with FSDP2 by the workload's own `parallelize` (FSDP2GPTWorkload, named gpt-<size>-fsdp2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from benchgate.workloads.base import FlopsPerToken
from benchgate.workloads.flops import ModelShape
from benchgate.workloads.shard import VOCAB_SIZE, load_shard, sample_windows


@dataclass(frozen=True)
class GPTSize:
    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    batch_size: int


SIZES = {
    "tiny": GPTSize(n_layers=4, d_model=128, n_heads=4, seq_len=128, batch_size=8),
    "small": GPTSize(n_layers=12, d_model=768, n_heads=12, seq_len=1024, batch_size=8),
}


class Block(nn.Module):
    def __init__(self, size: GPTSize) -> None:
        super().__init__()
        self.n_heads = size.n_heads
        self.ln1 = nn.LayerNorm(size.d_model)
        self.qkv = nn.Linear(size.d_model, 3 * size.d_model)
        self.proj = nn.Linear(size.d_model, size.d_model)
        self.ln2 = nn.LayerNorm(size.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(size.d_model, 4 * size.d_model), nn.GELU(), nn.Linear(4 * size.d_model, size.d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class GPT(nn.Module):
    def __init__(self, size: GPTSize) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB_SIZE, size.d_model)
        self.pos = nn.Embedding(size.seq_len, size.d_model)
        self.blocks = nn.ModuleList(Block(size) for _ in range(size.n_layers))
        self.ln_f = nn.LayerNorm(size.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        # Weight tying: the output head reuses the token embedding, as GPT-2 does.
        logits: torch.Tensor = self.ln_f(x) @ self.tok.weight.T
        return logits


def non_embedding_params(size: GPTSize) -> int:
    d = size.d_model
    per_block = (3 * d * d + 3 * d) + (d * d + d) + (8 * d * d + 5 * d) + 4 * d  # qkv, proj, mlp, 2 LNs
    return size.n_layers * per_block + 2 * d  # + final LayerNorm


class GPTWorkload:
    """Implements the benchgate Workload protocol (see benchgate.workloads.base)."""

    def __init__(self, size_name: str, size: GPTSize, lr: float = 3e-3) -> None:
        self.size = size
        self.name = f"gpt-{size_name}"
        self.tokens_per_step = size.batch_size * size.seq_len
        self.eval_seq_len = size.seq_len
        self.lr = lr
        self._train = load_shard().train

    def build_model(self, device: torch.device) -> nn.Module:
        return GPT(self.size).to(device)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=0.0)

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        windows = sample_windows(self._train, self.size.batch_size, self.size.seq_len + 1, generator)
        return windows.to(device, non_blocking=True)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch[:, :-1])  # type: ignore[no-any-return]

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), batch[:, 1:].reshape(-1))

    def logits(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return model(tokens)  # type: ignore[no-any-return]

    def flops_per_token(self) -> FlopsPerToken:
        s = self.size
        return FlopsPerToken.from_shape(
            ModelShape(
                n_params=non_embedding_params(s),
                n_layers=s.n_layers,
                n_heads=s.n_heads,
                head_dim=s.d_model // s.n_heads,
                seq_len=s.seq_len,
            )
        )


class FSDP2GPTWorkload(GPTWorkload):
    """The reference GPT sharded with FSDP2 (`parallel=fsdp2`): the workload owns its parallelism.

    Each block and then the root are `fully_shard`ed over the mesh benchgate gives (1-D, data
    parallel): parameters, gradients and optimizer state are split across the ranks, each block's
    parameters all-gathered for its forward and backward, gradients reduce-scattered. What a team that
    trains with FSDP2 runs, and what benchgate's default DDP wrap would not measure.
    """

    def __init__(self, size_name: str, size: GPTSize, lr: float = 3e-3) -> None:
        super().__init__(size_name, size, lr)
        self.name = f"gpt-{size_name}-fsdp2"  # its own baselines: another parallelism, another speed

    def parallelize(self, model: nn.Module, mesh: DeviceMesh) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:  # type: ignore[union-attr]
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model


PARALLEL = ("ddp", "fsdp2")


def make_workload(
    size: str = "auto", lr: float = 3e-3, batch_size: int | None = None, parallel: str = "ddp"
) -> GPTWorkload:
    """Factory for `--workload benchgate.workloads.gpt:make_workload --workload-arg size=tiny`.

    `batch_size` (windows per rank and step; default the size's) is what a suite's variant batch_size
    sets. The name stays the size's: a suite stores each variant under its entry's name (bench.name).
    `parallel`: "ddp" (benchgate's DDP wrap above one rank) or "fsdp2" (FSDP2GPTWorkload).
    """
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be one of {', '.join(PARALLEL)}; got {parallel!r}")
    if size == "auto":
        size = "small" if torch.cuda.is_available() else "tiny"
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(['auto', *SIZES])}; got {size!r}")
    shape = SIZES[size]
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        shape = replace(shape, batch_size=batch_size)
    workload_class = FSDP2GPTWorkload if parallel == "fsdp2" else GPTWorkload
    return workload_class(size, shape, lr=float(lr))
