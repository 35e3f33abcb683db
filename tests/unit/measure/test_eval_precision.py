"""The eval scores the model as the bench trains it (measure/evaluate.py): at the bench's precision, so
that a suite's fp32 and bf16 variants each get their own perplexity. A byte bigram model keeps it to
seconds: the real eval stage, shard and probes, in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchgate.config import parse_config
from benchgate.kit.files import read_json
from benchgate.measure.evaluate import stage_eval


class Bigram:
    """The next byte from the last one: an embedding and a linear head, with the eval hook."""

    name = "bigram"
    tokens_per_step = 64
    eval_seq_len = 64

    def build_model(self, device: torch.device) -> nn.Module:
        return nn.Sequential(nn.Embedding(256, 32), nn.Linear(32, 256)).to(device)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=1e-2)

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        return torch.randint(0, 256, (4, 17), generator=generator).to(device)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch[:, :-1])  # type: ignore[no-any-return]

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.reshape(-1, 256), batch[:, 1:].reshape(-1))

    def logits(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return model(tokens)  # type: ignore[no-any-return]


def bigram() -> Bigram:
    return Bigram()


def evaluated(tmp_path: Path, precision: str) -> dict[str, Any]:
    config = parse_config(
        {
            "bench": {"workload": "test_eval_precision:bigram", "device": "cpu", "precision": precision},
            "eval": {"train_steps": 10},
        }
    )
    path = tmp_path / f"eval-{precision}.json"
    result = stage_eval(config, path)
    assert read_json(path) == result
    return result


def test_the_eval_runs_at_the_benchs_precision_and_says_so(tmp_path: Path) -> None:
    fp32, bf16 = evaluated(tmp_path, "fp32"), evaluated(tmp_path, "bf16")
    assert fp32["perplexity"] != bf16["perplexity"]  # bf16 autocast around the forward passes
    assert fp32["final_train_loss"] != bf16["final_train_loss"]
    # fp32 is what every eval ran in before: unsaid, so a stored fp32 eval keeps equal settings.
    assert "precision" not in fp32["settings"] and bf16["settings"]["precision"] == "bf16"
    assert {k: v for k, v in bf16["settings"].items() if k != "precision"} == fp32["settings"]
