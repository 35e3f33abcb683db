"""The controller's /metrics and /readyz, scraped from the real controller as Prometheus would."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import aiohttp
import pytest
from operator_harness import Cluster, run_manifest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.asyncio


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT = free_port()


async def scrape(path: str = "/metrics") -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        response = await http.get(f"http://127.0.0.1:{PORT}{path}")
        return response.status, await response.text()


def value(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


@pytest.mark.parametrize("cluster", [{"metrics_port": PORT, "max_active_per_namespace": 1}], indirect=True)
async def test_metrics_follow_runs_queue_and_kfp_errors(cluster: Cluster) -> None:
    assert (await scrape("/readyz"))[0] == 200
    await cluster.create(run_manifest("first"))
    await cluster.phase("first", "Running")
    await cluster.create(run_manifest("second"))
    await cluster.phase("second", "Pending")
    text = ""

    async def settled() -> Any:
        nonlocal text
        text = (await scrape())[1]
        return value(text, "benchgate_queue_depth", namespace="team-a") == 1

    await _until(settled)
    assert value(text, "benchgate_benchmarkruns", namespace="team-a", phase="Running") == 1
    assert value(text, "benchgate_submit_latency_seconds_count") == 1
    assert value(text, "benchgate_kfp_requests_total", operation="submit", outcome="ok") == 1
    assert value(text, "benchgate_kfp_requests_total", operation="state", outcome="ok") >= 1
    # KFP down: the looks at the running run fail, and are counted as such.
    cluster.kfp.scenario.fail_with = 503

    async def counted() -> Any:
        nonlocal text
        text = (await scrape())[1]
        return value(text, "benchgate_kfp_requests_total", operation="state", outcome="unavailable") >= 1

    await _until(counted)
    cluster.kfp.scenario.fail_with = None


async def _until(check: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the metrics never showed {check.__name__} within {timeout_s} s")
