"""Baseline vs current: one Check row per metric, and a verdict CI can act on.

Timing is one row per world size ("tokens/s (ws=N)": step time and tokens/s are the same samples). It is
decided by the stored-baseline screen (verdict.screen): run-level figures judged by the run-to-run
noise measured over the profile's earlier baselines; FAIL or PASS only with confidence, else UNKNOWN.
Where the base code can be checked out, a row the screen did not PASS is decided again by interleaved
A/B (verdict.ab, `apply_ab`), and that decision replaces the screen's.
Memory and scaling efficiency use plain thresholds (WARN); eval numbers are deterministic, so a change
beyond tolerance is real and FAILs. The loss slope is checked on the current run alone: a loss that
rises significantly over the measured window FAILs even without a baseline.
Runs that measured different things (device, precision, tokens per step, threads) are refused
(comparable.py), never judged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from benchgate import stats
from benchgate.comparable import check_comparable
from benchgate.comparison import TIMING, Check, Comparison, Status, load_comparison
from benchgate.config import Tolerances
from benchgate.results import Bundle
from benchgate.verdict import ab, screen

# The comparison's data types live in `comparison`; callers may import them from here too.
__all__ = [
    "TIMING",
    "Check",
    "Comparison",
    "apply_ab",
    "compare",
    "load_comparison",
    "scaling_efficiency",
    "undecided_world_sizes",
    "without_reachable_baseline",
]


def _timing_check(
    ws: int, base: dict[str, Any], cur: dict[str, Any], tol: Tolerances, history: Bundle
) -> Check:
    result = screen.screen(
        base["samples"],
        cur["samples"],
        history.history_figures(ws),
        tol.throughput_drop_pct,
        tol.confidence,
    )
    base_rate = stats.percentile(base["samples"]["tokens_per_s"], 50)
    cur_rate = stats.percentile(cur["samples"]["tokens_per_s"], 50)
    notes = [result.reason, f"decided on the {result.figure} over {result.history_runs} earlier runs"]
    if result.noise_pct is not None:
        notes.append(f"run-to-run noise {result.noise_pct:.1f}%")
    if result.host_change_pct is not None:
        raw = stats.relative_change_pct(base_rate, cur_rate)
        host = result.host_change_pct
        notes.append(f"raw p50 {raw:+.1f}%, drift-reference kernel time {host:+.1f}% (the host)")
    return Check(
        name=f"tokens/s (ws={ws})",
        unit="tok/s",
        current=cur_rate,
        baseline=base_rate,
        change=result.change_pct,
        ci_low=result.ci_low_pct,
        ci_high=result.ci_high_pct,
        rule=screen.rule_text(tol.throughput_drop_pct, tol.confidence),
        status=result.status,
        note="; ".join(notes),
        metric=TIMING,
        world_size=ws,
        decided_by="screen",
    )


def _threshold_check(
    name: str,
    unit: str,
    base: float,
    cur: float,
    limit: float,
    status_beyond: Status,
    rule: str,
    points: bool = False,
    higher_is_better: bool = False,
) -> Check:
    change = cur - base if points else stats.relative_change_pct(base, cur)
    worse_by = -change if higher_is_better else change
    return Check(
        name=name,
        unit=unit,
        current=cur,
        baseline=base,
        change=change,
        change_unit="pts" if points else "%",
        rule=rule,
        status=status_beyond if worse_by > limit else "PASS",
    )


def _loss_slope_check(
    ws: int, metrics: dict[str, Any], baseline: dict[str, Any] | None, tol: Tolerances
) -> Check:
    fit = stats.linear_slope(metrics["samples"]["loss"], confidence=tol.confidence)
    base_slope = None
    if baseline is not None:
        base_slope = stats.linear_slope(baseline["samples"]["loss"], confidence=tol.confidence).slope
    rising = fit.ci_low > tol.loss_slope_max
    return Check(
        name=f"loss slope (ws={ws})",
        unit="nats/step",
        current=fit.slope,
        baseline=base_slope,
        change_unit="",
        ci_low=fit.ci_low,
        ci_high=fit.ci_high,
        rule=f"FAIL if slope > {tol.loss_slope_max:g} with {tol.confidence:.0%} confidence",
        status="FAIL" if rising else "PASS",
        note="loss rises over the measured window" if rising else "",
    )


def scaling_efficiency(metrics: dict[int, dict[str, Any]]) -> tuple[int, float] | None:
    """tokens/s(N) / (N x tokens/s(1)) for the largest N, from the p50s; None without ws=1 and N > 1."""
    multi = [ws for ws in metrics if ws > 1]
    if 1 not in metrics or not multi:
        return None
    n = max(multi)
    one = stats.percentile(metrics[1]["samples"]["tokens_per_s"], 50)
    many = stats.percentile(metrics[n]["samples"]["tokens_per_s"], 50)
    return n, many / (n * one)


def without_reachable_baseline(comparison: Comparison, why: str) -> Comparison:
    """No baseline in the store, and MLflow (which may hold one) unreachable: rows that would read NEW
    (nothing to compare with, as on a profile's first run) read UNKNOWN instead. A first run and a
    run that merely cannot see its baseline look alike here, and only the first may pass unjudged."""
    note = f"no baseline here, and MLflow is unreachable ({why}): one may exist there"
    checks = [
        replace(c, status="UNKNOWN", note="; ".join(filter(None, [c.note, "baseline unreachable"])))
        if c.status == "NEW"
        else c
        for c in comparison.checks
    ]
    return replace(comparison, checks=checks, notes=[*comparison.notes, note])


def compare(baseline: Bundle | None, current: Bundle, tol: Tolerances) -> Comparison:
    notes = check_comparable(baseline, current) if baseline is not None else []
    result = Comparison(current.machine_profile, current.workload, str(baseline.path) if baseline else None)
    result.notes.extend(notes)
    if baseline is None:
        result.notes.append(
            f"no baseline for machine profile {current.machine_profile!r} and workload {current.workload!r}: "
            "nothing to compare against; only checks that need no baseline are gated"
        )
    for ws, cur in sorted(current.metrics.items()):
        base = baseline.metrics.get(ws) if baseline else None
        result.checks.extend(_bench_checks(ws, base, cur, tol, baseline))
    result.checks.extend(_scaling_checks(baseline, current, tol))
    result.checks.extend(_eval_checks(baseline, current, tol, result.notes))
    return result


def _bench_checks(
    ws: int, base: dict[str, Any] | None, cur: dict[str, Any], tol: Tolerances, history: Bundle | None
) -> list[Check]:
    samples = cur["samples"]
    checks = []
    if base is None or history is None:
        rate = stats.percentile(samples["tokens_per_s"], 50)
        note = "no baseline at this world size"
        checks.append(
            Check(f"tokens/s (ws={ws})", "tok/s", rate, status="NEW", note=note, metric=TIMING, world_size=ws)
        )
        checks.append(
            Check(f"peak memory (ws={ws})", "MiB", cur["memory"]["peak_bytes"] / 2**20, status="NEW")
        )
    else:
        checks.append(_timing_check(ws, base, cur, tol, history))
        checks.append(
            _threshold_check(
                f"peak memory (ws={ws})",
                "MiB",
                base["memory"]["peak_bytes"] / 2**20,
                cur["memory"]["peak_bytes"] / 2**20,
                tol.memory_increase_pct,
                "WARN",
                f"WARN if increase > {tol.memory_increase_pct:g}%",
            )
        )
    for estimator in ("dense_6n", "attention_aware"):
        value = cur.get("mfu", {}).get(estimator)
        if value is not None:
            base_value = (base or {}).get("mfu", {}).get(estimator)
            checks.append(
                Check(
                    f"MFU {estimator} (ws={ws})",
                    "%",
                    100 * value,
                    baseline=None if base_value is None else 100 * base_value,
                    status="INFO",
                    note="derived from tokens/s",
                )
            )
    if len(samples["loss"]) >= 3:
        checks.append(_loss_slope_check(ws, cur, base, tol))
    return checks


def _scaling_checks(baseline: Bundle | None, current: Bundle, tol: Tolerances) -> list[Check]:
    cur = scaling_efficiency(current.metrics)
    if cur is None:
        return []
    n, efficiency = cur
    name = f"scaling efficiency (1->{n})"
    base = scaling_efficiency(baseline.metrics) if baseline else None
    if base is None or base[0] != n:
        return [Check(name, "%", 100 * efficiency, status="NEW")]
    return [
        _threshold_check(
            name,
            "%",
            100 * base[1],
            100 * efficiency,
            tol.scaling_efficiency_drop_points,
            "WARN",
            f"WARN if drop > {tol.scaling_efficiency_drop_points:g} pts",
            points=True,
            higher_is_better=True,
        )
    ]


def _eval_checks(baseline: Bundle | None, current: Bundle, tol: Tolerances, notes: list[str]) -> list[Check]:
    cur = current.eval
    if cur is None or "skipped" in cur:
        return []
    base = baseline.eval if baseline else None
    same_run = base is not None and all(base.get(k) == cur.get(k) for k in ("settings", "device"))
    if base is not None and ("skipped" in base or not same_run):
        notes.append(
            "eval settings or device differ from the baseline's (or it has no eval): eval not compared"
        )
        base = None
    checks = []
    if base is None:
        checks.append(Check("perplexity (held-out)", "", cur["perplexity"], status="NEW"))
    else:
        checks.append(
            _threshold_check(
                "perplexity (held-out)",
                "",
                base["perplexity"],
                cur["perplexity"],
                tol.perplexity_increase_pct,
                "FAIL",
                f"FAIL if increase > {tol.perplexity_increase_pct:g}% (deterministic)",
            )
        )
    for probe, outcome in sorted(cur["probes"].items()):
        name = f"probe {probe} accuracy"
        base_probe = base["probes"].get(probe) if base else None
        if base_probe is None:
            checks.append(Check(name, "%", outcome["accuracy_pct"], status="NEW"))
            continue
        checks.append(
            _threshold_check(
                name,
                "%",
                base_probe["accuracy_pct"],
                outcome["accuracy_pct"],
                tol.probe_accuracy_drop_points,
                "FAIL",
                f"FAIL if drop > {tol.probe_accuracy_drop_points:g} pts",
                points=True,
                higher_is_better=True,
            )
        )
    return checks


def undecided_world_sizes(comparison: Comparison) -> list[int]:
    """World sizes whose timing the screen did not PASS: where an A/B run decides instead."""
    return sorted(
        {
            c.world_size
            for c in comparison.checks
            if c.metric == TIMING
            and c.decided_by == "screen"
            and c.status in ("FAIL", "UNKNOWN")
            and c.world_size is not None
        }
    )


def apply_ab(comparison: Comparison, outcome: dict[str, Any], tol: Tolerances, ab_config: Any) -> Comparison:
    """Replace a world size's screened timing row with its A/B decision (`outcome`: an ab.json)."""
    ws = int(outcome["world_size"])
    decision = outcome["decision"]
    rounds = outcome["rounds"]
    screened = comparison.timing(ws)
    notes = [
        f"{decision['reason']}; A/B vs {outcome['base']['description']}, {decision['rounds']} rounds "
        f"in {outcome['seconds']:.0f} s"
    ]
    if decision["round_sd_pct"] is not None:
        notes.append(
            f"round-to-round sd {decision['round_sd_pct']:.1f}%, minimum detectable slowdown "
            f"{decision['mde_pct']:.1f}% (80% power)"
        )
    if screened is not None:
        notes.append(f"screen: {screened.status} ({_change_text(screened.change)})")
    row = Check(
        name=f"tokens/s (ws={ws})",
        unit="tok/s",
        current=_median([r["candidate_tokens_per_s_p50"] for r in rounds]),
        baseline=_median([r["base_tokens_per_s_p50"] for r in rounds]),
        change=decision["change_pct"],
        ci_low=decision["ci_low_pct"],
        ci_high=decision["ci_high_pct"],
        rule=ab.rule_text(
            tol.throughput_drop_pct, tol.confidence, ab_config.min_rounds, ab_config.max_rounds
        ),
        status=decision["status"],
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
    )


def _median(values: list[float]) -> float | None:
    return stats.percentile(values, 50) if values else None


def _change_text(change: float | None) -> str:
    return "no change figure" if change is None else f"{change:+.1f}%"
