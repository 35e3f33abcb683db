"""`benchgate backfill A..B`, the runs: the setup a backfill measures, its commits gated one by one on
this machine or submitted to KFP, and its history read back from MLflow for the change points.

Locally each commit is one normal gate run (`kfp/local_run.run_gate` with commit=SHA and the file://
URL of the repository: its tasks check the commit out as on a cluster), one after the other, so that
no two timings overlap; each logs to MLflow as any run does. A backfilled run never becomes the
baseline (update_baseline = never, whatever the config says): an old commit is not the newest good
main, and the gates that run after the backfill must keep comparing with the baseline they had. Each
commit's results stay under `--out`/<sha12>/.

A commit whose run fails (exit 3: a rank crashed, a disk refused a write) is recorded and the backfill
goes on with the next; bad input (exit 2: the workload does not import at that commit, the config) stops
it, since every later commit would most likely be refused the same way.

On a cluster (`--submit`) each commit is one pipeline run through `kfp/submit.submit` without waiting:
its run name is fixed by the commit and the arguments, so a backfill submitted twice attaches to the
runs of the first instead of starting them again.

    <out>/<sha12>/       each commit's gate run on this machine (a local backfill)
    <out>/backfill.json  the range, the setup, and a row per kept commit (ranges/backfill.Row)
    <out>/summary.md     the same rows as a Markdown table (ranges/backfill.summary_markdown)

The caller (cli/backfill.py) connects to MLflow and reads it through `planned` and `range_changes`,
inside its own handling of MLflow's errors; it shows the plan, the progress (the `Progress` display it
opens for `backfill_locally`), the summary and the change points. The out directory, the runs and the
two files are made here (`backfill_locally`, `submit_backfill`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from benchgate.config import RunConfig
from benchgate.errors import EXIT_BAD_INPUT, BenchgateError, ConfigError
from benchgate.history.series import FigureChange, figure_changes, in_commit_order
from benchgate.kfp.api import Connection, connection_from_env
from benchgate.kfp.local_run import pipeline_arguments, run_gate
from benchgate.kfp.params import config_from_parameters
from benchgate.kfp.pipeline import validate_pipeline_arguments
from benchgate.kfp.run_request import build_arguments, pipeline_parameter_names
from benchgate.kfp.submit import submit
from benchgate.kit.diskfaults import writing
from benchgate.kit.files import write_json, write_text
from benchgate.kit.progress import Reporter
from benchgate.measure.fingerprint import capture_fingerprints
from benchgate.ranges.backfill import (
    PlannedCommit,
    Row,
    Status,
    exit_code,
    plan,
    skipped_row,
    summary_markdown,
)
from benchgate.ranges.commits import CommitRange, RangeCommit
from benchgate.results import outdir
from benchgate.results.bundle import load_bundle
from benchgate.results.figures import RUN_TOKENS_PER_S, HistoryPoint, bench_figures
from benchgate.tracking.backfill_index import CONFIG_FINGERPRINT, Setup, measured
from benchgate.tracking.client import Tracker

NEVER_BASELINE = "never"
SUMMARY_FILE, RECORD_FILE = "summary.md", "backfill.json"


class Progress(Protocol):
    """What the backfill tells its caller: a commit's gate starts (its stages go to the Reporter
    returned), a commit is done."""

    def commit_started(self, commit: RangeCommit) -> Reporter: ...
    def commit_done(self, row: Row) -> None: ...


@dataclass(frozen=True)
class BackfillReport:
    """What a backfill did, and where its summary is."""

    title: str  # "backfill A..B": summary.md's heading
    rows: list[Row]  # one per kept commit reached, oldest first
    stopped: BenchgateError | None  # the bad-input error that stopped the backfill, if one did
    summary: Path  # summary.md (backfill.json beside it)

    @property
    def exit_code(self) -> int:
        return exit_code(self.rows)


@dataclass(frozen=True)
class Submission:
    """Where a backfill with --submit sends its commits, and what."""

    arguments_for: Callable[[RangeCommit], dict[str, Any]]  # each commit's pipeline arguments
    conn: Connection
    setup: Setup | None  # the setup its runs count as in MLflow: only with the cluster's profile


def never_baseline(config: RunConfig) -> RunConfig:
    return config.model_copy(
        update={"gate": config.gate.model_copy(update={"update_baseline": NEVER_BASELINE})}
    )


def setup_of(task_config: RunConfig, profile: str) -> Setup:
    """The setup of runs made with `task_config` (the config a pipeline task gets) on `profile`."""
    world_sizes = tuple(task_config.bench.world_sizes or ())
    return Setup(profile, capture_fingerprints(task_config)[CONFIG_FINGERPRINT], world_sizes)


def local_setup(config: RunConfig) -> Setup:
    """The setup a local backfill measures: this machine's profile, and the bench configuration the
    pipeline's tasks will see (after the trip through the pipeline's parameters, as `run` makes it).
    ConfigError (exit 2) where tracking is off: a local backfill needs MLflow."""
    if not config.tracking.enabled:
        raise ConfigError(
            "tracking.enabled: got false (a backfill logs each commit's gate run to MLflow, and skips the "
            "commits MLflow already has)"
        )
    from benchgate.measure.env import capture_environment, launch_gpus  # torch: only a local backfill

    task_config = config_from_parameters(**pipeline_arguments(config))
    # The profile a gate run with these world sizes writes (its GPUs per launch, not all that are seen).
    profile = capture_environment(per_launch=launch_gpus(task_config.bench.world_sizes))["machine_profile"]
    return setup_of(task_config, str(profile))


def cluster_arguments(config: RunConfig, commit: str, repository: str, branch: str) -> dict[str, Any]:
    """The pipeline's arguments for one commit: the config's settings as `run` would use them, less what
    belongs to this machine (its paths, the output directory), and never the baseline."""
    dumped = config.model_dump(mode="json", exclude_none=True)
    bench, gate, tracking = dumped["bench"], dumped["gate"], dumped["tracking"]
    # Out of `config`: what goes as a named parameter below (world sizes as world_size_n), and this
    # machine's paths and tracking URI (the cluster's defaults, or mlflow_tracking_uri, stand instead).
    for table, key in (
        (bench, "workload_args"),
        (bench, "world_sizes"),
        (gate, "tolerances"),
        (gate, "update_baseline"),
        (gate, "baseline_dir"),
        (tracking, "uri"),
        (tracking, "local_dir"),
        (tracking, "spool_dir"),
        (dumped, "out"),
    ):
        table.pop(key, None)
    parameters: dict[str, Any] = {
        "workload": config.bench.workload,
        "workload_args": dict(config.bench.workload_args),
        "steps": config.bench.steps,
        "warmup": config.bench.warmup,
        "tolerances": config.gate.tolerances.model_dump(mode="json"),
        "update_baseline": NEVER_BASELINE,
        "config": dumped,
    }
    if config.bench.world_sizes:
        parameters["world_size_n"] = max(config.bench.world_sizes)
    if config.tracking.uri:
        parameters["mlflow_tracking_uri"] = config.tracking.uri
    return build_arguments(commit, repository, branch, parameters, pipeline_parameter_names())


def cluster_config(arguments: Mapping[str, Any]) -> RunConfig:
    """The config a pipeline run with `arguments` gets: the env task's check, made before anything is
    sent, so that a bad setting is exit 2 here and not a failed run on the cluster."""
    return validate_pipeline_arguments(arguments)


def submission(
    config: RunConfig,
    commits: CommitRange,
    kept: Sequence[RangeCommit],
    repository: str,
    profile: str | None,
    environ: Mapping[str, str],
) -> Submission:
    """What `--submit` sends: the pipeline's arguments per commit (checked before anything is sent), the
    KFP connection from `environ`, and, with `profile`, the setup of the runs on the cluster."""

    def arguments_for(commit: RangeCommit) -> dict[str, Any]:
        return cluster_arguments(config, commit.sha, repository, commits.branch)

    task_config = cluster_config(arguments_for(kept[0]))  # every argument checked before anything is sent
    conn = connection_from_env(environ)
    return Submission(arguments_for, conn, setup_of(task_config, profile) if profile else None)


def planned(
    tracker: Tracker | None, setup: Setup | None, kept: Sequence[RangeCommit], force: bool
) -> list[PlannedCommit]:
    """The plan (ranges/backfill.plan) with the gate runs MLflow holds of `setup` for the kept commits;
    without a setup (or a tracker) none is looked up, and every commit is to run."""
    found = measured(tracker, setup, [c.sha for c in kept]) if tracker and setup else {}
    return plan(kept, found, force)


def _rate(out_dir: Path) -> float | None:
    metrics = load_bundle(out_dir).metrics.get(1)
    return bench_figures(metrics).get(RUN_TOKENS_PER_S) if metrics else None


def run_locally(
    steps: Sequence[PlannedCommit],
    config: RunConfig,
    commits: CommitRange,
    out_dir: Path,
    progress: Progress,
) -> tuple[list[Row], BenchgateError | None]:
    """Gate each commit to run, one after the other; rows for every commit reached, and the bad-input
    error that stopped the backfill, if one did."""
    config = never_baseline(config)
    rows: list[Row] = []
    for step in steps:
        if not step.run:
            rows.append(skipped_row(step))
            progress.commit_done(rows[-1])
            continue
        commit = step.commit
        per_commit = config.model_copy(update={"out": out_dir / commit.sha[:12]})
        reporter = progress.commit_started(commit)
        try:
            outcome = run_gate(
                per_commit, reporter, commit=commit.sha, repository=commits.repository, branch=commits.branch
            )
        except BenchgateError as error:
            rows.append(Row(commit, "failed", note=str(error)))
            progress.commit_done(rows[-1])
            if error.exit_code == EXIT_BAD_INPUT:
                return rows, error
            continue
        published = outcome.published
        run_id = str(published.get("mlflow_run_id") or "")
        note = "" if run_id else f"not in MLflow yet: spooled in {published.get('spooled')}"
        rows.append(Row(commit, "ran", outcome.comparison.verdict, _rate(outcome.out_dir), run_id, note))
        progress.commit_done(rows[-1])
    return rows, None


def submit_all(
    steps: Sequence[PlannedCommit],
    arguments_for: Callable[[RangeCommit], dict[str, Any]],
    conn: Connection,
    experiment: str,
    say: Callable[[str], None],
) -> tuple[list[Row], BenchgateError | None]:
    """One pipeline run per commit to run, not waited on; rows as `run_locally`'s."""
    rows: list[Row] = []
    for step in steps:
        if not step.run:
            rows.append(skipped_row(step))
            continue
        try:
            outcome = submit(arguments_for(step.commit), conn, experiment, wait=False, say=say)
        except BenchgateError as error:
            rows.append(Row(step.commit, "failed", note=str(error)))
            if error.exit_code == EXIT_BAD_INPUT:
                return rows, error
            continue
        if outcome.state is not None:  # an earlier attempt that ended without a verdict (submit --rerun)
            rows.append(Row(step.commit, "failed", run_id=outcome.run_id, note=outcome.message))
            continue
        status: Status = "attached" if outcome.reused else "submitted"
        rows.append(Row(step.commit, status, run_id=outcome.run_id, note=outcome.run_name))
    return rows, None


def series_points(tracker: Tracker, setup: Setup, commits: Sequence[RangeCommit]) -> list[HistoryPoint]:
    """Every gate run of the setup for these commits, in their order (a commit's runs by start time)."""
    found = measured(tracker, setup, [c.sha for c in commits])
    points = [point for runs in found.values() for point in runs]
    return in_commit_order(points, [c.sha for c in commits])


def backfill_locally(
    commits: CommitRange,
    steps: Sequence[PlannedCommit],
    config: RunConfig,
    setup: Setup,
    out: Path,
    display: Callable[[int], AbstractContextManager[Progress]],
    say: Callable[[str], None],
) -> BackfillReport:
    """The commits to run gated one by one into `out` (claimed as `benchgate run` claims its --out),
    shown by `display(len(steps))` while they run; then summary.md and backfill.json."""
    with writing("--out", out), outdir.claimed(out) as results:
        results.will_write([SUMMARY_FILE, RECORD_FILE, *(s.commit.sha[:12] for s in steps if s.run)])
        if any(s.run for s in steps):
            with display(len(steps)) as progress:
                rows, stopped = run_locally(steps, config, commits, results.path, progress)
        else:
            say(
                "nothing to run: MLflow holds a gate run of every commit for this setup "
                "(--force runs them again)"
            )
            rows, stopped = [skipped_row(s) for s in steps], None
        return _summarized(commits, rows, stopped, results.path, setup)


def submit_backfill(
    commits: CommitRange,
    steps: Sequence[PlannedCommit],
    target: Submission,
    experiment: str,
    out: Path,
    say: Callable[[str], None],
) -> BackfillReport:
    """One pipeline run per commit to run, not waited on (`submit_all`); then summary.md and
    backfill.json in `out`."""
    with writing("--out", out), outdir.claimed(out) as results:
        results.will_write([SUMMARY_FILE, RECORD_FILE])
        rows, stopped = submit_all(steps, target.arguments_for, target.conn, experiment, say=say)
        return _summarized(commits, rows, stopped, results.path, target.setup)


def _summarized(
    commits: CommitRange, rows: list[Row], stopped: BenchgateError | None, out_dir: Path, setup: Setup | None
) -> BackfillReport:
    """summary.md and backfill.json written in `out_dir`."""
    title = f"backfill {commits.text}"
    record = {
        "range": commits.text,
        "start": commits.start,
        "end": commits.end,
        "setup": asdict(setup) if setup is not None else None,
        "rows": [{**asdict(row), "commit": row.commit.sha, "subject": row.commit.subject} for row in rows],
    }
    with writing("the summary", out_dir / SUMMARY_FILE):
        write_text(out_dir / SUMMARY_FILE, summary_markdown(title, rows))
        write_json(out_dir / RECORD_FILE, record)
    return BackfillReport(title, rows, stopped, out_dir / SUMMARY_FILE)


def range_changes(
    tracker: Tracker, setup: Setup, commits: Sequence[RangeCommit]
) -> tuple[list[HistoryPoint], list[FigureChange]]:
    """The range's runs of the setup (`series_points`) and the change points of every figure over them."""
    points = series_points(tracker, setup, commits)
    return points, figure_changes(points) if points else []
