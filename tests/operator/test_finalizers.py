"""`benchgate release-finalizers` (the chart's pre-delete hook) against kmock's emulated API: benchgate's
finalizer removed from every BenchmarkRun and BenchmarkSchedule, every other finalizer kept. No
controller runs: this is what an uninstall does once it is gone."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from operator_harness import TEST_CLIENT, run_manifest, schedule_manifest
from typer.testing import CliRunner

from benchgate.cli.main import app
from benchgate.controller.access import FINALIZER, GROUP, KOPF_DEFAULT_FINALIZER, VERSION

pytestmark = pytest.mark.asyncio

OTHER = "example.com/keep-me"


async def post(url: str, plural: str, manifest: dict[str, Any], finalizers: list[str]) -> None:
    meta = {
        **manifest["metadata"],
        "finalizers": finalizers,
        "resourceVersion": "1",
        "uid": manifest["metadata"]["name"],
    }
    path = f"{url}/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/{plural}"
    async with aiohttp.ClientSession(headers=TEST_CLIENT) as http:
        response = await http.post(path, json={**manifest, "metadata": meta})
        assert response.status in (200, 201), await response.text()


def stored(kmock: Any, plural: str, name: str) -> dict[str, Any]:
    (found,) = [obj for (res, _ns, n), obj in kmock.objects.items() if res.plural == plural and n == name]
    return dict(found.raw)


async def test_release_finalizers_removes_only_benchgates(kmock: Any) -> None:
    kmock.resources.load_bundled()
    for plural, kind in (("benchmarkruns", "BenchmarkRun"), ("benchmarkschedules", "BenchmarkSchedule")):
        kmock.resources[f"{GROUP}/{VERSION}/{plural}"] = {
            "kind": kind,
            "namespaced": True,
            "verbs": {"list", "watch", "get", "create", "patch", "update", "delete"},
            "subresources": {"status"},
        }
    url = str(kmock.url).rstrip("/")
    await post(url, "benchmarkruns", run_manifest("held"), [OTHER, FINALIZER])
    await post(url, "benchmarkruns", run_manifest("legacy"), [KOPF_DEFAULT_FINALIZER])
    await post(url, "benchmarkruns", run_manifest("free"), [OTHER])
    schedule = schedule_manifest("nightly", "https://example.com/repo.git")
    await post(url, "benchmarkschedules", schedule, [FINALIZER])

    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["release-finalizers", "--server", url], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "released 3 object(s)" in result.output
    assert stored(kmock, "benchmarkruns", "held")["metadata"]["finalizers"] == [OTHER]
    assert not stored(kmock, "benchmarkruns", "legacy")["metadata"].get("finalizers")
    assert stored(kmock, "benchmarkruns", "free")["metadata"]["finalizers"] == [OTHER]
    assert not stored(kmock, "benchmarkschedules", "nightly")["metadata"].get("finalizers")
    # Nothing but benchgate's finalizers was written: only the three patches, each of metadata alone.
    patches = [r for r in list(kmock) if r.method == "PATCH"]
    assert len(patches) == 3
    assert all(set(r.data) == {"metadata"} for r in patches)
