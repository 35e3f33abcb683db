"""MLflow adapter: each gate run as a parent run with a child per world size and eval; baselines back.

Layout in the experiment (default "benchgate"; how MLflow's UI shows it is `tracking_view.py`):

    parent  "<VERDICT> on <profile>: <workload> @ <commit12>"  description: compare.md's verdict table
            tags: verdict, machine profile, workload, commit, branch, version, KFP run
            params: the validated config, flattened ("bench.steps", "gate.tolerances....")
            metrics: figures.run_figures (ws<N>/..., scaling_efficiency_pct, eval/..., gate/...) and the
                     per-step series ws<N>/step_time_ms, ws<N>/tokens_per_s, ws<N>/loss
            artifacts: env.json, config.json, metrics-ws<N>.json, eval.json, compare.json, compare.md,
                       report.html, trace/
    child   "bench ws=<N>"  that world size's figures, series and system metrics (system/...)
    child   "eval"          perplexity and probe accuracies

Only one process talks to MLflow per run (the task that reaches the final verdict), after the timed
work: logging can never perturb a step time. Everything is sent from a spool entry already on disk
(spool.py), tagged with the run's key; a parent is created RUNNING and set FINISHED by the last call,
so a FINISHED parent with the key means "already logged" and an unfinished one is a broken upload
that is deleted and redone. That makes sending idempotent: `benchgate sync` can run any number of times.

A baseline is a FINISHED parent tagged benchgate.baseline=true; the newest by its marking time wins.
Reading runs back (search, history, baselines, promotion) is `tracking_read.py`.

Waiting is bounded: http(s) servers are probed on /health until a deadline before any MLflow call, and
MLflow's own retries (which wait ~4 minutes on a dead server by default) are cut to one short retry.

Two kinds of failure, told apart here: the server (down, refusing, answering errors: `send_errors`, an
outage the run survives on its spool and cached baseline) and this machine's disk (full, read-only,
no permission: a DiskError naming the path, exit 3). `requests`' ConnectionError is an OSError too, so
the test is what the error says about the disk (`local_fault`), not its class.
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from benchgate import __version__, diskfaults
from benchgate.config import RunConfig
from benchgate.credentials import MLFLOW_INSTEAD, refuse_credentials
from benchgate.errors import BadInputError
from benchgate.figures import bench_figures, eval_figures, run_figures
from benchgate.results import Bundle
from benchgate.spool import SpooledRun, read_entry
from benchgate.tracking_view import (
    EXPERIMENT_KIND,
    TAG_DESCRIPTION,
    TAG_EXPERIMENT_KIND,
    description,
    mark_experiment_kind,
    metric,
    run_name,
    share_view,
    step_series,
    system_series,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Run

TAG_KIND = "benchgate.kind"  # "gate" on parents, "stage" on children
TAG_PROFILE = "benchgate.machine_profile"
TAG_WORKLOAD = "benchgate.workload"
TAG_RUN_KEY = "benchgate.run_key"
TAG_VERSION = "benchgate.version"
TAG_VERDICT = "benchgate.verdict"
TAG_KFP_RUN_ID = "benchgate.kfp_run_id"
TAG_KFP_RUN_NAME = "benchgate.kfp_run_name"
TAG_REPOSITORY = "benchgate.repository"
TAG_BASELINE = "benchgate.baseline"
TAG_BASELINE_SINCE = "benchgate.baseline_since_unix"
TAG_BASELINE_REASON = "benchgate.baseline_reason"
TAG_STAGE = "benchgate.stage"
TAG_FINGERPRINT = "benchgate.fingerprint."  # + the name: what A/B held fixed (fingerprint.py)
TAG_COMMIT = "mlflow.source.git.commit"
TAG_BRANCH = "mlflow.source.git.branch"
TAG_PARENT = "mlflow.parentRunId"

# MLflow's defaults retry a dead server for ~4 minutes per call; a gate run has max_wait_s in total.
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}
PROBE_TIMEOUT_S = 3.0
MAX_PARAM_LENGTH = 6000
METRICS_PER_CALL = 1000
PARAMS_PER_CALL = 100


class TrackingUnavailable(Exception):
    """The tracking server could not be used; `waited_s` is how long we waited on it."""

    def __init__(self, message: str, waited_s: float = 0.0) -> None:
        super().__init__(message)
        self.waited_s = waited_s


def send_errors() -> tuple[type[BaseException], ...]:
    """What a server that is down, refusing or failing raises: an outage, not a fault of this machine.
    (No plain OSError: a disk fault is an OSError too, and is a DiskError before it gets here.)"""
    from mlflow.exceptions import MlflowException

    return (
        TrackingUnavailable,
        MlflowException,
        requests.RequestException,
        ConnectionError,
        TimeoutError,
        socket.gaierror,
        http.client.HTTPException,
    )


def resolve_uri(config: RunConfig) -> str:
    """config.tracking.uri, else MLFLOW_TRACKING_URI, else the embedded SQLite store in local_dir."""
    uri = config.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    refuse_credentials(uri, "tracking.uri" if config.tracking.uri else "MLFLOW_TRACKING_URI", MLFLOW_INSTEAD)
    if uri:
        return uri
    return f"sqlite:///{(Path(config.tracking.local_dir) / 'mlflow.db').resolve()}"


def is_local_store(config: RunConfig) -> bool:
    return not (config.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI"))


def _probe(uri: str, deadline: float) -> None:
    """Wait until an http(s) server answers /health, or raise at the deadline (other stores: no probe)."""
    if not uri.startswith(("http://", "https://")):
        return
    started = time.monotonic()
    error = ""
    while True:
        remaining = deadline - time.monotonic()
        try:
            response = requests.get(
                f"{uri.rstrip('/')}/health", timeout=max(0.2, min(PROBE_TIMEOUT_S, remaining))
            )
            if response.status_code < 500:
                return
            error = f"HTTP {response.status_code}"
        except requests.RequestException as e:
            error = type(e).__name__
        if time.monotonic() + 1.0 > deadline:
            waited = time.monotonic() - started
            raise TrackingUnavailable(
                f"MLflow at {uri} is unreachable ({error}) after {waited:.1f} s", waited
            )
        time.sleep(1.0)


@dataclass
class Tracker:
    """A reachable tracking store and the experiment the gate runs go to."""

    uri: str
    client: MlflowClient
    experiment_id: str
    # The directory of a store on this machine's disk (the embedded SQLite store), None for a server.
    local_dir: Path | None = None


def local_store_path(uri: str) -> Path | None:
    """What a store on this machine's disk is: its SQLite file (sqlite:///…), its directory (file:…)."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///").split("?")[0])
    if uri.startswith("file:"):
        return Path(uri.removeprefix("file:").removeprefix("//"))
    return None


def connect(config: RunConfig, budget_s: float | None = None) -> Tracker:
    """Reach the tracking store within `budget_s` (default tracking.max_wait_s) and open the experiment.

    A store on this machine's disk that does not exist yet and cannot be created is a DiskError at once,
    as is any later write its disk refuses (`local_faults`)."""
    budget = config.tracking.max_wait_s if budget_s is None else budget_s
    started = time.monotonic()
    uri = resolve_uri(config)
    _probe(uri, started + budget)
    for name, value in HTTP_LIMITS.items():
        os.environ.setdefault(name, value)  # an operator's explicit setting wins
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    store = local_store_path(uri)
    local_dir = store.parent if store is not None and uri.startswith("sqlite:") else store
    if store is not None:
        # MLflow logs a SQLite failure with its traceback before raising it; the user gets the error
        # itself, named (a DiskError, or the MLflow error), and never a traceback.
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    if store is not None and local_dir is not None and not store.exists():
        # MLflow would retry creating a store it cannot write for minutes, then fail naming no path. An
        # existing store is only checked when written to: reading a read-only one is fine.
        diskfaults.check_writable(local_dir)
    try:
        with diskfaults.local_faults(local_dir):
            client = MlflowClient(tracking_uri=uri)
            experiment_id = _experiment(client, config)
    except (MlflowException, requests.RequestException, OSError) as e:
        waited = time.monotonic() - started
        raise TrackingUnavailable(f"MLflow at {uri}: {short_error(e)}", waited) from None
    return Tracker(uri, client, experiment_id, local_dir)


def short_error(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def _experiment(client: MlflowClient, config: RunConfig) -> str:
    from mlflow.exceptions import MlflowException

    name = config.tracking.experiment
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        mark_experiment_kind(client, experiment)
        return str(experiment.experiment_id)
    location = None
    if is_local_store(config):
        # Artifacts beside the SQLite file, not in ./mlruns of whatever directory a task runs in.
        location = (Path(config.tracking.local_dir) / "artifacts").resolve().as_uri()
    try:
        return str(
            client.create_experiment(
                name, artifact_location=location, tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND}
            )
        )
    except MlflowException:  # created meanwhile by another run
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return str(experiment.experiment_id)


# ---------------------------------------------------------------- writing


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


def quoted(value: str, what: str) -> str:
    """A value safe inside a single-quoted MLflow filter string (MLflow's grammar has no escapes)."""
    if "'" in value or "\\" in value:
        raise BadInputError(f"{what}: got {value!r} (quotes and backslashes cannot be searched for)")
    return value


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
