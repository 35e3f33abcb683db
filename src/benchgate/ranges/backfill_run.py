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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from benchgate.config import RunConfig
from benchgate.errors import EXIT_BAD_INPUT, BenchgateError
from benchgate.history.series import in_commit_order
from benchgate.kfp.api import Connection
from benchgate.kfp.local_run import pipeline_arguments, run_gate
from benchgate.kfp.params import config_from_parameters
from benchgate.kfp.pipeline import validate_pipeline_arguments
from benchgate.kfp.submit import build_arguments, pipeline_parameter_names, submit
from benchgate.kit.progress import Reporter
from benchgate.measure.fingerprint import capture_fingerprints
from benchgate.ranges.backfill import PlannedCommit, Row, Status, skipped_row
from benchgate.ranges.commits import CommitRange, RangeCommit
from benchgate.results.bundle import load_bundle
from benchgate.results.figures import RUN_TOKENS_PER_S, HistoryPoint, bench_figures
from benchgate.tracking.backfill_index import CONFIG_FINGERPRINT, Setup, measured
from benchgate.tracking.client import Tracker

NEVER_BASELINE = "never"


class Progress(Protocol):
    """What the backfill tells its caller: a commit's gate starts (its stages go to the Reporter
    returned), a commit is done."""

    def commit_started(self, commit: RangeCommit) -> Reporter: ...
    def commit_done(self, row: Row) -> None: ...


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
    pipeline's tasks will see (after the trip through the pipeline's parameters, as `run` makes it)."""
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
            outcome = run_gate(per_commit, reporter, commit.sha, commits.repository, commits.branch)
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
