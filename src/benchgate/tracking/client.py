"""The connection to MLflow: where it is, whether it answers, the experiment, and the tags a run carries.

A baseline is a FINISHED parent tagged benchgate.baseline=true; the newest by its marking time wins.
Logging a run is `record.py`; reading runs back (search, history, baselines, promotion) is `read.py`.

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
from typing import TYPE_CHECKING

import requests

from benchgate.config import RunConfig
from benchgate.errors import BadInputError
from benchgate.kit import diskfaults
from benchgate.kit.credentials import MLFLOW_INSTEAD, refuse_credentials
from benchgate.tracking.view import EXPERIMENT_KIND, TAG_EXPERIMENT_KIND, mark_experiment_kind, ui_url

if TYPE_CHECKING:
    from mlflow import MlflowClient


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
# An accepted change: who accepted it, why, when (`benchgate history ack`); history --check skips it.
TAG_ACK_REASON = "benchgate.ack_reason"
TAG_ACK_BY = "benchgate.ack_by"
TAG_ACK_UNIX = "benchgate.ack_unix"
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


def quoted(value: str, what: str) -> str:
    """A value safe inside a single-quoted MLflow filter string (MLflow's grammar has no escapes)."""
    if "'" in value or "\\" in value:
        raise BadInputError(f"{what}: got {value!r} (quotes and backslashes cannot be searched for)")
    return value


def run_url(tracker: Tracker, run_id: str) -> str | None:
    """The run's page in the MLflow UI (None for the embedded store: `make ui` serves it)."""
    if not tracker.uri.startswith(("http://", "https://")):
        return None
    return ui_url(tracker.uri, tracker.experiment_id, run_id)
