"""A new user's first hour, end to end: their own workload, an int argument, a trial run on main.

`benchgate run --workload my_bench:make_workload --workload-arg hidden=48` through the local pipeline
(kfp.local, real torchrun): the argument reaches the factory as the int 48, where a float would fail
as a tensor size. The short trial run with eval off on a clean main does not become the baseline, and
says why and how to force it; forcing it says what the baseline is made of, and that the eval was
skipped because the workload has no logits.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchgate.kit.files import read_json

# As a user writes one: a square weight whose side is `hidden`. torch.empty(48.0, 48.0) raises.
WORKLOAD = """
import torch
import torch.nn.functional as F
from torch import nn

from benchgate.workloads.base import FlopsPerToken


class Square(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden, hidden))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return x @ self.weight


class HiddenBench:
    tokens_per_step = 8

    def __init__(self, hidden):
        self.hidden = hidden
        self.name = f"hidden-{hidden}"

    def build_model(self, device):
        return Square(self.hidden).to(device)

    def make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.2)

    def make_batch(self, generator, device):
        return torch.randn(8, self.hidden, generator=generator).to(device)

    def forward(self, model, batch):
        return model(batch)

    def loss(self, output, batch):
        return F.mse_loss(output, batch)  # learns the identity: the loss falls every step

    def flops_per_token(self):
        return FlopsPerToken(dense_6n=6 * self.hidden**2, attention_aware=6 * self.hidden**2)


def make_workload(hidden):
    return HiddenBench(hidden)
"""
FAST = ["--steps", "6", "--warmup", "1", "--world-sizes", "1", "--no-trace", "--no-tracking"]


def run(repo: Path, out: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "benchgate", "run", "--workload", "my_bench:make_workload"),
            *("--workload-arg", "hidden=48", *FAST, "--out", out, "--baseline-dir", "baselines", *args),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )


def said_by(done: subprocess.CompletedProcess[str]) -> str:
    """The terminal output with its line wrapping undone (a long path wraps a message)."""
    return " ".join(done.stdout.split())


@pytest.mark.slow
def test_a_users_int_argument_and_trial_run_on_main(repo: Path) -> None:
    (repo / "my_bench.py").write_text(WORKLOAD, encoding="utf-8")
    for args in (["add", "-A"], ["commit", "-q", "-m", "my bench"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    trial = run(repo, "out-trial", "--no-eval")
    assert trial.returncode == 0, trial.stdout + trial.stderr
    log = (repo / "out-trial" / "logs" / "pipeline.log").read_text(encoding="utf-8")
    # The argument stays an int on its way through the pipeline (the log's timestamps may hold "48.0").
    assert '"workload_args": "{\\"hidden\\": 48}"' in log
    assert '\\"hidden\\": 48.0' not in log and '"hidden": 48.0' not in log
    assert read_json(repo / "out-trial" / "config.json")["bench"]["workload_args"] == {"hidden": 48}
    said = said_by(trial)
    # Nothing listed that the run did not leave, and the skipped eval said so.
    assert f"results: {repo / 'out-trial'}/ (compare.json, metrics-ws*.json) pipeline run:" in said
    assert "eval skipped: eval.enabled is false" in said
    # A clean main whose timing passed, but eval was off: not the baseline, with why and how to force it.
    assert "baseline not written: the run had eval off (eval.enabled = false)" in said
    assert "run again with --update-baseline" in said
    assert not (repo / "baselines").exists()

    forced = run(repo, "out-forced", "--update-baseline")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    said = said_by(forced)
    assert "eval skipped: the workload has no eval hook: it has no `logits` method" in said
    assert "(compare.json, metrics-ws*.json, eval.json (skipped))" in said
    made_of = "6 steps at world size 1, eval skipped"
    assert f"(the first baseline of this profile, --update-baseline: {made_of})" in said
    (meta,) = (repo / "baselines").glob("*/hidden-48/baseline.json")
    assert {k: read_json(meta)[k] for k in ("steps", "world_sizes", "eval")} == {
        "steps": 6,
        "world_sizes": [1],
        "eval": "skipped",
    }
