"""Logging a gate run to MLflow: each run as a parent with a child per world size and eval.

Layout in the experiment (default "benchgate"; how MLflow's UI shows it is `view.py`):

    parent  "<VERDICT> on <profile>: <workload> @ <commit12>"  description: compare.md's verdict table
            tags: verdict, machine profile, workload, commit, branch, version, KFP run
            params: the validated config, flattened ("bench.steps", "gate.tolerances....")
            metrics: results.figures.run_figures (ws<N>/..., scaling_efficiency_pct, eval/..., gate/...)
                     and the per-step series ws<N>/step_time_ms, ws<N>/tokens_per_s, ws<N>/loss
            artifacts: env.json, config.json, metrics-ws<N>.json, eval.json, compare.json, compare.md,
                       report.html, trace/
    child   "bench ws=<N>"  that world size's figures, series and system metrics (system/...)
    child   "eval"          perplexity and probe accuracies

Only one process talks to MLflow per run (the task that reaches the final verdict), after the timed
work: logging can never perturb a step time. Everything is sent from a spool entry already on disk
(store/spool.py), tagged with the run's key; a parent is created RUNNING and set FINISHED by the last
call, so a FINISHED parent with the key means "already logged" and an unfinished one is a broken upload
that is deleted and redone. That makes sending idempotent: `benchgate sync` can run any number of times.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchgate._version import __version__
from benchgate.kit import diskfaults
from benchgate.results.bundle import Bundle
from benchgate.results.figures import bench_figures, counted_unit, eval_figures, run_figures
from benchgate.store.spool import SpooledRun, read_entry
from benchgate.tracking.client import (
    TAG_BASELINE,
    TAG_BASELINE_REASON,
    TAG_BASELINE_SINCE,
    TAG_BRANCH,
    TAG_COMMIT,
    TAG_FINGERPRINT,
    TAG_KFP_RUN_ID,
    TAG_KFP_RUN_NAME,
    TAG_KIND,
    TAG_PARENT,
    TAG_PROFILE,
    TAG_REPOSITORY,
    TAG_RUN_KEY,
    TAG_STAGE,
    TAG_VERDICT,
    TAG_VERSION,
    TAG_WORKLOAD,
    Tracker,
    quoted,
)
from benchgate.tracking.view import (
    TAG_DESCRIPTION,
    description,
    metric,
    run_name,
    share_view,
    step_series,
    system_series,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Run

MAX_PARAM_LENGTH = 6000
METRICS_PER_CALL = 1000
PARAMS_PER_CALL = 100


def flatten_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The config as MLflow params: dotted keys, string values cut to MLflow's length limit."""
    params: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            params.update(flatten_params(value, f"{name}."))
        else:
            params[name] = str(value)[:MAX_PARAM_LENGTH]
    return params


def _log_batch(
    client: MlflowClient,
    run_id: str,
    metrics: list[Metric] | None = None,
    params: dict[str, str] | None = None,
) -> None:
    from mlflow.entities import Param

    metrics = metrics or []
    items = [Param(k, v) for k, v in (params or {}).items()]
    for i in range(0, len(items), PARAMS_PER_CALL):
        client.log_batch(run_id, params=items[i : i + PARAMS_PER_CALL], synchronous=True)
    for i in range(0, len(metrics), METRICS_PER_CALL):
        client.log_batch(run_id, metrics=metrics[i : i + METRICS_PER_CALL], synchronous=True)


def _tags(env: dict[str, Any], workload: str, record: dict[str, Any]) -> dict[str, str]:
    git = env.get("git") or {}
    source = env.get("source") or {}
    tags = {
        TAG_PROFILE: env["machine_profile"],
        TAG_WORKLOAD: workload,
        TAG_RUN_KEY: record["run_key"],
        TAG_VERSION: __version__,
        TAG_COMMIT: git.get("commit") or "",
        TAG_BRANCH: git.get("branch") or "",
        TAG_KFP_RUN_ID: record.get("kfp_run_id") or "",
        TAG_KFP_RUN_NAME: record.get("kfp_run_name") or "",
        TAG_REPOSITORY: source.get("repository") or "",
    }
    # Runs recorded before fingerprints existed have none: no tags, rather than empty ones.
    for name, value in sorted((env.get("fingerprints") or {}).items()):
        tags[TAG_FINGERPRINT + name] = str(value)
    return {k: v for k, v in tags.items() if v}


def find_logged(tracker: Tracker, run_key: str) -> list[Run]:
    """The parents logged under `run_key`, finished or not, oldest first (one, unless an upload broke)."""
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`{TAG_RUN_KEY}` = '{quoted(run_key, 'run key')}'",
        order_by=["attributes.start_time ASC"],
    )
    return list(runs)


def log_entry(tracker: Tracker, entry: Path) -> tuple[str, bool]:
    """Log one spool entry (a run's result directory with record.json); returns (parent id, newly).

    The entry is read and checked whole first: a damaged one raises SpoolEntryError before anything is
    sent. A fault of this machine's disk (the local store, the entry) is a DiskError naming the path."""
    run = read_entry(entry)
    with diskfaults.local_faults(tracker.local_dir, entry):
        return _log(tracker, run)


def _log(tracker: Tracker, run: SpooledRun) -> tuple[str, bool]:
    client, record, bundle, comparison = tracker.client, run.record, run.bundle, run.comparison
    logged = find_logged(tracker, record["run_key"])
    finished = [r for r in logged if r.info.status == "FINISHED"]
    # Parents that never finished are uploads a crash or a dead server broke halfway: they are deleted
    # (with their children) and the run is logged whole, unless a finished copy already stands.
    for broken in (r for r in logged if r.info.status != "FINISHED"):
        _delete_with_children(tracker, broken.info.run_id)
    if finished:
        return finished[0].info.run_id, False
    workload = str(bundle.workload)
    started_ms = int(float(record["started_unix"]) * 1e3)
    now_ms = int(time.time() * 1e3)
    tags = _tags(bundle.env, workload, record) | {TAG_KIND: "gate", TAG_VERDICT: comparison.verdict}
    marked = record.get("baseline_since_unix")
    if marked is not None:
        tags |= {
            TAG_BASELINE: "true",
            TAG_BASELINE_SINCE: repr(float(marked)),  # exact: the directory store compares it
            TAG_BASELINE_REASON: str(record.get("baseline_reason", "")),
        }
    parent = client.create_run(
        tracker.experiment_id,
        start_time=started_ms,
        tags=tags | {TAG_DESCRIPTION: description(run.entry, comparison.verdict)},
        run_name=run_name(comparison.verdict, tags[TAG_PROFILE], workload, tags.get(TAG_COMMIT, "")),
    )
    parent_id = parent.info.run_id
    share_view(client, tracker.experiment_id, bundle.metrics)  # its columns for this run's world sizes
    metrics = [metric(k, v, now_ms) for k, v in run_figures(bundle, comparison).items()]
    for ws, m in sorted(bundle.metrics.items()):
        metrics += step_series(f"ws{ws}/", m, now_ms)
    _log_batch(client, parent_id, metrics, flatten_params(run.config))
    client.log_artifacts(parent_id, str(run.entry))
    # Children share the parent's identity (profile, commit, ...) for filtering, not its baseline mark.
    child_tags = {k: v for k, v in tags.items() if not k.startswith(("benchgate.baseline", TAG_RUN_KEY))}
    _log_children(
        tracker, bundle, child_tags | {TAG_KIND: "stage", TAG_PARENT: parent_id}, started_ms, now_ms
    )
    # Last: FINISHED is what tells a complete upload from a broken one.
    client.set_terminated(parent_id, "FINISHED", now_ms)
    return parent_id, True


def _log_children(
    tracker: Tracker, bundle: Bundle, tags: dict[str, str], started_ms: int, now_ms: int
) -> None:
    """One finished child per world size (figures, series, system metrics) and one for eval."""

    def child(name: str, metrics: list[Metric], params: dict[str, str] | None = None) -> None:
        run = tracker.client.create_run(
            tracker.experiment_id, start_time=started_ms, tags=tags | {TAG_STAGE: name}, run_name=name
        )
        _log_batch(tracker.client, run.info.run_id, metrics, params)
        tracker.client.set_terminated(run.info.run_id, "FINISHED", now_ms)

    for ws, m in sorted(bundle.metrics.items()):
        figures = [metric(k, v, now_ms) for k, v in bench_figures(m).items()]
        params = {key: str(m.get(key)) for key in ("threads_per_rank", "timing", "precision")}
        params["unit"] = counted_unit(m)  # what the tokens_per_s figures count: tokens, images, clips
        child(
            f"bench ws={ws}",
            figures + step_series("", m, now_ms) + system_series(m, started_ms),
            {"world_size": str(ws), **params},
        )
    if bundle.eval and "perplexity" in bundle.eval:
        child(
            "eval",
            [metric(k.removeprefix("eval/"), v, now_ms) for k, v in eval_figures(bundle.eval).items()],
        )


def _delete_with_children(tracker: Tracker, parent_id: str) -> None:
    children = tracker.client.search_runs(
        [tracker.experiment_id], filter_string=f"tags.`{TAG_PARENT}` = '{parent_id}'"
    )
    for child in children:
        tracker.client.delete_run(child.info.run_id)
    tracker.client.delete_run(parent_id)
