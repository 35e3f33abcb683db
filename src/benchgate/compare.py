"""Baseline vs current: one Check row per metric, and a verdict CI can act on.

Timing (tokens/s, step time) compares the per-step samples, not two numbers: the change is the ratio of
medians with a block-bootstrap confidence interval, and it counts as a regression only when it is beyond
the tolerance AND a Mann-Whitney U test finds the two sample sets different at the configured confidence
(asv and Chromium Pinpoint decide the same way). Beyond tolerance but not significant is a WARN.
Host interference (a busy neighbour core) slows some steps, while a code regression slows every step,
the fastest included; so a FAIL also needs the fast steps (p10 step time, p90 tokens/s) to be worse
beyond tolerance (the argument of Chen & Revels 2016, "Robust benchmarking in noisy environments").
When both runs timed the drift reference (a fixed CPU kernel after each step, see bench.py), a FAIL
also needs the step time divided by the reference to be worse: if the host slowed as much as the step
did, the code did not get slower.
Per-step samples only see noise within one run; on a shared host whole runs drift by more than the
tolerance. So once the baseline store holds MIN_HISTORY earlier runs of this profile, a FAIL must also
lie outside their one-sided prediction interval (lookback noise floor, as conbench does); with fewer
runs the row says that the run-to-run noise is still unknown. Even so, one run can be hit by a burst
that looks exactly like a regression, so the runner re-runs a world size whose timing FAILed and keeps
the FAIL only if the second run fails the same check (`merge_confirmation`; Chromium Pinpoint likewise
adds attempts before it decides).
Memory and scaling efficiency use plain thresholds (WARN); eval numbers are deterministic, so a change
beyond tolerance is real and FAILs. The loss slope is checked on the current run alone: a loss that
rises significantly over the measured window FAILs even without a baseline.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from benchgate import stats
from benchgate.config import Tolerances
from benchgate.errors import EXIT_PASS, EXIT_REGRESSION, BaselineError
from benchgate.results import Bundle

Status = Literal["PASS", "WARN", "FAIL", "NEW", "INFO"]
SEVERITY = {"INFO": 0, "NEW": 0, "PASS": 0, "WARN": 1, "FAIL": 2}
MIN_HISTORY = 3
# (sample series, row label, unit, tolerance field, higher is better) of the timing checks.
TIMING_METRICS = (
    ("tokens_per_s", "tokens/s p50", "tok/s", "throughput_drop_pct", True),
    ("step_time_s", "step time p50", "s", "step_time_increase_pct", False),
)


@dataclass(frozen=True)
class Check:
    name: str
    unit: str
    current: float | None
    baseline: float | None = None
    change: float | None = None  # percent, or points for *_points rows
    change_unit: str = "%"
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    rule: str = ""
    status: Status = "PASS"
    note: str = ""
    # For timing checks: the sample series compared ("tokens_per_s", "step_time_s") and its world size.
    metric: str = ""
    world_size: int | None = None


@dataclass
class Comparison:
    machine_profile: str
    workload: str | None
    baseline_path: str | None
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Literal["PASS", "WARN", "FAIL"]:
        worst = max((SEVERITY[c.status] for c in self.checks), default=0)
        return ("PASS", "WARN", "FAIL")[worst]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.verdict == "FAIL" else EXIT_PASS

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "machine_profile": self.machine_profile,
            "workload": self.workload,
            "baseline_path": self.baseline_path,
            "notes": self.notes,
            "checks": [asdict(c) for c in self.checks],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        """The inverse of to_dict: a pipeline task reads the comparison an earlier task wrote."""
        return cls(
            data["machine_profile"],
            data["workload"],
            data["baseline_path"],
            [Check(**c) for c in data["checks"]],
            list(data["notes"]),
        )


def noise_bound(history: list[float], confidence: float, higher_is_better: bool) -> float | None:
    """One-sided prediction bound for the next run's p50 given earlier runs' p50s; None if too few."""
    n = len(history)
    if n < MIN_HISTORY:
        return None
    mean = sum(history) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in history) / (n - 1))
    margin = stats.t_quantile(confidence, n - 1) * sd * math.sqrt(1 + 1 / n)
    return mean - margin if higher_is_better else mean + margin


def _timing_check(
    ws: int,
    metric: str,
    name: str,
    unit: str,
    base: list[float],
    cur: list[float],
    tolerance_pct: float,
    higher_is_better: bool,
    confidence: float,
    history: list[float],
    references: tuple[list[float], list[float]] | None = None,
) -> Check:
    b50, c50 = stats.percentile(base, 50), stats.percentile(cur, 50)
    change = stats.relative_change_pct(b50, c50)
    fast_q = 90 if higher_is_better else 10
    fast_change = stats.relative_change_pct(stats.percentile(base, fast_q), stats.percentile(cur, fast_q))
    fast_worse = (-fast_change if higher_is_better else fast_change) > tolerance_pct
    low, high = stats.ratio_ci(base, cur, confidence=confidence)
    _, p_value = stats.mann_whitney_u(base, cur)
    worse_by = -change if higher_is_better else change
    significant = p_value < 1 - confidence
    direction = "drop" if higher_is_better else "increase"
    drift_worse, host_note = True, ""
    if references is not None:
        base_ref, cur_ref = references
        # Per step: time / host speed; for a rate, rate x reference time. Both remove the host's drift.
        if higher_is_better:
            base_norm = [v * r for v, r in zip(base, base_ref, strict=True)]
            cur_norm = [v * r for v, r in zip(cur, cur_ref, strict=True)]
        else:
            base_norm = [v / r for v, r in zip(base, base_ref, strict=True)]
            cur_norm = [v / r for v, r in zip(cur, cur_ref, strict=True)]
        corrected = stats.relative_change_pct(stats.percentile(base_norm, 50), stats.percentile(cur_norm, 50))
        drift_worse = (-corrected if higher_is_better else corrected) > tolerance_pct
        host = stats.relative_change_pct(stats.percentile(base_ref, 50), stats.percentile(cur_ref, 50))
        host_note = f"host {host:+.1f}%, drift-corrected {corrected:+.1f}%"
    bound = noise_bound(history, confidence, higher_is_better)
    within_noise = bound is not None and (c50 >= bound if higher_is_better else c50 <= bound)
    if worse_by > tolerance_pct and fast_worse and drift_worse and significant and not within_noise:
        status: Status = "FAIL"
    elif worse_by > tolerance_pct:
        status = "WARN"
    else:
        status = "PASS"
    notes = []
    if status == "WARN":
        if not significant:
            notes.append(f"not significant (p={p_value:.2g})")
        elif not fast_worse:
            notes.append(f"only slow steps slowed (p{fast_q} {fast_change:+.1f}%): interference or stalls")
        elif not drift_worse:
            notes.append("the host slowed down too")
        else:
            notes.append("within run-to-run noise")
    elif status == "PASS" and -worse_by > tolerance_pct and significant:
        notes.append("improved")
    if host_note:
        notes.append(host_note)
    if bound is None:
        notes.append(f"run-to-run noise unknown ({len(history)}/{MIN_HISTORY} baseline runs)")
    else:
        notes.append(f"noise floor {stats.relative_change_pct(b50, bound):+.1f}% ({len(history)} runs)")
    note = "; ".join(notes)
    return Check(
        name=name,
        unit=unit,
        current=c50,
        baseline=b50,
        change=change,
        ci_low=(low - 1) * 100,
        ci_high=(high - 1) * 100,
        p_value=p_value,
        rule=f"FAIL if p50 and p{fast_q} {direction} > {tolerance_pct:g}%, p < {1 - confidence:.2g}",
        status=status,
        note=note,
        metric=metric,
        world_size=ws,
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


def _refuse_mismatch(baseline: Bundle, current: Bundle) -> None:
    if baseline.machine_profile != current.machine_profile:
        raise BaselineError(
            f"baseline {baseline.path} is of machine profile {baseline.machine_profile!r}, this run is "
            f"{current.machine_profile!r}: results from different machines are never compared"
        )
    if baseline.workload != current.workload:
        raise BaselineError(
            f"baseline {baseline.path} is of workload {baseline.workload!r}, this run is {current.workload!r}"
        )
    for ws, cur in current.metrics.items():
        base = baseline.metrics.get(ws)
        if base is None:
            continue
        for key in ("precision", "tokens_per_step_global"):
            if base[key] != cur[key]:
                raise BaselineError(
                    f"baseline {baseline.path}: metrics-ws{ws}.json has {key}={base[key]!r}, "
                    f"this run has {cur[key]!r}: not comparable"
                )


def compare(baseline: Bundle | None, current: Bundle, tol: Tolerances) -> Comparison:
    if baseline is not None:
        _refuse_mismatch(baseline, current)
    result = Comparison(current.machine_profile, current.workload, str(baseline.path) if baseline else None)
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
    if base is None:
        for metric, label, unit, _, _ in TIMING_METRICS:
            note = "no baseline at this world size" if metric == "tokens_per_s" else ""
            p50 = stats.percentile(samples[metric], 50)
            checks.append(Check(f"{label} (ws={ws})", unit, p50, status="NEW", note=note))
        checks.append(
            Check(f"peak memory (ws={ws})", "MiB", cur["memory"]["peak_bytes"] / 2**20, status="NEW")
        )
    else:
        references = _references(base, cur)
        for metric, label, unit, tolerance_field, higher_is_better in TIMING_METRICS:
            checks.append(
                _timing_check(
                    ws,
                    metric,
                    f"{label} (ws={ws})",
                    unit,
                    base["samples"][metric],
                    samples[metric],
                    getattr(tol, tolerance_field),
                    higher_is_better=higher_is_better,
                    confidence=tol.confidence,
                    history=history.history_p50s(ws, metric) if history else [],
                    references=references,
                )
            )
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


def _references(base: dict[str, Any], cur: dict[str, Any]) -> tuple[list[float], list[float]] | None:
    """Both runs' drift-reference series, when both timed one for every step."""
    base_ref, cur_ref = base["samples"].get("reference_s"), cur["samples"].get("reference_s")
    if not base_ref or not cur_ref:
        return None
    if len(base_ref) != len(base["samples"]["step_time_s"]) or len(cur_ref) != len(
        cur["samples"]["step_time_s"]
    ):
        return None
    return list(base_ref), list(cur_ref)


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


def timing_failures(comparison: Comparison) -> list[int]:
    """World sizes with a failing timing check: the ones a confirmation run repeats."""
    return sorted(
        {c.world_size for c in comparison.checks if c.status == "FAIL" and c.world_size is not None}
    )


def merge_confirmation(first: Comparison, second: Comparison) -> Comparison:
    """Keep a timing FAIL only where the second run of that world size fails the same check too."""
    again = {(c.metric, c.world_size): c for c in second.checks if c.metric}
    checks = []
    for check in first.checks:
        if check.status == "FAIL" and check.metric:
            other = again.get((check.metric, check.world_size))
            if other is not None and other.status == "FAIL" and other.change is not None:
                check = replace(check, note=f"{check.note}; confirmed by a second run ({other.change:+.1f}%)")
            else:
                seen = (
                    "no result"
                    if other is None or other.change is None
                    else f"{other.change:+.1f}% {other.status}"
                )
                check = replace(
                    check, status="WARN", note=f"not confirmed by a second run ({seen}); {check.note}"
                )
        checks.append(check)
    return Comparison(first.machine_profile, first.workload, first.baseline_path, checks, list(first.notes))
