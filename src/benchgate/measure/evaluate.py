"""Deterministic eval on the bundled shard: a short fixed-seed training run, then perplexity and probes.

Determinism: fixed seeds, greedy decoding, a fixed byte tokenizer, deterministic algorithms and, on
CPU, a fixed thread count (`eval.threads`, 1 unless set, not the machine's core count): the same code
and inputs give the same numbers bit for bit on the same kind of CPU. On a GPU host the eval runs on
the GPU (a GPT-2-sized model would take minutes on the host CPU) with cuBLAS's deterministic workspace
and TF32 off, so it repeats on the same GPU model, which the machine profile pins. Every setting that
changes the numbers is written into eval.json, and compare only compares evals with equal settings.

The eval scores the model as the bench trains it: at the bench's precision (bench.precision: fp32, or
bf16 autocast around the forward passes), and on eval.batch_size windows per step, which a suite sets
to its variant's batch size. An fp32 and a bf16 variant thus get their own perplexities.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchgate.config import EvalConfig, RunConfig
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kit.cpus import cpu_budget, threads_within
from benchgate.kit.files import write_json
from benchgate.kit.progress import count_step
from benchgate.measure.gpu_required import require_visible_gpu
from benchgate.measure.seeds import StoredEval, plan_more_seeds, stored_baseline_eval
from benchgate.workloads.base import Workload, load_workload
from benchgate.workloads.contract import missing_eval_hook
from benchgate.workloads.shard import Probe, Shard, decode, encode, load_shard, sample_windows
from benchgate.workloads.training import autocast_context, resolve_device, resolve_precision


@contextlib.contextmanager
def deterministic_torch(n_threads: int) -> Iterator[None]:
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    was_tf32 = torch.backends.cuda.matmul.allow_tf32
    # cuBLAS reads this when it creates its handle; without it deterministic mode rejects GPU matmuls.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(n_threads)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(was_deterministic)
        torch.backends.cuda.matmul.allow_tf32 = was_tf32


def _logits(workload: Workload, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    return workload.logits(model, tokens)  # type: ignore[attr-defined,no-any-return]


def train_on_shard(
    workload: Workload, shard: Shard, settings: EvalConfig, device: torch.device, precision: str = "fp32"
) -> tuple[nn.Module, list[float]]:
    torch.manual_seed(settings.seed)
    model = workload.build_model(device)
    optimizer = workload.make_optimizer(model)
    generator = torch.Generator().manual_seed(settings.seed)
    losses = []
    for step in range(settings.train_steps):
        batch = sample_windows(shard.train, settings.batch_size, settings.seq_len + 1, generator).to(device)
        with autocast_context(precision, device):  # the forward pass and loss only, as the bench's step
            logits = _logits(workload, model, batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        if not torch.isfinite(loss):
            raise RunFailedError(f"eval: training loss is {loss.item()} at step {step}")
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        count_step(step + 1, settings.train_steps)  # the eval task's progress (kit/progress.py)
    return model, losses


@torch.no_grad()
def heldout_perplexity(
    workload: Workload, model: nn.Module, tokens: torch.Tensor, seq_len: int
) -> tuple[float, int]:
    """Byte-level perplexity over non-overlapping windows of the held-out part."""
    device = next(model.parameters()).device
    tokens = tokens.to(device)
    total_nll, count = 0.0, 0
    for start in range(0, tokens.numel() - 1, seq_len):
        chunk = tokens[start : start + seq_len + 1]
        if chunk.numel() < 2:
            break
        logits = _logits(workload, model, chunk[:-1].unsqueeze(0))
        nll = F.cross_entropy(logits[0], chunk[1:], reduction="sum")
        total_nll += float(nll)
        count += chunk.numel() - 1
    return math.exp(total_nll / count), count


@torch.no_grad()
def greedy_complete(workload: Workload, model: nn.Module, prompt: str, n_bytes: int, seq_len: int) -> str:
    # Probes start a line, as every sentence in the shard does.
    tokens = encode("\n" + prompt).to(next(model.parameters()).device)
    for _ in range(n_bytes):
        logits = _logits(workload, model, tokens[-seq_len:].unsqueeze(0))
        tokens = torch.cat([tokens, logits[0, -1].argmax().view(1)])
    return decode(tokens[-n_bytes:])


def run_probes(
    workload: Workload, model: nn.Module, probes: dict[str, list[Probe]], seq_len: int
) -> dict[str, Any]:
    results = {}
    for name, items in probes.items():
        outputs = [greedy_complete(workload, model, p.prompt, len(p.target.encode()), seq_len) for p in items]
        # Each item's correctness, in the probe set's order: compare pairs items across evals and seeds.
        hits = [o == p.target for o, p in zip(outputs, items, strict=True)]
        results[name] = {
            "accuracy_pct": 100.0 * sum(hits) / len(items),
            "correct": sum(hits),
            "total": len(items),
            "outputs": outputs,
            "items": hits,
        }
    return results


def evaluate_seed(
    workload: Workload, shard: Shard, settings: EvalConfig, device: torch.device, precision: str
) -> dict[str, Any]:
    """One seed: train on the shard from `settings.seed`, then perplexity and probes (deterministic)."""
    started = time.perf_counter()
    model, losses = train_on_shard(workload, shard, settings, device, precision)
    model.eval()
    with autocast_context(precision, device):
        perplexity, n_tokens = heldout_perplexity(workload, model, shard.heldout, settings.seq_len)
        probes = run_probes(workload, model, shard.probes, settings.seq_len)
    return {
        "seed": settings.seed,
        "final_train_loss": losses[-1],
        "perplexity": perplexity,
        "heldout_tokens": n_tokens,
        "probes": probes,
        "wall_s": time.perf_counter() - started,
    }


def _seed_entry(one: dict[str, Any]) -> dict[str, Any]:
    """A seed's line in eval.json's `seeds`: its figures and per-item correctness (not its outputs)."""
    probes = {n: {"accuracy_pct": p["accuracy_pct"], "items": p["items"]} for n, p in one["probes"].items()}
    kept = ("seed", "perplexity", "final_train_loss", "wall_s")
    return {**{k: one[k] for k in kept}, "probes": probes}


def stage_eval(
    config: RunConfig,
    out: Path,
    *,
    machine_profile: str | None = None,
    baseline_eval: dict[str, Any] | None = None,
    refresh_store: Callable[[str, str], str] | None = None,
) -> dict[str, Any]:
    """The eval stage: writes eval.json (skipped, with the reason, when the workload has no eval hook).

    The first seed (eval.seed) always runs, and its figures are eval.json's top level. More seeds run
    only when it is out of band of the baseline's eval (measure/seeds.py): `baseline_eval`, else the
    stored baseline of `machine_profile` (none looked up without one). eval.json's `seeds` lists each
    seed's figures and `more_seeds` says why as many ran. `refresh_store(machine_profile, workload)`,
    where given, brings the store's baseline up to date first (the task passes MLflow's: a fresh runner's
    store is empty) and returns a sentence for the log."""
    workload = load_workload(config.bench.workload, dict(config.bench.workload_args))
    stored_name = config.bench.name or workload.name
    result: dict[str, Any] = {"schema_version": 1, "stage": "eval", "workload": stored_name}
    missing = missing_eval_hook(workload)
    if missing is not None:
        # Said in eval.json and, from there, in the comparison's notes and the terminal (stages).
        result["skipped"] = missing
        write_json(out, result)
        return result
    # eval.threads, capped at the usable CPUs; eval.json's settings say how many ran (config.py).
    settings = config.eval.model_copy(update={"threads": threads_within(config.eval.threads, cpu_budget())})
    if settings.seq_len > workload.eval_seq_len:  # type: ignore[attr-defined]
        raise ConfigError(
            f"eval.seq_len: got {settings.seq_len}, but workload {workload.name} accepts at most "
            f"{workload.eval_seq_len} tokens"  # type: ignore[attr-defined]
        )
    require_visible_gpu(config.bench.device)  # a GPU node whose torch sees no GPU stops here (exit 2)
    device = resolve_device(config.bench.device)
    precision = resolve_precision(config.bench.precision, device)
    started = time.perf_counter()
    shard = load_shard()
    # Every eval ran in fp32 before evals followed the bench's precision: said only where it is another,
    # so that a stored fp32 eval and a new one still have equal settings and are compared. eval.seeds is
    # left out: how many seeds may run changes no seed's figures, and stored evals predate it.
    shown_precision = {} if precision == "fp32" else {"precision": precision}
    written = {**settings.model_dump(mode="json", exclude={"seeds"}), **shown_precision}
    if baseline_eval is None and refresh_store is not None and machine_profile is not None:
        print(f"benchgate eval: {refresh_store(machine_profile, stored_name)}", flush=True)
    stored = (
        StoredEval(baseline_eval, where="the given baseline eval")
        if baseline_eval is not None
        else stored_baseline_eval(config.gate.baseline_dir, machine_profile, stored_name)
    )
    with deterministic_torch(settings.threads):
        first = evaluate_seed(workload, shard, settings, device, precision)
        plan = plan_more_seeds(config, first, stored, written, str(device))
        more = [
            evaluate_seed(workload, shard, settings.model_copy(update={"seed": s}), device, precision)
            for s in plan.extra
        ]
    result.update(
        {
            "settings": written,
            "device": str(device),
            **{k: first[k] for k in ("final_train_loss", "perplexity", "heldout_tokens", "probes")},
            "seeds": [_seed_entry(one) for one in (first, *more)],
            "more_seeds": plan.why,
            "wall_s": time.perf_counter() - started,
        }
    )
    write_json(out, result)
    return result
