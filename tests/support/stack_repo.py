"""A git repository of a small workload whose every step costs real compute: `Stack`, equal layers of
Linear + GELU, where more layers make every step slower (no sleeps). Gate, backfill and bisect tests
build their commit histories with it."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from benchgate.ab.runner import Side
from benchgate.ab.stage import stage_ab
from benchgate.checks.stage import stage_compare
from benchgate.config import RunConfig
from benchgate.measure.launch import stage_bench
from benchgate.measure.source import checkout, import_paths
from benchgate.measure.stage import stage_env
from benchgate.results.comparison import Comparison

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


def checked_out_side(repo: Path, sha: str, role: str, root: Path) -> Side:
    """`sha` checked out afresh under `root/role`, as the A/B stage's task checks out each side."""
    tree = checkout(repo.as_uri(), sha, root / role)
    return Side(f"{role} {sha[:12]}", sha, tuple(import_paths(tree)))


def gate_run_through_ab(
    config: RunConfig, repo: Path, run_dir: Path, base: Side, candidate: Side
) -> Comparison:
    """The candidate's run as a gate run measures it (env, bench at ws=1, compare: no baseline, NEW),
    then the A/B stage of `base` against `candidate` at ws=1."""
    stage_env(run_dir, cwd=repo, branch="main", config=config)
    stage_bench(config, 1, run_dir, source_paths=(repo,))
    stage_compare(config, run_dir)
    return stage_ab(config, run_dir, [1], base, candidate)
