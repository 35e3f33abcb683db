"""`benchgate bisect`, run: the range checked, the commits checked out as worktrees, each step of the
search (ranges/bisect.py) an A/B between two checkouts (ab/runner.run_ab; every step in the one layout
bisect_layout chose, in bisect.json), and the results on disk after every step; then one MLflow run
for the whole bisection.

    <out>/bisect.json                   the range, every step (its decision, its ab.json), the outcome
    <out>/step<k>/ab/ws<N>/ab.json      step k's A/B: its rounds and decision (ab/runner.py)
    <out>/probe/                        good's short bench: the step time that sets the rounds' steps
    <out>/worktrees/<sha12>/            the checkouts, only while the bisect runs (ranges/worktrees.py)

Only A/B between the commits decides, never a stored baseline: both sides run on this machine at the
same time, taking turns step by step (or, where a GPU cannot hold both, one launch after the other in
A B | B A order), so a step's decision is about the two commits' code whatever the machine, its load
and the day. bisect.json is rewritten after each step (status RUNNING), so an
interrupted bisect leaves what it decided and why it ended (FAILED, INTERRUPTED); MLflow comes after
the result is on disk, and a failure there is a warning that changes no exit code.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchgate.ab.decision import ABDecision
from benchgate.ab.explain import explain_or_why, wants_explanation
from benchgate.ab.layout import Layout
from benchgate.ab.round_plan import round_steps
from benchgate.ab.runner import AB_FILE, ABOutcome, Side, ab_layout, round_config, run_ab
from benchgate.config import RunConfig
from benchgate.errors import EXIT_RUN_FAILED, BenchgateError, ConfigError
from benchgate.kit.diskfaults import writing
from benchgate.kit.files import read_json, write_json
from benchgate.measure.env import capture_environment
from benchgate.measure.launch import check_world_size, stage_bench, uses_cuda, visible_gpus
from benchgate.measure.source import resolve_local_ref
from benchgate.ranges.bisect import Bisection, Step, bisect, max_decisions
from benchgate.ranges.commits import RangeCommit, first_parent_commits, is_ancestor
from benchgate.ranges.worktrees import (
    CommitInfo,
    Worktrees,
    commit_info,
    first_parent,
    holds_module,
    repository_root,
)
from benchgate.results import outdir
from benchgate.results.figures import mean_step_time

BISECT_FILE = "bisect.json"
WORKTREES_DIR = "worktrees"
PROBE_DIR = "probe"
# An A/B step that ends UNKNOWN is resumed once with this many times its round budget.
MORE_ROUNDS_FACTOR = 2
# Where _search leaves the culprit's attribution for run_bisect (the worktrees it needs are gone after).
CULPRIT_ATTRIBUTION = "_culprit_attribution"


@dataclass(frozen=True)
class BisectRange:
    """good..bad of the repository at `repo`, checked: good an ancestor of bad, at least one commit."""

    repo: Path
    good: CommitInfo
    bad: CommitInfo
    commits: tuple[RangeCommit, ...]  # along bad's first parents, oldest first; bad is the last


class BisectListener(Protocol):
    """What the caller hears while the bisect runs (the CLI prints it)."""

    def note(self, text: str) -> None: ...
    def ab_started(self, number: int, base: str, candidate: str, more_rounds: bool) -> None: ...
    def step_decided(self, step: Step, subject: str) -> None: ...


@dataclass
class BisectReport:
    """What `run_bisect` found and where it wrote it."""

    bisection: Bisection
    record: dict[str, Any]  # bisect.json as written
    path: Path  # bisect.json
    culprit: CommitInfo | None = None
    tracking_warning: str | None = None
    notes: list[str] = field(default_factory=list)  # said while it ran (listener.note), kept in bisect.json


def resolve_bisect_range(cwd: Path, good_ref: str, bad_ref: str) -> BisectRange:
    """--good and --bad resolved in the repository holding `cwd`; ConfigError (exit 2) naming the flag and
    the value when a ref names no commit, both name the same one, or good is not an ancestor of bad."""
    good, _ = resolve_local_ref(good_ref, cwd, "--good")
    bad, _ = resolve_local_ref(bad_ref, cwd, "--bad")
    if good == bad:
        raise ConfigError(
            f"--bad: got {bad_ref!r}, the same commit as --good {good_ref!r} ({good[:12]}): there is no "
            "commit between them to bisect"
        )
    repo = repository_root(cwd)
    if not is_ancestor(good, bad, repo):
        raise ConfigError(
            f"--good: got {good_ref!r} ({good[:12]}), which is not an ancestor of --bad {bad_ref!r} "
            f"({bad[:12]}); --good is the older commit, of the speed to keep, and --bad a newer, slower one"
        )
    commits = tuple(first_parent_commits(good, bad, repo))
    return BisectRange(repo, commit_info(repo, good), commit_info(repo, bad), commits)


def more_rounds_config(config: RunConfig) -> RunConfig:
    """The config an UNKNOWN step is resumed with: MORE_ROUNDS_FACTOR times the rounds (the time budget,
    gate.ab.max_seconds, starts afresh on a resume)."""
    ab = config.gate.ab.model_copy(update={"max_rounds": MORE_ROUNDS_FACTOR * config.gate.ab.max_rounds})
    return config.model_copy(update={"gate": config.gate.model_copy(update={"ab": ab})})


def check_world(config: RunConfig, world_size: int) -> int:
    """The CUDA device count, once `world_size` is known to fit this machine (--world-size named if not)."""
    gpus = visible_gpus()
    try:
        check_world_size(world_size, config.bench.device, gpus)
    except ConfigError as e:
        raise ConfigError(str(e).replace("bench.world_sizes", "--world-size", 1)) from None
    return gpus


def typical_step_s(
    config: RunConfig, world_size: int, out: outdir.ResultsDir, trees: Worktrees, good: str, gpus: int
) -> float | None:
    """good's mean step time at `world_size`, from one short bench launch (<out>/probe): it sets the
    steps of every round (ab/round_plan.round_steps) so that each measures at least gate.ab.min_measured_s
    per side, as the bench stage's step time does in a gate run; rounds of short steps are noisy. None
    where gate.ab.min_measured_s is 0: every round is gate.ab.steps steps, and nothing is probed."""
    if config.gate.ab.min_measured_s <= 0:
        return None
    out.will_write([PROBE_DIR])
    probe = round_config(config)
    metrics = stage_bench(
        probe, world_size, out.path / PROBE_DIR, None, gpus, source_paths=trees.import_paths(good)
    )
    if uses_cuda(config.bench.device, gpus):
        # With the probe's peak memory, what the GPUs hold decides the A/B layout (bisect_layout).
        write_json(out.path / PROBE_DIR / "env.json", capture_environment(trees.checkout(good)))
    return mean_step_time(read_json(metrics)["samples"]["step_time_s"])


def bisect_layout(config: RunConfig, world_size: int, out: outdir.ResultsDir, gpus: int) -> Layout:
    """One layout for every step (their decisions are compared with one another): gate.ab.layout, or
    what `auto` makes of the probe's peak memory and the GPUs' free memory (ab/layout.py). Without a
    probe (gate.ab.min_measured_s = 0) the peak is unknown, and auto on CUDA is sequential."""
    return ab_layout(config, world_size, out.path / PROBE_DIR, gpus)


class _ABSteps:
    """The search's `Decide`: each new pair of commits an A/B in <out>/step<k>, a resumed one in the same."""

    def __init__(
        self,
        config: RunConfig,
        world_size: int,
        gpus: int,
        out: outdir.ResultsDir,
        trees: Worktrees,
        step_s: float | None,
        listener: BisectListener | None,
        layout: Layout | None = None,
    ) -> None:
        self.config, self.world_size, self.gpus, self.step_s = config, world_size, gpus, step_s
        self.out, self.trees, self.listener, self.layout = out, trees, listener, layout
        self.dirs: dict[tuple[str, str], str] = {}
        self.seconds: dict[tuple[str, str], float] = {}
        # Each pair's latest A/B, for the culprit's explanation.
        self.outcomes: dict[tuple[str, str], ABOutcome] = {}

    def __call__(
        self, base: str, candidate: str, more_rounds: bool = False, tolerance_pct: float | None = None
    ) -> ABDecision:
        pair = (base, candidate)
        if pair not in self.dirs:
            name = f"step{len(self.dirs) + 1}"
            self.out.will_write([name])
            self.dirs[pair] = name
        if self.listener is not None:
            self.listener.ab_started(len(self.dirs), base, candidate, more_rounds)
        started = time.monotonic()
        config = more_rounds_config(self.config) if more_rounds else self.config
        if tolerance_pct is not None:  # a midpoint: judged against half the good->bad change
            tolerances = config.gate.tolerances.model_copy(update={"throughput_drop_pct": tolerance_pct})
            config = config.model_copy(
                update={"gate": config.gate.model_copy(update={"tolerances": tolerances})}
            )
        outcome = run_ab(
            config,
            self.world_size,
            self.out.path / self.dirs[pair],
            *self.sides(base, candidate),
            self.gpus,
            step_s=self.step_s,
            resume=more_rounds,
            layout=self.layout,
        )
        self.seconds[pair] = self.seconds.get(pair, 0.0) + time.monotonic() - started
        self.outcomes[pair] = outcome
        return outcome.decision

    def sides(self, base: str, candidate: str) -> tuple[Side, Side]:
        return (
            Side(f"base {base[:12]}", base, self.trees.import_paths(base)),
            Side(f"candidate {candidate[:12]}", candidate, self.trees.import_paths(candidate)),
        )

    def explain(self, parent: str, culprit: str) -> dict[str, Any] | None:
        """The culprit's own A/B (against its parent) explained as a gate run's FAIL is (ab/explain.py):
        profiled rounds after its decision, in its step's directory. None where that A/B did not run or
        gate.ab.explain does not ask for it."""
        outcome = self.outcomes.get((parent, culprit))
        if outcome is None or not wants_explanation(self.config, outcome.decision.status):
            return None
        ws_dir = self.out.path / self.dirs[(parent, culprit)] / "ab" / f"ws{self.world_size}"
        return explain_or_why(self.config, outcome, ws_dir, *self.sides(parent, culprit), self.gpus)

    def ab_json(self, step: Step) -> str:
        """Where step's ab.json is, relative to the out dir."""
        return f"{self.dirs[(step.base, step.candidate)]}/ab/ws{self.world_size}/{AB_FILE}"


def _save(path: Path, record: dict[str, Any]) -> None:
    with writing("the bisect's results", path):
        write_json(path, record)


def _remaining(span: BisectRange, first: int, last: int) -> dict[str, Any] | None:
    if first > last:
        return None
    return {"first": span.commits[first].sha, "last": span.commits[last].sha, "commits": last - first + 1}


def _outcome(
    span: BisectRange, found: Bisection, culprit: CommitInfo | None, attribution: dict[str, Any] | None
) -> dict[str, Any]:
    culprit_entry = None
    if culprit is not None and found.vs_good is not None and found.own is not None:
        changes = {"parent": found.parent, "vs_good": found.vs_good.to_dict(), "own": found.own.to_dict()}
        culprit_entry = culprit.to_dict() | changes
        if attribution is not None:  # what the culprit's own slowdown is made of (ab/explain.py)
            culprit_entry["attribution"] = attribution
    return {
        "status": found.status,
        "exit_code": found.exit_code,
        "culprit": culprit_entry,
        "remaining": _remaining(span, found.first, found.last),
    }


def run_bisect(
    config: RunConfig,
    span: BisectRange,
    out_dir: Path,
    world_size: int = 1,
    listener: BisectListener | None = None,
    kfp_run_id: str = "",
) -> BisectReport:
    """Bisect `span` by A/B at `world_size`, results in `out_dir` (claimed as `benchgate run` claims its
    --out: a non-empty directory benchgate did not write is refused); then log it if tracking is on.
    `kfp_run_id`: the bisect pipeline's run this bisect is the task of (bisect.json and the MLflow run
    carry it, so the submitter finds the result)."""
    gpus = check_world(config, world_size)
    with outdir.claimed(out_dir) as out:
        out.clear()
        out.will_write([BISECT_FILE, WORKTREES_DIR])
        path = out.path / BISECT_FILE
        record = _first_record(config, span, world_size, kfp_run_id)
        _save(path, record)
        started = time.monotonic()
        try:
            found = _search(config, span, world_size, gpus, out, record, listener)
        except BaseException as e:  # an error or Ctrl-C: what was decided stays, with why it ended
            interrupted = isinstance(e, KeyboardInterrupt)
            record |= {
                "status": "INTERRUPTED" if interrupted else "FAILED",
                "exit_code": getattr(e, "exit_code", EXIT_RUN_FAILED),
                "error": "interrupted" if interrupted else str(e),
                "seconds": time.monotonic() - started,
            }
            with contextlib.suppress(BenchgateError):  # the error being raised says more
                _save(path, record)
            raise
        culprit = commit_info(span.repo, found.culprit) if found.culprit is not None else None
        attribution = record.pop(CULPRIT_ATTRIBUTION, None)
        record |= _outcome(span, found, culprit, attribution) | {"seconds": time.monotonic() - started}
        _save(path, record)
        report = BisectReport(found, record, path, culprit, notes=record["notes"])
        if config.tracking.enabled:
            _track(config, report)
    return report


def _first_record(config: RunConfig, span: BisectRange, world_size: int, kfp_run_id: str) -> dict[str, Any]:
    """bisect.json before the first step: what is bisected, how, on which machine (and in which KFP
    run, on a cluster)."""
    return {
        "repository": str(span.repo),
        "good": span.good.to_dict(),
        "bad": span.bad.to_dict(),
        "commits": [{"sha": c.sha, "subject": c.subject} for c in span.commits],
        "max_decisions": max_decisions(len(span.commits)),
        "workload": config.bench.workload,
        "workload_args": dict(config.bench.workload_args),
        "world_size": world_size,
        "machine_profile": capture_environment(span.repo)["machine_profile"],
        "kfp_run_id": kfp_run_id or None,
        "tolerance_pct": config.gate.tolerances.throughput_drop_pct,
        "confidence": config.gate.tolerances.confidence,
        "status": "RUNNING",
        "notes": [],
        "steps": [],
    }


def _search(
    config: RunConfig,
    span: BisectRange,
    world_size: int,
    gpus: int,
    out: outdir.ResultsDir,
    record: dict[str, Any],
    listener: BisectListener | None,
) -> Bisection:
    """The search over worktrees that are gone when it returns or raises; bisect.json after each step."""
    path = out.path / BISECT_FILE
    subjects = {c.sha: c.subject for c in span.commits}
    with Worktrees(span.repo, out.path / WORKTREES_DIR) as trees:
        module = config.bench.workload.partition(":")[0]
        if not holds_module(trees.checkout(span.good.sha), module):
            record["notes"].append(
                f"the workload's module {module!r} is not in the repository at --good: unless it "
                "imports the repository's code, both sides of every A/B run the same code"
            )
            if listener is not None:
                listener.note(record["notes"][-1])
        step_s = typical_step_s(config, world_size, out, trees, span.good.sha, gpus)
        record["round_steps"] = round_steps(config, step_s)
        layout = bisect_layout(config, world_size, out, gpus)
        record["ab_layout"] = layout.to_dict()
        steps = _ABSteps(config, world_size, gpus, out, trees, step_s, listener, layout)

        def decided(step: Step) -> None:
            record["steps"].append(_step_entry(step, steps, span))
            _save(path, record)
            if listener is not None:
                listener.step_decided(step, subjects.get(step.candidate, ""))

        commits = [c.sha for c in span.commits]
        found = bisect(span.good.sha, commits, steps, lambda sha: first_parent(span.repo, sha), decided)
        if found.culprit is not None and found.parent is not None:  # while the worktrees exist
            record[CULPRIT_ATTRIBUTION] = steps.explain(found.parent, found.culprit)
        return found


def _step_entry(step: Step, steps: _ABSteps, span: BisectRange) -> dict[str, Any]:
    return {
        "step": step.number,
        "role": step.role,
        "base": step.base,
        "candidate": step.candidate,
        "decision": step.decision.to_dict(),
        "more_rounds": step.more_rounds,
        "tolerance_pct": step.tolerance_pct,  # None: the gate's tolerance
        "ab_json": steps.ab_json(step),
        "seconds": steps.seconds.get((step.base, step.candidate), 0.0),
        "commits_left": step.commits_left,
        "remaining": _remaining(span, step.first, step.last),
    }


def _track(config: RunConfig, report: BisectReport) -> None:
    """One MLflow run for the bisection, after the results are on disk; any failure is a warning."""
    from benchgate.tracking import client as tracking
    from benchgate.tracking.bisection import log_bisection

    failures: tuple[type[BaseException], ...] = (BenchgateError, OSError, *tracking.send_errors())
    try:
        tracker = tracking.connect(config)
        run_id = log_bisection(tracker, report.record, report.path)
    except failures as e:
        report.tracking_warning = f"not logged to MLflow ({e}); the results are in {report.path}"
        report.record["tracking"] = {"error": str(e)}
    else:
        report.record["tracking"] = {
            "uri": tracker.uri,
            "experiment_id": tracker.experiment_id,
            "run_id": run_id,
        }
        url = tracking.run_url(tracker, run_id)
        if url:
            report.record["tracking"]["url"] = url
    _save(report.path, report.record)
