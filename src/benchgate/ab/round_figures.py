"""What a round records from its two sides' samples (metrics-ws<N>.json `samples`): the round figure and
its diagnostics (ab/decision.py), the capped steps (ab/rare.py), each side's tokens/s over the round,
its medians, every step's time, and what throttled each side's GPUs. The runner (ab/runner.py) writes
these into each round of ab.json, for interleaved and sequential rounds alike.
"""

from __future__ import annotations

from typing import Any

from benchgate.ab.decision import round_change, round_diagnostics
from benchgate.ab.rare import count_capped
from benchgate.kit import stats


def round_figures(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What every round records from the two sides' samples (metrics-ws<N>.json `samples`)."""
    return {
        "change_log": round_change(a["step_time_s"], b["step_time_s"]),
        **round_diagnostics(a["step_time_s"], b["step_time_s"]),
        **capped_steps(a["step_time_s"], b["step_time_s"]),
        "base_tokens_per_s": _rate(a),
        "candidate_tokens_per_s": _rate(b),
        "base_p50_s": stats.percentile(a["step_time_s"], 50),
        "candidate_p50_s": stats.percentile(b["step_time_s"], 50),
        "base_tokens_per_s_p50": stats.percentile(a["tokens_per_s"], 50),
        "candidate_tokens_per_s_p50": stats.percentile(b["tokens_per_s"], 50),
        "pairs": len(a["step_time_s"]),
        "base_step_s": a["step_time_s"],
        "candidate_step_s": b["step_time_s"],
    }


def capped_steps(base_step_s: list[float], candidate_step_s: list[float]) -> dict[str, int]:
    """Each side's steps beyond STALL_CAP times the round's median step (both sides' steps): the steps
    whose time `round_change` caps, counted so that a decision can tell a round carried by stalls
    (ab/rare.py tests them)."""
    base, candidate = count_capped(base_step_s, candidate_step_s)
    return {"base_capped_steps": base, "candidate_capped_steps": candidate}


def round_throttling(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What throttled each side's GPUs in this round (NVML's windows, measure/device_state.py): a round
    whose GPU was held down by its power cap or heat is flagged in the row's note. Nothing on CPU."""
    figures = {}
    for label, metrics in (("base", a), ("candidate", b)):
        state = metrics.get("device_state")
        if state and state.get("available"):
            figures[f"{label}_throttled_by"] = list(state.get("throttled_by") or [])
    return figures


def _rate(samples: dict[str, Any]) -> float:
    """tokens/s over a side's whole round: tokens over total time, as the round figure judges it."""
    tokens = sum(r * t for r, t in zip(samples["tokens_per_s"], samples["step_time_s"], strict=True))
    return float(tokens / sum(samples["step_time_s"]))
