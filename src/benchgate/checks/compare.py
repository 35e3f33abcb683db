"""Baseline vs current: one Check row per metric, and a verdict CI can act on.

Timing is one row per world size ("tokens/s (ws=N)": step time and tokens/s are the same samples). It is
decided by the stored-baseline screen (checks/screen.py): run-level figures judged by the run-to-run
noise measured over the profile's earlier baselines; FAIL or PASS only with confidence, else UNKNOWN.
Where the base code can be checked out, a row the screen did not PASS is decided again by interleaved
A/B (ab/decision.py); `ab/rows.py` turns those decisions into rows.
A run of the baseline's own commit from a clean tree with the same fingerprints is unchanged code:
its timing rows PASS as such (decided_by "unchanged"), and it may enter the noise history.
Memory and scaling efficiency use plain thresholds (WARN); the eval's rows are judged by seeds and by
paired item flips (checks/quality.py): another seed is another model. The loss rows (checks/loss.py):
a run whose loss diverged FAILs where the baseline trains; a loss that rises over the measured window
FAILs even without a baseline, and one that falls more slowly than the baseline's beyond tolerance FAILs,
both by autocorrelation-aware intervals.
Runs that measured different things (device, precision, tokens per step, threads) are refused
(comparable.py), never judged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from benchgate.checks import loss, quality, scaling, screen
from benchgate.checks.comparable import check_comparable
from benchgate.config import Tolerances
from benchgate.kit import stats
from benchgate.measure import fingerprint
from benchgate.measure.device_state import THROTTLED_FRACTION
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import SCALING, TIMING, Check, Comparison, Status, load_comparison
from benchgate.results.figures import MFU_CONVENTIONS, rate_name, rate_unit, run_rate, scaling_efficiency

# The comparison's data types live in `comparison`; callers may import them from here too.
__all__ = [
    "TIMING",
    "Check",
    "Comparison",
    "compare",
    "load_comparison",
    "scaling_efficiency",
    "scaling_row",
    "unchanged_code",
    "without_reachable_baseline",
]


UNCHANGED_RULE = (
    "unchanged code: a run of the baseline's own commit, from a clean tree, with the same fingerprints "
    "(benchgate, packages, bench configuration) measures the baseline's code, and its timing PASSes as such"
)


def unchanged_code(baseline: Bundle | None, current: Bundle) -> bool:
    """The current run measured the baseline's own code: the same commit from a clean tree, with the same
    fingerprints (benchgate, packages, configuration). Any timing difference is then run-to-run noise."""
    if baseline is None:
        return False
    base_git, cur_git = baseline.env.get("git", {}), current.env.get("git", {})
    base_prints, cur_prints = fingerprint.compared(baseline, current)  # packages: what the benches loaded
    known = set(fingerprint.NAMES)
    return bool(
        cur_git.get("commit")
        and cur_git.get("commit") == base_git.get("commit")
        and cur_git.get("dirty") is False
        and base_git.get("dirty") is False
        and isinstance(base_prints, dict)
        and isinstance(cur_prints, dict)
        and known <= set(base_prints) & set(cur_prints)  # unknown is not "the same"
        and not fingerprint.differing(base_prints, cur_prints)
    )


def _timing_check(
    ws: int,
    base: dict[str, Any],
    cur: dict[str, Any],
    tol: Tolerances,
    history: Bundle,
    unchanged: bool = False,
) -> Check:
    result = screen.screen(
        base["samples"],
        cur["samples"],
        history.history_figures(ws),
        tol.throughput_drop_pct,
        tol.confidence,
    )
    base_rate = run_rate(base)
    cur_rate = run_rate(cur)
    notes = [result.reason, f"decided on the {result.figure} over {result.history_runs} earlier runs"]
    status, decided_by = result.status, "screen"
    rule = screen.rule_text(tol.throughput_drop_pct, tol.confidence)
    if unchanged:
        notes.insert(0, f"the baseline's own commit and setup: unchanged code (screen: {result.status})")
        status, decided_by = "PASS", "unchanged"
        # The footnote starts with the rule that decided; the screen's figures stay in the note.
        rule = UNCHANGED_RULE
    if result.noise_pct is not None:
        notes.append(f"run-to-run noise {result.noise_pct:.1f}%")
    if result.host_change_pct is not None:
        raw = stats.relative_change_pct(base_rate, cur_rate)
        host = result.host_change_pct
        notes.append(f"raw {raw:+.1f}%, drift-reference kernel time {host:+.1f}% (the host)")
    return Check(
        name=f"{rate_name(cur)} (ws={ws})",
        unit=rate_unit(cur),
        current=cur_rate,
        baseline=base_rate,
        change=result.change_pct,
        ci_low=result.ci_low_pct,
        ci_high=result.ci_high_pct,
        rule=rule,
        status=status,
        note="; ".join(notes),
        metric=TIMING,
        world_size=ws,
        decided_by=decided_by,
        tolerance=tol.throughput_drop_pct,
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
    """Judge `current` against `baseline` within `tol`: one Check row per metric and world size.

    Timing rows are decided by the stored-baseline screen (an A/B, which needs the base code, is a later
    stage's); memory, scaling efficiency, the loss and the eval have rows of their own. Without a
    baseline the rows that need one read NEW. Runs that cannot be compared (another machine profile or
    workload, another precision or tokens per step) are a BaselineError (exit 2), never a verdict.
    For example::

        from benchgate import compare, load_bundle, load_config

        tolerances = load_config().gate.tolerances
        comparison = compare(load_bundle(Path("baseline")), load_bundle(Path("benchgate-out")), tolerances)
        print(comparison.verdict, comparison.exit_code)
    """
    notes = check_comparable(baseline, current) if baseline is not None else []
    result = Comparison(current.machine_profile, current.workload, str(baseline.path) if baseline else None)
    result.notes.extend(notes)
    if baseline is None:
        result.notes.append(
            f"no baseline for machine profile {current.machine_profile!r} and workload {current.workload!r}: "
            "nothing to compare against; only checks that need no baseline are gated"
        )
    unchanged = unchanged_code(baseline, current)
    for ws, cur in sorted(current.metrics.items()):
        base = baseline.metrics.get(ws) if baseline else None
        result.checks.extend(_bench_checks(ws, base, cur, tol, baseline, unchanged))
    result.checks.extend(_scaling_checks(baseline, current, tol))
    result.checks.extend(quality.eval_checks(baseline, current, tol, result.notes))
    return result


def _bench_checks(
    ws: int,
    base: dict[str, Any] | None,
    cur: dict[str, Any],
    tol: Tolerances,
    history: Bundle | None,
    unchanged: bool = False,
) -> list[Check]:
    checks = []
    if base is None or history is None:
        rate = run_rate(cur)
        note = "no baseline at this world size"
        checks.append(
            Check(
                f"{rate_name(cur)} (ws={ws})",
                rate_unit(cur),
                rate,
                status="NEW",
                note=note,
                metric=TIMING,
                world_size=ws,
            )
        )
        checks.append(
            Check(f"peak memory (ws={ws})", "MiB", cur["memory"]["peak_bytes"] / 2**20, status="NEW")
        )
    else:
        checks.append(_timing_check(ws, base, cur, tol, history, unchanged))
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
    for estimator, convention in MFU_CONVENTIONS.items():
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
                    note=f"derived from tokens/s; {convention}",
                )
            )
    checks.extend(loss.loss_checks(ws, cur, base, tol))  # divergence, slope: checks/loss.py
    checks.extend(_device_checks(ws, base, cur, tol))
    return checks


def _device_checks(ws: int, base: dict[str, Any] | None, cur: dict[str, Any], tol: Tolerances) -> list[Check]:
    """The GPUs' energy per trained token against the baseline's (WARN beyond tolerance), and whether a
    GPU was throttled while it measured (WARN: the timing rows then measured a slowed GPU). Rows only
    where the bench read NVML (the metrics' device_state, written by measure/device.py)."""
    state = cur.get("device_state") or {}
    if not state.get("available"):
        return []
    base_state = (base or {}).get("device_state") or {}
    if not base_state.get("available"):
        base_state = {}
    checks = []
    name, energy = f"energy per token (ws={ws})", state.get("energy_j_per_token")
    base_energy = base_state.get("energy_j_per_token")
    if energy is not None and base_energy is not None:
        limit = tol.energy_per_token_increase_pct
        rule = f"WARN if increase > {limit:g}%"
        figures = 1e3 * base_energy, 1e3 * energy
        checks.append(_threshold_check(name, "mJ/token", *figures, limit, "WARN", rule))
    elif energy is not None:
        note = "no baseline at this world size" if base is None else "the baseline has no energy figure"
        checks.append(Check(name, "mJ/token", 1e3 * energy, status="NEW", note=note))
    measured, throttled = state["windows_measured"], state["throttled_windows"]
    if measured:
        base_measured = base_state.get("windows_measured")
        causes = ", ".join(state["throttled_by"])
        checks.append(
            Check(
                f"throttled windows (ws={ws})",
                "%",
                100 * throttled / measured,
                baseline=100 * base_state["throttled_windows"] / base_measured if base_measured else None,
                change_unit="",
                rule=f"WARN if a GPU was throttled: power or thermal capping over "
                f"{THROTTLED_FRACTION:.0%} of its window, or a power cap, thermal or hardware slowdown seen",
                status="WARN" if throttled else "PASS",
                note=f"{throttled} of {measured} windows (one per rank's GPU) throttled"
                + (f": {causes}" if throttled else ""),
            )
        )
    return checks


def _history_efficiencies(baseline: Bundle, n: int) -> list[float]:
    """Scaling efficiency of each earlier baseline run: mean step time at ws=1 over that at ws=N (the
    global tokens per step at N are N times those at 1)."""
    one, many = baseline.history_figures(1), baseline.history_figures(n)
    return (
        [
            a["mean_step_time_s"] / b["mean_step_time_s"]
            for a, b in zip(one, many, strict=False)
            if a.get("mean_step_time_s") and b.get("mean_step_time_s")
        ]
        if len(one) == len(many)
        else []
    )


def scaling_row(
    name: str, efficiency: float, base_efficiency: float, result: scaling.ScalingResult, tol: Tolerances
) -> Check:
    # From A/B rounds (ab/rows.apply_ab_scaling), the two efficiencies are the A/B's pair: the row is
    # decided by the A/B, and the written comparison shows the pair beside the run's (checks/paired.py).
    by_ab = result.how.startswith("A/B at both world sizes")  # scaling.from_ab's words
    return Check(
        name,
        "%",
        100 * efficiency,
        baseline=100 * base_efficiency,
        change=result.change_pts,
        change_unit="pts",
        ci_low=result.ci_low_pts,
        ci_high=result.ci_high_pts,
        rule=scaling.rule_text(tol.scaling_efficiency_drop_points, tol.confidence),
        status=result.status,
        note=result.how,
        metric=SCALING,
        decided_by="ab" if by_ab else "",
        tolerance=tol.scaling_efficiency_drop_points,
    )


def _scaling_checks(baseline: Bundle | None, current: Bundle, tol: Tolerances) -> list[Check]:
    cur = scaling_efficiency(current.metrics)
    if cur is None:
        return []
    n, efficiency = cur
    name = f"scaling efficiency (1->{n})"
    base = scaling_efficiency(baseline.metrics) if baseline else None
    if base is None or base[0] != n or baseline is None:
        return [Check(name, "%", 100 * efficiency, status="NEW", metric=SCALING)]
    result = scaling.from_history(
        base[1],
        efficiency,
        _history_efficiencies(baseline, n),
        tol.scaling_efficiency_drop_points,
        tol.confidence,
    )
    return [scaling_row(name, efficiency, base[1], result, tol)]
