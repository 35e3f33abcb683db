"""A git repository of a small workload whose every step costs real compute: `Stack`, equal layers of
Linear + GELU, where more layers make every step slower (no sleeps). Gate, backfill and bisect tests
build their commit histories with it."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

# A stack of equal layers: adding layers adds real compute to every step (no sleeps).
WORKLOAD = """
import torch
import torch.nn.functional as F
from torch import nn

from benchgate.workloads.base import FlopsPerToken

LAYERS = {layers}


class Stack:
    name = "stack"
    tokens_per_step = 32

    def build_model(self, device):
        # A deep stack's gradients reach subnormal floats, which some CPUs (Intel Xeon here) compute
        # several times slower: 88 layers took 8x as long as 40, not 2.2x. Flushed to zero, every layer
        # costs the same, as these tests assume.
        torch.set_flush_denormal(True)
        layers = [nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(LAYERS)]
        return nn.Sequential(*layers).to(device)

    def make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=1e-3)

    def make_batch(self, generator, device):
        return torch.randn(32, 256, generator=generator).to(device)

    def forward(self, model, batch):
        return model(batch)

    def loss(self, output, batch):
        return F.mse_loss(output, batch)

    def flops_per_token(self):
        return FlopsPerToken(dense_6n=6 * LAYERS * 256 * 256, attention_aware=6 * LAYERS * 256 * 256)


def make_workload():
    {body}
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, message: str, layers: int = 12, body: str = "return Stack()") -> str:
    (repo / "stackwork.py").write_text(WORKLOAD.format(layers=layers, body=body), encoding="utf-8")
    (repo / "NOTES.txt").write_text(message, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def stack_history(repo: Path, layers: Sequence[int]) -> list[str]:
    """One commit per entry of `layers` (the stack's depth at that commit), oldest first; their SHAs."""
    return [commit(repo, f"commit {i}: {n} layers", layers=n) for i, n in enumerate(layers)]
