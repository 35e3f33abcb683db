"""Workload source as a repository under test would hold it, for tests that commit it to a git
repository of their own and load it from that checkout."""

# A minimal real workload: a linear layer on random batches (workloads/base.py's protocol).
TINY_WORKLOAD = """
import torch
import torch.nn.functional as F
from torch import nn


class Tiny:
    name = "tiny"
    tokens_per_step = 8

    def build_model(self, device):
        return nn.Linear(8, 8).to(device)

    def make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=1e-3)

    def make_batch(self, generator, device):
        return torch.randn(8, 8, generator=generator).to(device)

    def forward(self, model, batch):
        return model(batch)

    def loss(self, output, batch):
        return F.mse_loss(output, batch)


def make_workload():
    return Tiny()
"""
