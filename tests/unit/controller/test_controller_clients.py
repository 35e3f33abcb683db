"""The controller's remote clients (controller/clients.py): against the fake KFP server, the experiment
id cached per namespace is looked up again once KFP no longer has that experiment; against the real
MLflow server behind a proxy that fails first, a run's verdict is read again for a bounded time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from fake_kfp_server import FakeKfp, Scenario, serve
from mlflow import MlflowClient

from benchgate.controller.clients import KfpRuns, Verdicts
from benchgate.controller.metrics import ControllerMetrics
from benchgate.controller.settings import ControllerSettings
from benchgate.errors import RunFailedError
from benchgate.kfp.api import Connection
from benchgate.kfp.submit import load_package
from benchgate.tracking.client import TAG_KFP_RUN_ID, TAG_KIND

REPO = Path(__file__).resolve().parents[3]
ARGUMENTS = {"commit": "a" * 40, "repository": "https://example.com/r.git"}


@pytest.fixture
def kfp() -> Iterator[tuple[FakeKfp, KfpRuns]]:
    fake = FakeKfp(Scenario(token="t", outcome="RUNNING"))
    server, url = serve(fake)
    runs = KfpRuns(ControllerSettings(kfp=Connection(url, "t", url)), ControllerMetrics())
    # The committed gate pipeline, not compiled again: what is tested is the experiment id.
    runs._specs["gate"] = load_package(REPO / "pipelines" / "benchgate.yaml")
    yield fake, runs
    server.shutdown()


def test_a_deleted_experiment_is_looked_up_again_not_cached_for_good(kfp: tuple[FakeKfp, KfpRuns]) -> None:
    fake, runs = kfp
    first, _ = runs.ensure("run-1", ARGUMENTS, "team-a")
    (experiment,) = fake.experiments
    assert fake.runs[first]["experiment_id"] == experiment
    # Someone deletes the experiment in KFP: the next submission is refused (404) once ...
    fake.experiments.clear()
    with pytest.raises(RunFailedError, match="404"):
        runs.ensure("run-2", ARGUMENTS, "team-a")
    # ... and the one after finds (here: recreates) the experiment and submits into it.
    second, reused = runs.ensure("run-2", ARGUMENTS, "team-a")
    (recreated,) = fake.experiments
    assert not reused and recreated != experiment and fake.runs[second]["experiment_id"] == recreated


class FailingFirst:
    """A proxy in front of the real MLflow server that answers its first `failures` API requests with
    HTTP 503 (MLflow restarting, its database failing over); /health always answers."""

    def __init__(self, upstream: str, failures: int) -> None:
        self.upstream, self.failures, self.failed = upstream, failures, 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.startswith("/api/") and proxy.failed < proxy.failures:
                    proxy.failed += 1
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                answer = requests.request(
                    self.command, proxy.upstream + self.path, data=body, headers=headers, timeout=30
                )
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = _forward  # http.server calls do_<METHOD>

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def logged_gate_run(uri: str, experiment: str, kfp_run_id: str) -> str:
    """A gate run in MLflow as the pipeline tags it, for the KFP run `kfp_run_id`; its run id."""
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment(experiment)
    run = client.create_run(experiment_id, tags={TAG_KIND: "gate", TAG_KFP_RUN_ID: kfp_run_id})
    return str(run.info.run_id)


@pytest.mark.parametrize(("failures", "found"), [(3, True), (60, False)])
def test_the_verdict_is_read_again_while_mlflow_fails_for_a_moment(
    mlflow_server: str, failures: int, found: bool
) -> None:
    """MLflow answering 503 for a moment (each try: the request and MLflow's own one retry) does not
    lose the verdict: it is read again, within a bound; MLflow failing longer is raised after it."""
    experiment = f"verdict-retry-{failures}"
    run_id = logged_gate_run(mlflow_server, experiment, f"kfp-{failures}")
    proxy = FailingFirst(mlflow_server, failures)
    try:
        settings = ControllerSettings(
            kfp=Connection("http://kfp.invalid", None, ""),
            mlflow_uri=proxy.url,
            mlflow_wait_s=2.0,
            mlflow_retry_delays_s=(0.2, 0.5),
        )
        verdicts = Verdicts(settings, ControllerMetrics())
        started = time.monotonic()
        if found:
            verdict = verdicts.find(f"kfp-{failures}", experiment)
            assert verdict is not None and verdict["run_id"] == run_id
        else:
            with pytest.raises(Exception, match=r"503|MLflow"):
                verdicts.find(f"kfp-{failures}", experiment)
        # Three tries at most, each a request and MLflow's one retry of it: bounded, not minutes.
        assert proxy.failed == (failures if found else 6)
        assert time.monotonic() - started < 60
    finally:
        proxy.server.shutdown()
