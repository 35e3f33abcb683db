"""Helpers shared by the benchmark scripts (not part of the benchgate package)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig, load_config

RESULTS = Path(__file__).resolve().parent / "results"


def spread_pct(values: Sequence[float]) -> float:
    """(max - min) / median, in percent: how far apart repeated measurements land."""
    return 100 * (max(values) - min(values)) / statistics.median(values)


def cv_pct(values: Sequence[float]) -> float:
    return 100 * statistics.stdev(values) / statistics.mean(values)


def ms(values: Sequence[float]) -> str:
    return " ".join(f"{1e3 * v:.1f}" for v in values)


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(successes: int, n: int) -> str:
    """ "k/n = p% [low, high]" with the Wilson 95% interval."""
    low, high = wilson(successes, n)
    return f"{successes}/{n} = {100 * successes / max(n, 1):.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def base_config(root: Path, workload: str = "powerwork:make_workload", **gate: Any) -> RunConfig:
    """The gate's defaults at world size 1, with `workload`, no MLflow and baselines under `root`."""
    return load_config(
        overrides={
            "bench.workload": workload,
            "bench.world_sizes": [1],
            "gate.baseline_dir": root / "baselines",
            "tracking.enabled": False,
            **{f"gate.{k}": v for k, v in gate.items()},
        }
    )


def inject_slowdown(
    base: list[float], cand: list[float], change: float, every: int, rng: random.Random
) -> list[float]:
    """The candidate's steps of a real A/A round made slower so that the round's tokens/s changes by
    `change` (-0.1: -10%): every step alike (every=1), or only every `every`-th step, at a random phase."""
    total = sum(cand)
    extra = total / (1.0 + change) - total
    if every == 1:
        return [t * (1.0 + extra / total) for t in cand]
    phase = rng.randrange(every)
    hit = sum(cand[phase::every])
    return [t * (1.0 + extra / hit) if i % every == phase else t for i, t in enumerate(cand)]


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
