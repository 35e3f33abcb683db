"""The "mfu" block of a bench's metrics: FLOPs per trained token by three estimators and the MFU of each.

    dense_6n          6N (Kaplan et al.): the non-embedding parameters' matmuls, from the workload's
                      own `flops_per_token()`
    attention_aware   6N + the attention products as full, non-causal attention (PaLM), from the same
    counted           one training step under torch's FlopCounterMode (`workloads/counted_flops.py`),
                      causal attention counted as the kernels execute it (half): every workload has it

The first two are None where the workload has no `flops_per_token()`; every MFU is None without a
known peak (CPU, an unlisted GPU, a precision other than bf16).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from benchgate.workloads.contract import declared_flops
from benchgate.workloads.counted_flops import combine_ranks, count_training_step
from benchgate.workloads.flops import PeakFlops, mfu
from benchgate.workloads.training import autocast_context


def count_flops_or_why(
    workload: Any, model: torch.nn.Module, device: torch.device, precision: str, seed: int
) -> dict[str, Any]:
    """The counted estimator's figures, or why there are none: counting is an extra figure, so a model
    the counter cannot follow still gets its timing (the reason goes into the metrics and stderr)."""
    try:
        counted = count_training_step(
            workload, model, device, seed, autocast=lambda: autocast_context(precision, device)
        )
    except Exception as e:  # the user's model under a dispatch mode: any failure only loses the count
        error = f"counting one training step under FlopCounterMode raised {type(e).__name__}: {e}"
        print(f"benchgate.measure.bench: {error}", file=sys.stderr, flush=True)
        return {"error": error}
    return counted.to_dict()


def launch_count(per_rank: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    """The launch's counted figures from every rank's `count_flops_or_why` (each rank counts its own
    work at once: `counted_flops.combine_ranks`), per token of the launch's step (`tokens`); a rank's
    reason where a rank has none."""
    for count in per_rank:
        if "skipped" in count or "error" in count:
            return count
    return combine_ranks(per_rank, tokens)


def mfu_block(
    workload: Any,
    counting: dict[str, Any],
    tokens_per_s: float,
    peak: PeakFlops | None,
    world_size: int,
    no_peak: str | None,
) -> dict[str, Any]:
    """FLOPs per token by each estimator (None where the workload has no `flops_per_token()` or the
    count failed) and the MFU of each against `peak` (None without a known peak: `no_peak` says why)."""
    declared = declared_flops(workload, f"bench.workload: {workload.name}")
    per_token: dict[str, float | None] = {
        "dense_6n": None if declared is None else declared.dense_6n,
        "attention_aware": None if declared is None else declared.attention_aware,
        "counted": counting.get("per_token"),
    }
    block: dict[str, Any] = {"flops_per_token": per_token, "peak": None if peak is None else vars(peak)}
    for estimator, flops in per_token.items():
        block[estimator] = None if flops is None else mfu(tokens_per_s, flops, peak, world_size)
    # Its cost in seconds, the attention's share and FLOPs by op; or why there is no count.
    block["counting"] = counting
    block["note"] = None if peak else no_peak
    return block
