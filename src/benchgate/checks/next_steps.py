"""What to do next: the actions that decide an UNKNOWN verdict, and where a FAIL's detail lives.

A verdict's rule says how it was decided; a reader of an UNKNOWN also needs what would decide it. Every
way a row becomes UNKNOWN has its own answer:

    the screen could not decide, no A/B ran      (checks/screen.py: noise unknown with fewer than
                                                 MIN_HISTORY earlier runs, an interval straddling the
                                                 tolerance, or a drift-corrected PASS the raw figure does
                                                 not share; no base code to check out)
                                                 -> A/B against the base: `benchgate run --base REF`
    A/B ran out of budget                        (ab/decision.py: gate.ab.max_rounds, or the time budget
                                                 gate.ab.max_seconds) -> `benchgate run --resume DIR`,
                                                 with a larger [gate.ab] budget in a --config file
    no baseline here and MLflow unreachable      (compare.without_reachable_baseline: rows that would
                                                 be NEW) -> fix the connection, or `--no-tracking`

A run whose setup (benchgate, loaded packages, bench configuration) differs from its baseline run's is
no UNKNOWN: the A/B decides the code, the environment row (ab/environment.py) is INFO or WARN, and a
PASS on main is promoted, so the next commit is judged against the new setup with no step to take.

A creep row (checks/creep.py) is never UNKNOWN (undecided, it is INFO); its FAIL points to where the
level moved (`benchgate history --changes`) and to re-pinning the anchor once a slowdown is accepted.

The rows are recognised by the words their producers write (decided_by, the reasons' config keys, the
notes); tests/unit/checks/test_next_steps.py builds each row with those producers, so a reworded note
breaks a test, not the advice. Pure: no file or network is read; `out_dir` only names the run's directory.

Who reads the steps decides how the run's files are named. The terminal and compare.md are read where
the run is: a path (`--resume /path/to/benchgate-out`). A pull request's reader (summary.md, the step
summary, the PR comment) is not on the CI runner, whose disk is gone when the job ends: the files are
named within the job's artifact ("download the `benchgate-out` artifact of this job"), and an A/B out of
budget is run again with a larger budget, since its rounds can only be resumed where they ran.
"""

from __future__ import annotations

import re
from pathlib import Path

from benchgate.results.comparison import CREEP, TIMING, Check, Comparison

# The notes and reasons that name a cause (see the module docstring for who writes each).
UNREACHABLE_NOTE = "baseline unreachable"  # compare.without_reachable_baseline, on each row
ROUNDS_BUDGET = "gate.ab.max_rounds"  # ab/decision.decide's reasons
SECONDS_BUDGET = "gate.ab.max_seconds"
# The base a reader most likely means; any git ref of the repository works.
DEFAULT_BASE = "origin/main"

_ROUNDS = re.compile(r"(\d+) rounds")
_ANCHOR = re.compile(r"since the anchor \((.+?)\)")  # checks/creep.py, first in a creep row's note


def next_steps(comparison: Comparison, out_dir: Path | None, artifact: str | None = None) -> list[str]:
    """The actions that would decide this comparison's UNKNOWN rows, most decisive first, one sentence
    each with the command to type; for a FAIL, where its detail lives; nothing for PASS or WARN.

    `out_dir`: the run's result directory, named in commands (`--resume DIR`); None writes DIR.
    `artifact`: for a reader away from the machine that ran it (a pull request's), the name of the CI
    artifact holding that directory: files are named within it instead (module docstring)."""
    where = str(out_dir) if out_dir is not None else "DIR"
    if comparison.verdict == "FAIL":
        return _fail_steps(comparison, where, artifact)
    if comparison.verdict != "UNKNOWN":
        return []
    unknown = [c for c in comparison.checks if c.status == "UNKNOWN"]
    steps: list[str] = []
    if any(UNREACHABLE_NOTE in c.note for c in unknown):
        steps.append(_unreachable_step())
    out_of_budget = [c for c in unknown if c.decided_by == "ab"]
    if out_of_budget:
        steps.append(_resume_step(out_of_budget, where, artifact))
    # A screened row, not one that merely lacks a baseline (those read UNKNOWN for the step above).
    screened = [
        c
        for c in unknown
        if c.metric == TIMING and c.decided_by in ("screen", "") and UNREACHABLE_NOTE not in c.note
    ]
    if screened:
        steps.append(_base_step(screened))
    return steps


def _sizes(checks: list[Check]) -> str:
    sizes = sorted({c.world_size for c in checks if c.world_size is not None})
    return f" (ws={','.join(map(str, sizes))})" if sizes else ""


def _unreachable_step() -> str:
    return (
        "MLflow is unreachable and no baseline is cached here, but MLflow may hold this profile's "
        "baseline: fix the connection (--tracking-uri or MLFLOW_TRACKING_URI) and run again; or, if this "
        "profile has no baseline yet, run with `--no-tracking` (rows read NEW) or decide the timing by "
        f"A/B with `benchgate run --base {DEFAULT_BASE}`"
    )


def _resume_step(rows: list[Check], where: str, artifact: str | None) -> str:
    notes = " ".join(c.note for c in rows)
    if SECONDS_BUDGET in notes:
        budget = "max_seconds"
        larger = "a larger `[gate.ab] max_seconds` (the time budget per world size that ran out)"
    else:
        budget = "max_rounds"
        done = max((int(n) for c in rows for n in _ROUNDS.findall(c.note)), default=0)
        above = f" above {done}" if done else ""
        larger = f"`[gate.ab] max_rounds`{above} (the round budget that ran out)"
    if artifact is not None:
        # A runner's disk goes with the job, and a resume checks the base out of the run's repository.
        return (
            f"the A/B{_sizes(rows)} ran out of its budget (gate.ab.{budget}) before deciding: set "
            f"{larger} in the job's config file and run the job again (its rounds so far are in the "
            f"`{artifact}` artifact of this job; `benchgate run --resume` continues them only on the "
            "machine that ran them)"
        )
    return (
        f"the A/B{_sizes(rows)} ran out of its budget (gate.ab.{budget}) before deciding: continue from "
        f"its saved rounds with `benchgate run --resume {where}`, adding `--config FILE` where FILE sets "
        f"{larger}"
    )


def _base_step(rows: list[Check]) -> str:
    notes = " ".join(c.note for c in rows)
    why = (
        "the run-to-run noise is not known yet"
        if "noise unknown" in notes
        else "the screen against the stored baseline could not decide"
    )
    return (
        f"{why}{_sizes(rows)} and no A/B ran (no base code to check out): decide it by A/B against the "
        f"base code with `benchgate run --base {DEFAULT_BASE}` (on a cluster: "
        "`benchgate submit --param base_commit=SHA`)"
    )


def _fail_steps(comparison: Comparison, where: str, artifact: str | None) -> list[str]:
    failed = [c for c in comparison.checks if c.status == "FAIL"]
    steps = []
    by_ab = [c for c in failed if c.metric == TIMING and c.decided_by == "ab"]
    explained = [c for c in by_ab if str(c.world_size) in comparison.attribution]
    if explained:  # the operators are named under the table: reading them is the next step
        ws = explained[0].world_size
        traces = (
            f"{where}/ab/ws{ws}/explain/"
            if artifact is None
            else f"ab/ws{ws}/explain/ (download the `{artifact}` artifact of this job)"
        )
        steps.append(
            f'read "Why ws={ws} is slower" under the table: the operators the slowdown is made of; the '
            f"profiled rounds' traces are in {traces} (Perfetto or TensorBoard)"
        )
    elif by_ab and artifact is not None:
        ws = by_ab[0].world_size
        steps.append(
            f"download the `{artifact}` artifact of this job: its report.html shows the A/B rounds behind "
            f"the FAIL (they are in ab/ws{ws}/ab.json), and the trace, where recorded, which steps slowed"
        )
    elif by_ab:
        ws = by_ab[0].world_size
        steps.append(
            f"the A/B rounds behind the FAIL are in {where}/ab/ws{ws}/ab.json; report.html shows them "
            "(and the trace, where recorded, shows which steps slowed)"
        )
    elif any(c.metric == TIMING and c.decided_by == "screen" for c in failed):
        steps.append(
            "the stored-baseline screen decided this FAIL; confirm it side by side with "
            f"`benchgate run --base {DEFAULT_BASE}`"
        )
    crept = [c for c in failed if c.metric == CREEP]
    if crept:
        steps.append(_creep_step(crept))
    return steps


def _creep_step(rows: list[Check]) -> str:
    found = _ANCHOR.search(rows[0].note)
    anchor = f" ({found.group(1)})" if found else ""
    return (
        f"slower than the pinned anchor{anchor} beyond the tolerance{_sizes(rows)}, though the commits "
        "since may each have passed: `benchgate history --changes` shows where the level moved; once a "
        "slowdown is accepted, pin a newer run with `benchgate baseline anchor RUN_ID`"
    )


def verdict_lines(comparison: Comparison, out_dir: Path) -> list[str]:
    """The verdict in plain words, "verdict UNKNOWN (exit 4): <next step>", then any further next steps
    (what decides an UNKNOWN, where a FAIL's detail is; paths under `out_dir`)."""
    steps = next_steps(comparison, out_dir)
    first = f"verdict {comparison.verdict} (exit {comparison.exit_code})"
    return [f"{first}: {steps[0]}" if steps else first, *(f"next: {step}" for step in steps[1:])]
