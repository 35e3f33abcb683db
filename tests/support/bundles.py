"""Synthetic result bundles for the gate's checks: two world sizes of seeded step times, an eval, and a
noise history 0.5% apart (what tests/unit/checks/test_compare.py judges, and the tests built on its
comparisons)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchgate.results.bundle import Bundle

PROFILE = "cpu-Test-x2_torch2.13.0"


def bench(
    ws: int,
    step_s: float,
    seed: int,
    n: int = 60,
    noise: float = 0.02,
    loss_slope: float = -0.01,
    memory_mib: float = 400.0,
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    times = list(step_s * (1 + noise * rng.standard_normal(n)))
    tokens = 512 * ws
    return {
        "workload": "w",
        "world_size": ws,
        "precision": "fp32",
        "unit": "tokens",
        "tokens_per_step_global": tokens,
        "memory": {"peak_bytes": memory_mib * 2**20},
        "mfu": {"dense_6n": None, "attention_aware": None},
        "samples": {
            "step_time_s": times,
            "tokens_per_s": [tokens / t for t in times],
            "loss": list(3.0 + loss_slope * np.arange(n) + 0.01 * rng.standard_normal(n)),
        },
    }


def evaluation(perplexity: float = 2.4, facts: float = 31.25) -> dict[str, Any]:
    return {
        "settings": {"train_steps": 250, "seed": 1},
        "perplexity": perplexity,
        "probes": {"facts": {"accuracy_pct": facts}, "count": {"accuracy_pct": 0.0}},
    }


def bundle(
    seed: int, step_s: float = 0.1, step_s_ws2: float = 0.11, profile: str = PROFILE, **changes: Any
) -> Bundle:
    result = Bundle(
        path=Path(f"/runs/{seed}"),
        env={"machine_profile": profile},
        metrics={1: bench(1, step_s, seed), 2: bench(2, step_s_ws2, seed + 100)},
        eval=evaluation(),
    )
    # Three earlier baseline runs 0.5% apart: the run-to-run noise the screen judges by (the figures
    # baseline._run_p50s records: the p50 for the report, the capped mean step time for the screen).
    result.history = [
        {
            "p50": {
                str(ws): {"step_time_s": s * f, "mean_step_time_s": s * f}
                for ws, s in ((1, step_s), (2, step_s_ws2))
            }
        }
        for f in (0.995, 1.0, 1.005)
    ]
    for key, value in changes.items():
        if key == "eval":
            result.eval = value
        elif key.startswith("ws"):
            ws = int(key[2])
            result.metrics[ws] = value
    return result


def counting(b: Bundle, unit: str | None) -> Bundle:
    """`b` as a workload with `unit` writes it (None: a metrics file written before units were recorded)."""
    for ws, metrics in list(b.metrics.items()):
        b.metrics[ws] = {k: v for k, v in metrics.items() if k != "unit"} | ({"unit": unit} if unit else {})
    return b
