"""report.html's A/B section: each A/B of the run as its rounds, its looks and its decision, with the
base's steps beside the candidate's.

An A/B decides a timing row from a measurement of its own: the base and the candidate in turns, round
after round (ab/runner.py). The verdict table shows its outcome (the row's `↳ A/B` line); this section
shows what the outcome came from:

- the rounds: each round's total step time of either side, their tokens/s, the round's figure (the
  candidate's change of tokens/s over the round, exp(change_log) - 1: negative is slower) and the
  median step's change (a diagnostic);
- the looks: after each planned round (ab/decision.look_rounds) the change with its interval and what
  the rule said there: another round, PASS, FAIL or UNKNOWN. They are the sequential test's interim
  decisions, recomputed from the saved rounds with the run's gate settings (ab/decision.decide), which
  is what the A/B did after each round;
- the decision as ab.json holds it;
- the step times of both sides over all rounds (an ECDF, plots.ab_steps_png); where no stored baseline
  is there, the A/B base is also the step-time plot's comparison (html_report.py).

`read_ab` reads ab/ws<N>/ab.json (the publish stage's part); the rest is pure.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchgate.ab.decision import decide_rounds, look_rounds
from benchgate.ab.runner import AB_FILE
from benchgate.config import GateConfig
from benchgate.kit.files import read_json
from benchgate.results.figures import rate_unit

# What the rule says at a look, in words (ABDecision.status).
_SAID = {"CONTINUE": "another round", "PASS": "PASS", "FAIL": "FAIL", "UNKNOWN": "UNKNOWN"}


@dataclass(frozen=True)
class Look:
    """The rule's interim decision after `rounds` rounds."""

    rounds: int
    status: str
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None


@dataclass(frozen=True)
class ABReport:
    """One A/B of the run (its ab.json) and its looks."""

    world_size: int
    outcome: dict[str, Any]
    looks: list[Look]
    unit: str = "tok/s"  # the rate's unit beside its figures: "images/s" where the workload counts images

    @property
    def rounds(self) -> list[dict[str, Any]]:
        return list(self.outcome["rounds"])

    def steps(self, side: str) -> list[float]:
        """`side`'s ("base" or "candidate") measured step times over all rounds, in seconds."""
        return [t for r in self.rounds for t in r.get(f"{side}_step_s", [])]

    def label(self, side: str) -> str:
        """The side as the plots and tables name it: "A/B base b41da440", "A/B candidate (the working
        tree)"."""
        commit = (self.outcome.get(side) or {}).get("commit")
        return f"A/B {side} {commit[:8]}" if commit else f"A/B {side} (the working tree)"


def ab_looks(outcome: dict[str, Any], gate: GateConfig) -> list[Look]:
    """The looks the A/B took over its saved rounds, as ab/decision.decide_rounds judged each, and the
    last look the time budget called between planned ones (the saved decision, as the runner took it)."""
    ab, tol = gate.ab, gate.tolerances
    rounds = outcome["rounds"]
    looks = []
    for n in look_rounds(ab.min_rounds, ab.max_rounds):
        if n > len(rounds):
            break
        d = decide_rounds(rounds[:n], tol.throughput_drop_pct, tol.confidence, ab.min_rounds, ab.max_rounds)
        looks.append(Look(n, d.status, d.change_pct, d.ci_low_pct, d.ci_high_pct))
    final = outcome.get("decision") or {}
    called = final.get("rounds") == len(rounds) and final.get("status") not in (None, "CONTINUE")
    if called and looks and looks[-1].rounds == len(rounds) and looks[-1].status == "CONTINUE":
        looks.pop()  # a planned look that the time budget made the last: decided as the runner did
    if rounds and called and not (looks and looks[-1].rounds == len(rounds)):
        looks.append(
            Look(len(rounds), final["status"], final["change_pct"], final["ci_low_pct"], final["ci_high_pct"])
        )
    return looks


def read_ab(run_dir: Path, gate: GateConfig) -> list[ABReport]:
    """Every A/B of the run in `run_dir` (ab/ws<N>/ab.json), by world size."""
    reports = []
    for path in run_dir.glob(f"ab/ws*/{AB_FILE}"):
        outcome = read_json(path)
        ws = int(outcome["world_size"])
        # The run's own bench at this world size says what a step counts (ab.json does not).
        metrics = run_dir / f"metrics-ws{ws}.json"
        unit = rate_unit(read_json(metrics)) if metrics.exists() else "tok/s"
        reports.append(ABReport(ws, outcome, ab_looks(outcome, gate), unit))
    return sorted(reports, key=lambda r: r.world_size)


def _pct(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:+.{digits}f}%"


def _interval(low: float | None, high: float | None) -> str:
    return "—" if low is None or high is None else f"[{low:+.1f}, {high:+.1f}]%"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"


def _first(r: dict[str, Any]) -> str:
    """Which side went first: a sequential round's one launch, or an interleaved round's pairs."""
    if "first_side" in r:
        return "base" if r["first_side"] == "A" else "candidate"
    return f"base in {r.get('base_first', 0)} of {r.get('pairs', 0)} pairs"


def rounds_table(report: ABReport) -> str:
    """The paired round figures: each round's totals and rates of both sides and its change."""
    rows = []
    for i, r in enumerate(report.rounds, start=1):
        base_s, cand_s = sum(r.get("base_step_s", [])), sum(r.get("candidate_step_s", []))
        median = r.get("median_change_log")
        rows.append(
            [
                str(i),
                str(r.get("pairs", len(r.get("base_step_s", [])))),
                _first(r),
                f"{base_s:.3f}",
                f"{cand_s:.3f}",
                f"{r.get('base_tokens_per_s', 0.0):,.0f}",
                f"{r.get('candidate_tokens_per_s', 0.0):,.0f}",
                _pct(100.0 * math.expm1(r["change_log"]), 2),
                "—" if median is None else _pct(100.0 * math.expm1(median)),
            ]
        )
    head = (
        "round",
        "steps per side",
        "first",
        "base time (s)",
        "candidate time (s)",
        f"base {report.unit}",
        f"candidate {report.unit}",
        "change (the round's figure)",
        "median step change",
    )
    return _table(head, rows)


def looks_table(report: ABReport) -> str:
    """The sequential test's interim decisions."""
    rows = [
        [
            str(look.rounds),
            _pct(look.change_pct),
            _interval(look.ci_low_pct, look.ci_high_pct),
            _SAID[look.status],
        ]
        for look in report.looks
    ]
    if not rows:
        return "<p>No look yet: the A/B stopped before its first planned look.</p>"
    return _table(("after round", "change", "interval", "the rule said"), rows)


def _decision(report: ABReport) -> str:
    d, outcome = report.outcome["decision"], report.outcome
    rates = [
        statistics.fmean(r[f"{side}_tokens_per_s"] for r in report.rounds if f"{side}_tokens_per_s" in r)
        if any(f"{side}_tokens_per_s" in r for r in report.rounds)
        else None
        for side in ("base", "candidate")
    ]
    parts = [
        f"<b>Decision: {html.escape(str(d['status']))}</b>: {html.escape(str(d['reason']))}",
        f"paired change {_pct(d.get('change_pct'))} {_interval(d.get('ci_low_pct'), d.get('ci_high_pct'))}",
    ]
    if d.get("round_sd_pct") is not None:
        parts.append(
            f"round-to-round sd {d['round_sd_pct']:.1f}%, minimum detectable slowdown {d['mde_pct']:.1f}% "
            "(80% power)"
        )
    if None not in rates:
        parts.append(
            f"{html.escape(report.label('base'))} {rates[0]:,.0f} {report.unit}, "
            f"{html.escape(report.label('candidate'))} {rates[1]:,.0f} {report.unit} (the mean over rounds "
            "of each round's tokens over its total time: a paired measurement, neither the stored baseline's "
            "figure nor this run's bench)"
        )
    layout = outcome.get("layout") or {}
    where = (
        f"{html.escape(str((outcome.get('base') or {}).get('description', 'base')))} vs "
        f"{html.escape(str((outcome.get('candidate') or {}).get('description', 'candidate')))}, "
        f"{len(report.rounds)} rounds in {float(outcome.get('seconds', 0.0)):.0f} s"
    )
    if layout:
        where += f", {html.escape(str(layout.get('name')))} layout ({html.escape(str(layout.get('why')))})"
    return f'<p class="meta">{where}</p><p>{"; ".join(parts)}.</p>'


def ab_html(reports: Sequence[ABReport], steps_png: dict[int, str]) -> str:
    """The A/B section: per A/B, its decision, rounds, looks and the two sides' steps (`steps_png`: the
    world size's ECDF as an <img> tag)."""
    sections = []
    for report in reports:
        ws = report.world_size
        sections += [
            f"<h2>A/B at world size {ws}: base vs candidate</h2>",
            _decision(report),
            "<h3>Rounds</h3>",
            rounds_table(report),
            "<h3>Looks</h3>",
            looks_table(report),
            "<h3>Step times of both sides, all rounds</h3>",
            steps_png.get(ws, ""),
        ]
    return "\n".join(sections)
