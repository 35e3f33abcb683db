"""A workload without `flops_per_token()` through a whole gate run: its FLOPs are counted.

`benchgate run` through the local pipeline, real torchrun at world sizes 1 and 2 (2 CPU ranks over
gloo: rank 0 counts one step before the DDP wrap, while rank 1 waits in it), logged to a real MLflow
server. The metrics files have the counted FLOPs and no 6N, the report shows the three estimators
with their conventions, and MLflow has the counted figure. An A/B round's launches do not count.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from benchgate.ab.runner import Side, run_round
from benchgate.kit.files import read_json

# A user's causal transformer of one block, with no FLOPs written by hand.
WORKLOAD = """
import torch
import torch.nn.functional as F
from torch import nn

D, HEADS, T, BATCH = 32, 2, 16, 4


class OneBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(256, D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.head = nn.Linear(D, 256, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens)
        b, t, d = x.shape
        q, k, v = (z.view(b, t, HEADS, d // HEADS).transpose(1, 2) for z in self.qkv(x).split(d, dim=2))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(x + self.proj(attn.transpose(1, 2).reshape(b, t, d)))


class OneBlockBench:
    name = "one-block"
    tokens_per_step = BATCH * T

    def build_model(self, device):
        return OneBlock().to(device)

    def make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def make_batch(self, generator, device):
        return torch.randint(0, 256, (BATCH, T + 1), generator=generator).to(device)

    def forward(self, model, batch):
        return model(batch[:, :-1])

    def loss(self, output, batch):
        return F.cross_entropy(output.reshape(-1, 256), batch[:, 1:].reshape(-1))


def make_workload():
    return OneBlockBench()
"""
D, T = 32, 16
# By hand, per token: 6 FLOPs per matmul weight (qkv, proj, head); causal attention as 7 products of
# T x D (2 forward, 5 backward with the recomputed scores), 2 FLOPs each, half of them computed.
MATMULS = 6 * (3 * D * D + D * D + D * 256)
ATTENTION = 7 * 2 * T * D // 2


@pytest.mark.slow
def test_a_workload_without_flops_per_token_gets_counted_flops(
    repo: Path, mlflow_server: str, tmp_path: Path
) -> None:
    (repo / "one_block.py").write_text(WORKLOAD, encoding="utf-8")
    for args in (["add", "-A"], ["commit", "-q", "-m", "one block"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "benchgate", "run", "--workload", "one_block:make_workload"),
            *("--steps", "6", "--warmup", "2", "--world-sizes", "1,2", "--no-eval", "--no-trace"),
            *("--tracking-uri", mlflow_server, "--out", "out", "--baseline-dir", "baselines"),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    # ws=1 and ws=2 count alike: at ws=2 both ranks count at once, through DDP, and their sum is per
    # token of the launch's step.
    ws1 = read_json(repo / "out" / "metrics-ws1.json")["mfu"]
    assert ws1["flops_per_token"]["counted"] == MATMULS + ATTENTION
    metrics = read_json(repo / "out" / "metrics-ws2.json")
    mfu = metrics["mfu"]
    assert mfu["flops_per_token"] == {
        "dense_6n": None,
        "attention_aware": None,
        "counted": float(MATMULS + ATTENTION),
    }
    counting = mfu["counting"]
    assert counting["attention_per_token"] == ATTENTION  # counted on CPU, and as causal
    assert counting["tokens"] == 2 * 4 * T and counting["ranks"] == 2  # the launch's step: both ranks
    assert counting["seconds"] > 0  # before the warmup: outside the timed steps and wall_s
    # No MFU without a peak (CPU), and no 6N for a workload that gives none.
    assert mfu["counted"] is None and mfu["dense_6n"] is None and "no peak for dtype 'fp32'" in mfu["note"]

    report = (repo / "out" / "report.html").read_text(encoding="utf-8")
    assert "<h2>FLOPs per token (ws=1)</h2>" in report
    assert f"<td>counted</td><td>{MATMULS + ATTENTION:,}</td><td>—</td>" in report
    assert "causal attention counted as executed (half)" in report
    assert "<td>dense_6n</td><td>—</td>" in report and "Kaplan" in report and "PaLM" in report

    run_id = read_json(repo / "out" / "published.json")["mlflow_run_id"]
    logged = MlflowClient(mlflow_server).get_run(run_id).data.metrics
    assert logged["ws2/counted_flops_per_token"] == MATMULS + ATTENTION
    assert not any(name.startswith("ws2/mfu_") for name in logged)  # never logged as zero


@pytest.mark.slow
def test_an_ab_round_does_not_count(config_factory: Any, tmp_path: Path) -> None:
    # Both sides of a real round (two torchrun launches taking turns): only step times are read from
    # them, so neither pays for a count.
    config = config_factory(bench={"steps": 4, "warmup": 1})
    figures = run_round(config, 1, tmp_path / "round", Side("base"), Side("candidate"), None, seed=0, steps=4)
    assert figures["pairs"] == 4
    for side in ("A", "B"):
        (metrics_file,) = (tmp_path / "round" / side).glob("metrics-ws1.json")
        mfu = read_json(metrics_file)["mfu"]
        assert mfu["counting"] == {"skipped": "an A/B round: only its step times are read"}
        assert mfu["flops_per_token"]["counted"] is None and mfu["flops_per_token"]["dense_6n"] == 6 * 272
