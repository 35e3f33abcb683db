"""Eval workloads for benchgate's own tests: the reference GPT with one change each (tests/gate/
test_eval_seeds.py).

`extra_draw` builds the same model after drawing the random stream once more: a numerically neutral
commit (an unused buffer created before the model) whose eval trains another seed's model.
"""

from __future__ import annotations

import torch
from torch import nn

from benchgate.workloads.gpt import SIZES, GPTWorkload


class _ExtraDraw(GPTWorkload):
    def build_model(self, device: torch.device) -> nn.Module:
        self.unused = torch.rand(16)  # drawn before the weights: every weight after it differs
        return super().build_model(device)


def extra_draw(size: str = "tiny") -> GPTWorkload:
    return _ExtraDraw(size, SIZES[size])
