"""Creep: this run against the pinned anchor, where slowdowns that each passed add up.

Every commit is judged against the one before it, and a PASS becomes the next baseline: five 1.5%
slowdowns in a row each PASS a 5% tolerance, and together cost 7% with no FAIL. So beside each world
size's timing row, compare adds "tokens/s since anchor (ws=N)": this run against the anchor pinned
with `benchgate baseline anchor RUN_ID` (store/anchor.py), judged by the screen's own statistics
(checks/screen.py): the run-level tokens/s change, its one-sided bounds from the run-to-run noise of the
baseline store's history (the machine's noise; the anchor brings none of its own), the same tolerance
(gate.tolerances.throughput_drop_pct) and confidence.

    FAIL     slower than the anchor beyond the tolerance, with confidence: the verdict FAILs, even where
             every commit on the way PASSed; but only until the A/B decides (below)
    PASS     within the tolerance of the anchor, with confidence
    INFO     the noise cannot tell (the screen's UNKNOWN), or is not known yet: shown, never gated

The screen alone cannot hold a 1% false FAIL here: one launch against one launch, and every run meets the
same anchor launch, so an anchor that happened to run fast makes every later run look slower
(benchmarks/creep_rates.py). So a screen FAIL is a question, not the answer: its row names the anchor's
full commit (`ANCHOR_COMMIT`), and the A/B stage runs an interleaved A/B of that commit against this run
(ab/creep_ab.py), whose FAIL, PASS or UNKNOWN (INFO here) replaces the row. Only where no A/B can be run
(the anchor recorded no commit, the repository lacks it) does the screen's FAIL stand, and the row says so.

An undecided creep row is INFO, not UNKNOWN: an UNKNOWN verdict asks for work (an A/B, a resume), and a
gate that asks on every run of a slightly slower tree is soon ignored. The question the gate must answer
on every commit is the per-commit one; creep only adds a FAIL where it is sure. The per-commit A/B never
decides a creep row (ab/rows.py replaces timing rows only): its base is the commit before, not the anchor;
the creep A/B's base is the anchor's commit (ab/creep_ab.py).

The anchor's own commit from a clean tree with the same fingerprints is unchanged code, as for the
timing row (compare.unchanged_code): PASS. An anchor that measured something else (another profile,
workload, device, precision, tokens per step, threads) is refused like a baseline (comparable.py), with
how to clear it; no anchor, no rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchgate.checks import screen
from benchgate.checks.comparable import check_comparable
from benchgate.checks.compare import unchanged_code
from benchgate.config import Tolerances
from benchgate.errors import BaselineError
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import CREEP, TIMING, Check, Comparison, Status
from benchgate.results.figures import rate_name, rate_unit, run_rate

CLEAR_HINT = "`benchgate baseline anchor --clear` removes the anchor"
# In a screen-FAIL creep row's note: the commit an A/B checks out as its base (ab/creep_ab.py reads it).
ANCHOR_COMMIT = "A/B base: anchor commit "
NO_AB = "no A/B can be run"


def anchor_commit(anchor: Bundle) -> str:
    """The anchor's full commit, "" where its env.json recorded none (then no A/B can check it out)."""
    commit = anchor.env.get("git", {}).get("commit")
    return str(commit) if commit else ""


def row_name(ws: int, rate: str) -> str:
    return f"{rate} since anchor (ws={ws})"


def rule_text(tolerance_pct: float, confidence: float) -> str:
    return (
        f"creep vs the pinned anchor, by the screen's statistics: FAIL if the one-sided {confidence:.0%} "
        f"upper bound of the run-level tokens/s change since the anchor (t over the noise of >= "
        f"{screen.MIN_HISTORY} earlier baseline runs) is below -{tolerance_pct:g}%, PASS if the lower bound "
        "is above it; else INFO (not gated)"
    )


def anchor_name(anchor: Bundle) -> str:
    """The anchor as a note names it: its commit (12 characters), or its directory where none is known."""
    commit = anchor.env.get("git", {}).get("commit")
    return f"commit {str(commit)[:12]}" if commit else f"the run in {anchor.path}"


def creep_check(
    ws: int,
    anchor: dict[str, Any],
    current: dict[str, Any],
    history: Sequence[dict[str, float]],
    tol: Tolerances,
    anchor_label: str,
    unchanged: bool = False,
    commit: str = "",
) -> Check:
    """The creep row of one world size: `anchor`/`current` are metrics-ws<N>.json contents, `history`
    the baseline store's run-level figures at this world size (Bundle.history_figures), `commit` the
    anchor's full commit, which a screen FAIL hands to the A/B ("": none, the screen's FAIL stands)."""
    result = screen.screen(
        anchor["samples"], current["samples"], history, tol.throughput_drop_pct, tol.confidence
    )
    since = f"since the anchor ({anchor_label}): {result.change_pct:+.1f}%"
    if result.ci_low_pct is not None and result.ci_high_pct is not None:
        since += f" [{result.ci_low_pct:+.1f}, {result.ci_high_pct:+.1f}]%"
    status: Status
    decided_by = "screen"
    if unchanged:
        status, decided_by = "PASS", "unchanged"
        verdict = f"the anchor's own commit and setup: unchanged code (screen: {result.status})"
    elif result.status == "FAIL":
        status = "FAIL"
        verdict = (
            f"the screen says slower than the anchor beyond -{tol.throughput_drop_pct:g}% with confidence; "
            + (
                f"an A/B of the anchor's commit against this run decides ({ANCHOR_COMMIT}{commit})"
                if commit
                else f"{NO_AB}: the anchor recorded no commit to check out, so the screen's FAIL stands"
            )
        )
    elif result.status == "PASS":
        status, verdict = "PASS", f"within -{tol.throughput_drop_pct:g}% of the anchor with confidence"
    else:
        status = "INFO"
        verdict = f"undecided, shown for information (not gated): {result.reason}"
    notes = [since, verdict, f"decided on the {result.figure} over {result.history_runs} earlier runs"]
    if result.noise_pct is not None:
        notes.append(f"run-to-run noise {result.noise_pct:.1f}%")
    return Check(
        name=row_name(ws, rate_name(current)),
        unit=rate_unit(current),
        current=run_rate(current),
        baseline=run_rate(anchor),
        change=result.change_pct,
        ci_low=result.ci_low_pct,
        ci_high=result.ci_high_pct,
        rule=rule_text(tol.throughput_drop_pct, tol.confidence),
        status=status,
        note="; ".join(notes),
        metric=CREEP,
        world_size=ws,
        decided_by=decided_by,
    )


def creep_checks(
    anchor: Bundle, baseline: Bundle | None, current: Bundle, tol: Tolerances
) -> tuple[list[Check], list[str]]:
    """(rows, notes): one creep row per world size that the anchor and this run share, and notes on what
    differs. Raises BaselineError where the anchor measured something else than this run."""
    try:
        differences = check_comparable(anchor, current)
    except BaselineError as e:
        raise BaselineError(f"the pinned anchor: {e}; {CLEAR_HINT}") from None
    notes = [f"vs the anchor: {note}" for note in differences]
    label = anchor_name(anchor)
    unchanged = unchanged_code(anchor, current)
    rows = []
    for ws, cur in sorted(current.metrics.items()):
        base = anchor.metrics.get(ws)
        if base is None:
            notes.append(f"the anchor ({label}) has no ws={ws}: no creep row at that world size")
            continue
        history = baseline.history_figures(ws) if baseline is not None else []
        rows.append(creep_check(ws, base, cur, history, tol, label, unchanged, anchor_commit(anchor)))
    return rows, notes


def with_creep(
    comparison: Comparison, anchor: Bundle | None, baseline: Bundle | None, current: Bundle, tol: Tolerances
) -> Comparison:
    """`comparison` with each creep row placed right after its world size's timing row (at the end where
    that row is missing); unchanged without an anchor."""
    if anchor is None:
        return comparison
    rows, notes = creep_checks(anchor, baseline, current, tol)
    checks = list(comparison.checks)
    for row in rows:
        timing = next(
            (i for i, c in enumerate(checks) if c.metric == TIMING and c.world_size == row.world_size), None
        )
        checks.insert(len(checks) if timing is None else timing + 1, row)
    return Comparison(
        comparison.machine_profile,
        comparison.workload,
        comparison.baseline_path,
        checks,
        [*comparison.notes, *notes],
        comparison.on_unknown,
        dict(comparison.attribution),
    )
