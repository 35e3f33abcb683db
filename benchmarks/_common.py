"""Helpers shared by the benchmark scripts (not part of the benchgate package)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path


def spread_pct(values: Sequence[float]) -> float:
    """(max - min) / median, in percent: how far apart repeated measurements land."""
    return 100 * (max(values) - min(values)) / statistics.median(values)


def cv_pct(values: Sequence[float]) -> float:
    return 100 * statistics.stdev(values) / statistics.mean(values)


def ms(values: Sequence[float]) -> str:
    return " ".join(f"{1e3 * v:.1f}" for v in values)


# The reference GPT with `extra` residual Linear(d, d) layers before its blocks: a candidate whose every
# step does real extra compute, 6·d² FLOPs per trained token per layer (ab_layouts.py, gpu_check.py).
WIDER_GPT = '''
"""gpt-{size} with {extra} extra residual Linear(d, d) layers before its blocks."""
import torch
from torch import nn

from benchgate.workloads.gpt import GPT, GPTWorkload, SIZES

EXTRA = {extra}


class WiderGPT(GPT):
    def __init__(self, size):
        super().__init__(size)
        self.extra = nn.ModuleList(nn.Linear(size.d_model, size.d_model) for _ in range(EXTRA))

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for layer in self.extra:
            x = x + layer(x)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.tok.weight.T


class WiderWorkload(GPTWorkload):
    def build_model(self, device):
        return WiderGPT(self.size).to(device)


def make_workload():
    workload = WiderWorkload("{size}", SIZES["{size}"])
    workload.name = "{name}"
    return workload
'''


def write_wider_gpt(path: Path, extra: int, size: str = "tiny", name: str | None = None) -> Path:
    """The module WIDER_GPT describes, written to `path` (its stem is the module's name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(WIDER_GPT.format(extra=extra, size=size, name=name or f"gpt-{size}"), encoding="utf-8")
    return path
