"""The controller's metrics from plain watch events, read back the way Prometheus parses them."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchgate.controller.clients import _kfp_outcome
from benchgate.controller.metrics import ControllerMetrics
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.api import KfpRefused, KfpRejected

CREATED = {"creationTimestamp": "2026-11-25T10:00:00Z"}


def samples(metrics: ControllerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_runs_are_counted_by_namespace_and_phase_and_the_queue_is_the_pending_ones() -> None:
    m = ControllerMetrics()
    m.observe_run("ADDED", "team-a", "new", CREATED, {})
    m.observe_run("ADDED", "team-a", "waits", CREATED, {"phase": "Pending"})
    m.observe_run("ADDED", "team-a", "runs", CREATED, {"phase": "Running", "kfpRunId": "r1"})
    m.observe_run("ADDED", "team-b", "done", CREATED, {"phase": "Succeeded", "kfpRunId": "r2"})
    m.observe_run("MODIFIED", "team-a", "new", CREATED, {"phase": "Pending"})
    got = samples(m)
    assert got[("benchgate_benchmarkruns", (("namespace", "team-a"), ("phase", "Pending")))] == 2
    assert got[("benchgate_benchmarkruns", (("namespace", "team-a"), ("phase", "Running")))] == 1
    assert ("benchgate_benchmarkruns", (("namespace", "team-a"), ("phase", "New"))) not in got
    assert got[("benchgate_queue_depth", (("namespace", "team-a"),))] == 2
    assert got[("benchgate_queue_depth", (("namespace", "team-b"),))] == 0
    m.observe_run("DELETED", "team-a", "waits", CREATED, {"phase": "Pending"})
    m.observe_run("MODIFIED", "team-a", "new", {**CREATED, "deletionTimestamp": "x"}, {"phase": "Pending"})
    assert samples(m)[("benchgate_queue_depth", (("namespace", "team-a"),))] == 0


def test_submit_latency_is_observed_once_for_a_submission_seen_to_happen() -> None:
    m = ControllerMetrics()
    m.observe_run("ADDED", "team-a", "pr-1", CREATED, {})
    m.observe_run("MODIFIED", "team-a", "pr-1", CREATED, {"phase": "Pending"})
    submitted = {"phase": "Submitted", "kfpRunId": "r1", "startTime": "2026-11-25T10:00:03Z"}
    m.observe_run("MODIFIED", "team-a", "pr-1", CREATED, submitted)
    m.observe_run("MODIFIED", "team-a", "pr-1", CREATED, {**submitted, "phase": "Running"})
    # Submitted before this controller started: its latency would be the downtime, not counted.
    m.observe_run(None, "team-a", "old", CREATED, {**submitted, "startTime": "2026-11-25T12:00:00Z"})
    got = samples(m)
    assert got[("benchgate_submit_latency_seconds_count", ())] == 1
    assert got[("benchgate_submit_latency_seconds_sum", ())] == 3.0
    assert got[("benchgate_submit_latency_seconds_bucket", (("le", "5.0"),))] == 1
    assert got[("benchgate_submit_latency_seconds_bucket", (("le", "2.0"),))] == 0


def test_kfp_calls_are_counted_by_outcome_and_an_unknown_outcome_is_refused() -> None:
    m = ControllerMetrics()
    m.kfp_request("submit", "ok")
    m.kfp_request("state", "unavailable")
    m.kfp_request("state", "unavailable")
    m.mlflow_error("verdict")
    got = samples(m)
    assert got[("benchgate_kfp_requests_total", (("operation", "state"), ("outcome", "unavailable")))] == 2
    assert got[("benchgate_kfp_requests_total", (("operation", "submit"), ("outcome", "ok")))] == 1
    assert got[("benchgate_mlflow_errors_total", (("operation", "verdict"),))] == 1
    with pytest.raises(ValueError, match="outcome: got 'fine'"):
        m.kfp_request("state", "fine")


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (KfpRefused("401"), "unauthorized"),
        (KfpRejected("400"), "rejected"),
        (ConfigError("terminate refused"), "rejected"),
        (RunFailedError("503"), "unavailable"),
        (TimeoutError(), "unavailable"),
    ],
)
def test_kfp_errors_are_classified(error: BaseException, outcome: str) -> None:
    assert _kfp_outcome(error) == outcome


def test_two_controllers_in_one_process_keep_their_own_counts() -> None:
    a, b = ControllerMetrics(), ControllerMetrics()
    a.kfp_request("submit", "ok")
    assert ("benchgate_kfp_requests_total", (("operation", "submit"), ("outcome", "ok"))) not in samples(b)


@pytest.mark.asyncio
async def test_readiness_waits_for_the_controller_and_metrics_are_prometheus_text() -> None:
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from benchgate.controller.probes import app

    ready = asyncio.Event()
    async with TestClient(TestServer(app(ControllerMetrics(), ready))) as client:
        assert (await client.get("/readyz")).status == 503
        ready.set()
        assert (await client.get("/readyz")).status == 200
        scraped = await client.get("/metrics")
        assert scraped.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "benchgate_submit_latency_seconds_count 0.0" in await scraped.text()
