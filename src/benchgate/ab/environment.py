"""The environment row: what a change of the run's setup did to speed, measured apart from the code.

Both A/B sides run this run's setup: its installed packages and interpreter, its benchgate, its bench
configuration (measure/fingerprint.py). Where those differ from the stored baseline run's, the A/B
decision is about the code alone and stands as it is; the setup's own change gets a row of its own,
"environment (ws=N)": the base code measured under the new setup (side A of the A/B, one tokens/s per
round) against the stored baseline's tokens/s (the base code, usually, under the old setup).

The interval counts the launch-to-launch noise. The baseline is one launch, each A round another, so
with y_i the log tokens/s of round i (n rounds, spread s) and b the baseline's, the change is
mean(y) - log b and its interval ± t(confidence, n-1) * s * sqrt(1/n + 1): the spread of one launch's
level around the mean of n, plus that of the baseline's one launch, which the rounds' spread also
measures (both are single launches on this machine). With one round there is no spread: the change
alone, no interval.

The row is never UNKNOWN or FAIL: nothing the code did is in it, and a person could not clear it but
by re-measuring the baseline, which the next promotion does anyway (publish/policy.py promotes a run on
main whose timing rows PASSed). It is INFO, and WARN where the environment made the base confidently
slower than the throughput tolerance (the upper bound below -tolerance): a torch bump that costs 10%
is worth a line in the verdict, but not a red gate for the commit that happened to carry it. A WARN
verdict still promotes, so the next commit is judged against the new setup.

Pure: the bundles and the ab.json are passed in.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchgate.config import Tolerances
from benchgate.kit import stats
from benchgate.measure import fingerprint
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import Check, Comparison
from benchgate.results.figures import rate_unit, run_rate

ENVIRONMENT = "tokens_per_s_environment"  # the row's metric; decided_by likewise names it
DECIDED_BY = "environment"
NOTE_START = "environment changed"  # the note's first words
MAX_LISTED = 6  # package changes named in a note; the rest are counted


@dataclass(frozen=True)
class Shift:
    """The base side's tokens/s under the new setup against the stored baseline's, in percent."""

    change_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    rounds: int
    round_sd_pct: float | None  # the spread of the rounds' log tokens/s, as a percentage


def environment_shift(rates: Sequence[float], baseline_rate: float, confidence: float) -> Shift | None:
    """The change of `rates` (one tokens/s per launch under the new setup) from `baseline_rate` (one
    launch under the old), with the interval of the module docstring; None without a positive rate."""
    logs = [math.log(r) for r in rates if r > 0]
    if not logs or not baseline_rate > 0:
        return None
    n = len(logs)
    shift = statistics.fmean(logs) - math.log(baseline_rate)
    if n < 2:
        return Shift(100 * math.expm1(shift), None, None, n, None)
    sd = statistics.stdev(logs)
    half = stats.t_quantile(1 - (1 - confidence) / 2, n - 1) * sd * math.sqrt(1 / n + 1)
    return Shift(
        100 * math.expm1(shift), 100 * math.expm1(shift - half), 100 * math.expm1(shift + half), n, 100 * sd
    )


def base_rates(outcome: dict[str, Any], tokens_per_step: float | None) -> list[float]:
    """Side A's tokens/s per round of an ab.json: `base_tokens_per_s` (tokens over the round's time), or
    from `base_step_s` for rounds saved without it."""
    rates = []
    for r in outcome["rounds"]:
        if r.get("base_tokens_per_s"):
            rates.append(float(r["base_tokens_per_s"]))
        elif r.get("base_step_s") and tokens_per_step:
            rates.append(tokens_per_step * len(r["base_step_s"]) / sum(r["base_step_s"]))
    return rates


def _package_changes(before: list[str], after: list[str]) -> list[str]:
    old = dict(p.split("==", 1) for p in before if "==" in p)
    new = dict(p.split("==", 1) for p in after if "==" in p)
    changes = [f"{n} {old[n]} -> {new[n]}" for n in sorted(old.keys() & new.keys()) if old[n] != new[n]]
    changes += [f"{n} {new[n]} added" for n in sorted(new.keys() - old.keys())]
    changes += [f"{n} {old[n]} gone" for n in sorted(old.keys() - new.keys())]
    return changes


def _packages_text(baseline: Bundle, current: Bundle) -> str:
    before = fingerprint.loaded_packages(baseline.metrics.values())
    after = fingerprint.loaded_packages(current.metrics.values())
    if before is None or after is None:
        return "the installed packages or the interpreter (the baseline run did not record which it loaded)"
    listed = _package_changes(before[1], after[1])
    if before[0] != after[0]:
        listed.insert(0, f"Python {before[0]} -> {after[0]}")
    if not listed:
        return "the loaded packages"
    more = len(listed) - MAX_LISTED
    shown = ", ".join(listed[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")
    return f"packages: {shown}"


def what_changed(names: list[str], baseline: Bundle, current: Bundle) -> str:
    """The differing fingerprints (fingerprint.differing) in words, naming the packages where known."""
    words = {
        "benchgate": "benchgate's harness or bundled workloads",
        "config": "the bench configuration",
    }
    parts = [_packages_text(baseline, current) if n == "packages" else words.get(n, f"{n}") for n in names]
    return "; ".join(parts)


def _rule(tol: Tolerances) -> str:
    return (
        "the base code under this run's setup (the A/B's base rounds) against the stored baseline run: "
        f"shown, not gated; WARN where the upper bound lies below -{tol.throughput_drop_pct:g}%"
    )


def environment_row(
    outcome: dict[str, Any], names: list[str], baseline: Bundle, current: Bundle, tol: Tolerances
) -> Check | None:
    """The environment row of one A/B (an ab.json) over differing fingerprints `names`; None where
    nothing differs or the stored baseline has no run at the A/B's world size."""
    ws = int(outcome["world_size"])
    stored = baseline.metrics.get(ws)
    if not names or stored is None:
        return None
    baseline_rate = run_rate(stored)
    rates = base_rates(outcome, stored.get("tokens_per_step_global"))
    found = environment_shift(rates, baseline_rate, tol.confidence)
    if found is None:
        return None
    span = (
        f" [{found.ci_low_pct:+.1f}, {found.ci_high_pct:+.1f}]"
        if found.ci_low_pct is not None and found.ci_high_pct is not None
        else " (one round: no interval)"
    )
    base = outcome.get("base") or {}
    notes = [
        f"{NOTE_START}: {found.change_pct:+.1f}%{span}: {what_changed(names, baseline, current)}",
        f"{base.get('description') or 'the base'} in {found.rounds} A/B rounds of this run's setup against "
        "the stored baseline run's one launch",
    ]
    if found.round_sd_pct is not None:
        notes.append(
            f"round-to-round sd {found.round_sd_pct:.1f}%, counted for both sides' launches (x sqrt(1/n + 1))"
        )
    recorded = (baseline.env.get("git") or {}).get("commit")
    if base.get("commit") and recorded and base["commit"] != recorded:
        notes.append(
            f"the base {str(base['commit'])[:12]} is not the baseline's commit {str(recorded)[:12]}: the "
            "change includes the code between them"
        )
    slower = found.ci_high_pct is not None and found.ci_high_pct < -tol.throughput_drop_pct
    return Check(
        name=f"environment (ws={ws})",
        unit=rate_unit(stored),
        current=math.exp(statistics.fmean(math.log(r) for r in rates if r > 0)),
        baseline=baseline_rate,
        change=found.change_pct,
        ci_low=found.ci_low_pct,
        ci_high=found.ci_high_pct,
        rule=_rule(tol),
        status="WARN" if slower else "INFO",
        note="; ".join(notes),
        metric=ENVIRONMENT,
        world_size=ws,
        decided_by=DECIDED_BY,
    )


def with_environment(
    comparison: Comparison,
    outcome: dict[str, Any],
    names: list[str],
    baseline: Bundle | None,
    current: Bundle,
    tol: Tolerances,
) -> Comparison:
    """`comparison` with the environment row of `outcome`'s world size after its timing row (replacing
    one an earlier A/B of that world size left: a resumed run); unchanged where there is none."""
    row = environment_row(outcome, names, baseline, current, tol) if baseline is not None else None
    if row is None:
        return comparison
    checks = [
        c for c in comparison.checks if not (c.metric == ENVIRONMENT and c.world_size == row.world_size)
    ]
    timing = comparison.timing(row.world_size or 0)
    at = checks.index(timing) + 1 if timing in checks else len(checks)
    return replace(comparison, checks=[*checks[:at], row, *checks[at:]])
