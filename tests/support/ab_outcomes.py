"""A/B outcomes as the A/B runner writes its ab.json, from round figures (log throughput changes), and
rounds no look can decide: what the next-steps and CI-summary tests apply to comparisons."""

from __future__ import annotations

import math
from typing import Any

from benchgate.ab import decision as ab
from benchgate.ab.runner import ABOutcome, Side

TOL, CONF = 5.0, 0.95
BASE = Side("base 0123abcd", "0123abcd" * 5)
CANDIDATE = Side("working tree")


def outcome(changes: list[float], out_of_time: bool = False, ws: int = 1) -> dict[str, Any]:
    """An ab.json as ab_runner writes it, from round figures (log throughput changes)."""
    decision = ab.decide(changes, TOL, CONF, 4, 27, out_of_time=out_of_time)
    rounds = [
        {"change_log": c, "base_tokens_per_s": 1000.0, "candidate_tokens_per_s": 1000.0 * math.exp(c)}
        for c in changes
    ]
    return ABOutcome(ws, decision, rounds, 600.0).to_dict(BASE, CANDIDATE)


def straddling(n: int) -> list[float]:
    """Rounds whose interval stays across -5%: no look can decide them."""
    return [math.log(0.95) + 0.05 * (-1) ** i for i in range(n)]
