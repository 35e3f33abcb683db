"""Counted FLOPs against 6N and attention-aware, and what counting costs.

For the reference GPT (tiny and small) and a Hugging Face GPT-2 built from a configuration (random
weights, nothing downloaded), one training step is counted as the bench counts it
(`benchgate.workloads.counted_flops.count_training_step`) and set beside the two estimators written
by hand: 6N over the non-embedding parameters (Kaplan) and 6N + 12·L·d·T (PaLM, full attention).
The HF model runs twice: with GPT-2's default attention dropout (0.1), under which torch's
`scaled_dot_product_attention` on CPU falls back to its math path (matmuls: full attention is
executed and counted), and with dropout 0 (the flash kernel: causal, counted as half).

FLOPs per token do not depend on the batch size, so gpt-small is counted with a batch of 1 (1024
tokens) to keep the CPU step short. Counting time is the wall time of `count_training_step` (batch,
forward, loss, backward under FlopCounterMode), in this process after a first count. What the count
costs a bench is read from real benches of gpt-tiny (`mfu.counting.seconds` of their metrics: the
first count in the worker, before its warmup), beside their median step time.

    python benchmarks/counted_flops.py [--skip-small] [--launches 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchgate.workloads.counted_flops import CountedFlops, count_training_step
from benchgate.workloads.flops import ModelShape, flops_per_token_6nd, flops_per_token_attention
from benchgate.workloads.gpt import SIZES, GPTWorkload

CPU = torch.device("cpu")
HF = {"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 256, "n_positions": 256}
HF_BATCH = 4


class HFGPT2:
    """A Hugging Face GPT-2 from its configuration as a workload, just enough to be counted."""

    def __init__(self, attn_pdrop: float) -> None:
        from transformers import GPT2Config, GPT2LMHeadModel

        # Byte-level: the special tokens inside the 256-entry vocabulary.
        self.config = GPT2Config(**HF, attn_pdrop=attn_pdrop, bos_token_id=0, eos_token_id=0)
        self.model_class = GPT2LMHeadModel
        self.seq_len = HF["n_positions"]
        self.tokens_per_step = HF_BATCH * self.seq_len
        self.name = f"hf-gpt2 (attn_pdrop={attn_pdrop:g})"

    def build_model(self, device: torch.device) -> nn.Module:
        return self.model_class(self.config).to(device)  # type: ignore[no-any-return]

    def make_batch(self, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        return torch.randint(0, 256, (HF_BATCH, self.seq_len + 1), generator=generator).to(device)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch[:, :-1]).logits  # type: ignore[no-any-return]

    def loss(self, output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), batch[:, 1:].reshape(-1))

    def shape(self, model: nn.Module) -> ModelShape:
        embeddings = sum(
            p.numel() for n, p in model.named_parameters() if n.endswith(("wte.weight", "wpe.weight"))
        )
        n_params = sum(p.numel() for p in model.parameters()) - embeddings  # the head is tied to wte
        d, heads = HF["n_embd"], HF["n_head"]
        return ModelShape(n_params, HF["n_layer"], heads, d // heads, self.seq_len)


def count(workload: Any) -> tuple[CountedFlops, float, float]:
    torch.manual_seed(0)
    model = workload.build_model(CPU)
    if isinstance(workload, HFGPT2):
        shape = workload.shape(model)
        dense, aware = flops_per_token_6nd(shape), flops_per_token_attention(shape)
    else:
        declared = workload.flops_per_token()
        dense, aware = declared.dense_6n, declared.attention_aware
    return count_training_step(workload, model, CPU, seed=0), dense, aware


def bench_counts(launches: int) -> list[dict[str, float]]:
    """What the count cost inside real benches: gpt-tiny at ws=1, as `benchgate run` launches it."""
    from benchgate.config import load_config
    from benchgate.kit.files import read_json
    from benchgate.measure.launch import stage_bench

    overrides = {"bench.workload_args": {"size": "tiny"}, "bench.steps": 10, "bench.warmup": 2}
    config = load_config(overrides={**overrides, "tracking.enabled": False})
    costs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(launches):
            metrics = read_json(stage_bench(config, 1, Path(tmp) / str(i)))
            step_s = metrics["step_time_s"]["p50"]
            costs.append({"count_s": metrics["mfu"]["counting"]["seconds"], "step_s": step_s})
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-small", action="store_true", help="leave out gpt-small (the slowest count)")
    parser.add_argument(
        "--launches", type=int, default=3, help="gpt-tiny benches to read the count's cost from"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)

    costs = bench_counts(args.launches)
    for cost in costs:
        print(f"gpt-tiny bench (ws=1): count {cost['count_s']:.2f} s, median step {cost['step_s']:.3f} s")
    median_count = statistics.median(c["count_s"] for c in costs)
    median_ratio = statistics.median(c["count_s"] / c["step_s"] for c in costs)
    print(f"median over {len(costs)} benches: count {median_count:.2f} s = {median_ratio:.1f} median steps")

    workloads: list[Any] = [GPTWorkload("tiny", SIZES["tiny"])]
    if not args.skip_small:
        workloads.append(GPTWorkload("small", dataclasses.replace(SIZES["small"], batch_size=1)))
    workloads += [HFGPT2(attn_pdrop=0.1), HFGPT2(attn_pdrop=0.0)]
    count(workloads[0])  # one-off costs of a first count (lazy imports) fall here, not in the first row
    rows = []
    for workload in workloads:
        result, dense, aware = count(workload)
        name = workload.name
        rows.append((name, dense, aware, result))
        print(
            f"{name}: 6N {dense:,.0f}  attention-aware {aware:,.0f}  counted {result.per_token:,.0f} "
            f"(attention kernels {result.attention_per_token:,.0f})  {result.seconds:.2f} s  "
            f"by op {', '.join(f'{op} {v / result.tokens:,.0f}' for op, v in result.by_op.items())}",
            flush=True,
        )
    print()
    header = ["model", "tokens counted", "6N", "attention-aware", "counted", "counted / 6N"]
    header += ["counted / attention-aware", "counting time"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, dense, aware, result in rows:
        counted = result.per_token
        cells = [name, f"{result.tokens:,}", f"{dense / 1e6:,.2f} M", f"{aware / 1e6:,.2f} M"]
        cells += [f"{counted / 1e6:,.2f} M", f"{counted / dense:.3f}", f"{counted / aware:.3f}"]
        cells += [f"{result.seconds:.2f} s"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
