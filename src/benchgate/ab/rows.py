"""A/B decisions as comparison rows: which world sizes A/B must decide, and its outcome in their place.

An A/B decision (an ab.json) replaces the screen's timing row of its world size (the note names the
layout its rounds ran in, and why: ab/layout.py). Where the run's fingerprints (benchgate, loaded
packages, bench configuration) differ from the baseline run's, both A/B sides share the candidate's:
the decision is the code's all the same, and the setup's change is measured in a row of its own
(ab/environment.py). Where A/B ran at ws=1 and at N, the scaling-efficiency row is judged from its
rounds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any

from benchgate.ab import decision as ab
from benchgate.ab.error_rates import VerdictRates, verdict_rates
from benchgate.ab.layout import Layout
from benchgate.checks import scaling
from benchgate.checks.compare import scaling_row
from benchgate.config import Tolerances
from benchgate.measure import fingerprint
from benchgate.results.comparison import SCALING, TIMING, Check, Comparison


def undecided_world_sizes(comparison: Comparison, include_new: bool = False) -> list[int]:
    """World sizes whose timing the screen did not PASS: where an A/B run decides instead. With
    `include_new` (an explicit base commit), also those without a stored baseline (NEW) and those
    that are the stored baseline's own code: the question asked is "slower than that base?", which
    being the baseline's code does not answer."""
    undecided = {"FAIL", "UNKNOWN", "NEW"} if include_new else {"FAIL", "UNKNOWN"}
    deciders = {"screen", "", "unchanged"} if include_new else {"screen", ""}
    return sorted(
        {
            c.world_size
            for c in comparison.checks
            if c.metric == TIMING
            and c.world_size is not None
            and c.decided_by in deciders
            and (c.status in undecided or c.decided_by == "unchanged")
        }
    )


def apply_ab(
    comparison: Comparison,
    outcome: dict[str, Any],
    tol: Tolerances,
    ab_config: Any,
    unseen: list[str] | None = None,
) -> Comparison:
    """Replace a world size's screened timing row with its A/B decision (`outcome`: an ab.json).

    `unseen`: the fingerprints in which the run differs from its baseline run (fingerprint.differing).
    A/B holds them fixed on both sides, so its decision is the code's and the row keeps it; the note
    says so, and ab/environment.py measures the setup's change in a row of its own."""
    ws = int(outcome["world_size"])
    decision = outcome["decision"]
    rounds = outcome["rounds"]
    screened = comparison.timing(ws)
    notes = [
        f"{decision['reason']}; A/B vs {outcome['base']['description']}, {decision['rounds']} rounds "
        f"in {outcome['seconds']:.0f} s ({device_seconds(outcome):.0f} device-s)"
    ]
    if outcome.get("layout"):  # absent from ab.json files written before layouts could be chosen
        notes.append(Layout(outcome["layout"]["name"], outcome["layout"]["why"]).note())
    if decision["round_sd_pct"] is not None:
        notes.append(
            f"round-to-round sd {decision['round_sd_pct']:.1f}%, minimum detectable slowdown "
            f"{decision['mde_pct']:.1f}% (80% power); {rates_of(decision, tol, ab_config).clause()}"
        )
    if decision.get("capped_p") is not None:  # absent from ab.json files written before it was counted
        notes.append(
            f"stalls past the cap: candidate {decision['candidate_capped_steps']}, base "
            f"{decision['base_capped_steps']} (p={decision['capped_p']:.2g})"
        )
    notes.extend(_spread_notes(rounds))
    if screened is not None:
        notes.append(f"screen: {screened.status} ({_change_text(screened.change)})")
    status = decision["status"]
    if unseen:
        # Both sides ran this setup, so the decision is about the code and stands; what the setup did is
        # measured apart, in the environment row (ab/environment.py).
        notes.insert(
            0,
            f"{fingerprint.describe(unseen)}: A/B ran both sides on this setup and decided the code alone; "
            "the environment row measures the setup",
        )
    row = Check(
        # The screened row's labels where compare made one: they name the rate after the workload's unit.
        name=screened.name if screened is not None else f"tokens/s (ws={ws})",
        unit=screened.unit if screened is not None else "tok/s",
        current=_mean([_round_rate(r, "candidate") for r in rounds]),
        baseline=_mean([_round_rate(r, "base") for r in rounds]),
        change=decision["change_pct"],
        ci_low=decision["ci_low_pct"],
        ci_high=decision["ci_high_pct"],
        rule=_rule(outcome, tol, ab_config),
        status=status,
        note="; ".join(notes),
        metric=TIMING,
        world_size=ws,
        decided_by="ab",
    )
    checks = [row if c is screened else c for c in comparison.checks]
    if screened is None:
        checks.insert(0, row)
    return Comparison(
        comparison.machine_profile,
        comparison.workload,
        comparison.baseline_path,
        checks,
        list(comparison.notes),
        comparison.on_unknown,
        dict(comparison.attribution),
    )


def device_seconds(outcome: dict[str, Any]) -> float:
    """What the A/B cost: its seconds times the processes it kept alive (both sides' ranks when
    interleaved, one side's at a time when sequential)."""
    sides = 1 if (outcome.get("layout") or {}).get("name") == "sequential" else 2
    return float(outcome["seconds"]) * sides * int(outcome["world_size"])


def rates_of(decision: dict[str, Any], tol: Tolerances, ab_config: Any) -> VerdictRates:
    """The rule's error rates at this verdict's round sd and round budget (ab/error_rates.py): the rounds
    it had where its time budget ended it, else max_rounds."""
    timed_out = "gate.ab.max_seconds" in decision["reason"]
    return verdict_rates(
        decision["round_sd_pct"],
        tol.throughput_drop_pct,
        tol.confidence,
        ab_config.min_rounds,
        ab_config.max_rounds,
        rounds=decision["rounds"] if timed_out else None,
    )


# How the rule names its rounds (ab/decision.rule_text), and how a sequential round is made instead.
INTERLEAVED_ROUNDS = "rounds of alternating steps"
SEQUENTIAL_ROUNDS = "rounds of one launch per side (A B, then B A)"


def _rule(outcome: dict[str, Any], tol: Tolerances, ab_config: Any) -> str:
    """The rule that decided, naming the rounds as its layout made them: the rule is the same."""
    text = ab.rule_text(tol.throughput_drop_pct, tol.confidence, ab_config.min_rounds, ab_config.max_rounds)
    if (outcome.get("layout") or {}).get("name") == "sequential":
        text = text.replace(INTERLEAVED_ROUNDS, SEQUENTIAL_ROUNDS)
    return text


def _round_rate(figures: dict[str, Any], side: str) -> float:
    # Rounds saved before whole-round rates existed carry only the median step's rate.
    rate = figures.get(f"{side}_tokens_per_s", figures.get(f"{side}_tokens_per_s_p50"))
    return float(rate or 0.0)


def _spread_notes(rounds: list[dict[str, Any]]) -> list[str]:
    """Where a slowdown sits: the median step's change beside the total's, and the slowest steps' share."""
    medians = [r["median_change_log"] for r in rounds if "median_change_log" in r]
    notes = []
    if medians:
        notes.append(f"median step {100 * math.expm1(statistics.fmean(medians)):+.1f}% (diagnostic)")
    busy, worst = ab.idle_cpu_rounds(rounds)
    if busy:
        notes.append(
            f"the idle side used CPU in {busy} of {len(rounds)} rounds (up to {worst:.0%} of the measured "
            "side's time): a background thread competed with the timed steps"
        )
    throttled = [r for r in rounds if r.get("base_throttled_by") or r.get("candidate_throttled_by")]
    if throttled:
        causes = sorted(
            {
                c
                for r in throttled
                for c in (r.get("base_throttled_by") or []) + (r.get("candidate_throttled_by") or [])
            }
        )
        notes.append(
            f"GPU throttled ({', '.join(causes)}) in {len(throttled)} of {len(rounds)} rounds: turns cancel "
            "what slows both sides alike, not a cap that bit one side's steps"
        )
    spread = ab.concentration(rounds)
    if spread is not None:
        share, uniform = spread
        kind = "concentrated in few steps" if share > 2 * uniform + 0.1 else "spread over the steps"
        notes.append(
            f"slowdown {kind}: the slowest {ab.TAIL_SHARE:.0%} of steps carry {share:.0%} of it "
            f"(about {uniform:.0%} if every step slowed alike; see the trace)"
        )
    return notes


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _change_text(change: float | None) -> str:
    return "no change figure" if change is None else f"{change:+.1f}%"


def apply_ab_scaling(
    comparison: Comparison, outcomes: dict[int, dict[str, Any]], tol: Tolerances
) -> Comparison:
    """Where A/B ran at ws=1 and at the largest N, judge the efficiency change from their rounds."""
    row = next((c for c in comparison.checks if c.metric == SCALING), None)
    many = max((ws for ws in outcomes if ws > 1), default=None)
    if row is None or many is None or 1 not in outcomes:
        return comparison
    rates = {
        ws: [_round_rate(r, side) for r in outcomes[ws]["rounds"] for side in ("base",)] for ws in (1, many)
    }
    base_efficiency = statistics.fmean(rates[many]) / (many * statistics.fmean(rates[1]))
    result = scaling.from_ab(
        base_efficiency,
        [r["change_log"] for r in outcomes[1]["rounds"]],
        [r["change_log"] for r in outcomes[many]["rounds"]],
        tol.scaling_efficiency_drop_points,
        tol.confidence,
    )
    if result is None:
        return comparison
    efficiency = base_efficiency + result.change_pts / 100.0
    new_row = scaling_row(row.name, efficiency, base_efficiency, result, tol)
    checks = [new_row if c is row else c for c in comparison.checks]
    return replace(comparison, checks=checks)
