"""Two controllers against one cluster: kopf peering lets exactly one of them act.

Two real controller instances (each its own kopf registry, runtime, thread and event loop, as two
pods would be) run against the same kmock API server and FAKE KFP server, peered through a
ClusterKopfPeering. kmock serves every watch to both, so without peering both would handle each
BenchmarkRun. Each instance logs in with a token of its own, which tells their requests apart in
kmock's request log.

As in the other operator tests, every request either instance sent is audited against the chart's
RBAC (here: cluster-wide, with peering) and every status it wrote against the status model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import kopf
import pytest
import pytest_asyncio
from fake_kfp_server import FakeKfp
from operator_harness import (
    POLL_S,
    REPO,
    TEST_CLIENT,
    Cluster,
    FastClock,
    forbidden_requests,
    load_yaml,
    refused_statuses,
    run_manifest,
    verb_of,
    written_statuses,
)

from benchgate.controller.access import GROUP, PEERING_GROUP, VERSION, required_access
from benchgate.controller.main import ControllerThread, build
from benchgate.controller.settings import ControllerSettings
from benchgate.kfp.api import Connection

pytestmark = pytest.mark.asyncio

PEERING = "benchgate-test"
PEERING_CRDS = REPO / "charts" / "benchgate" / "crds" / "kopf-peering.yaml"
# Long enough that a keep-alive late on a loaded host (they come every 1 to 5 s) never makes a live
# peer look dead; the takeovers tested here follow a clean exit, which does not wait for it.
LIFETIME_S = 10


@dataclass
class Instance:
    name: str
    thread: ControllerThread
    running: bool = True
    metrics: Any = None

    @property
    def active(self) -> float | None:
        """Its gauge benchgate_controller_active (1: it acts; 0: paused by a peer)."""
        return self.metrics.registry.get_sample_value("benchgate_controller_active")

    @property
    def authorization(self) -> str:
        return f"Bearer {self.name}"


@dataclass
class Peers:
    """The cluster both instances share, and the instances started on it."""

    cluster: Cluster
    kmock: Any
    url: str
    kfp_url: str
    namespace: str | None  # None: cluster-wide controllers (a ClusterKopfPeering), else a KopfPeering here
    instances: list[Instance] = field(default_factory=list)

    @property
    def peering_url(self) -> str:
        """The peering object's URL, without the name."""
        base = f"{self.url}/apis/{PEERING_GROUP}/v1"
        if self.namespace is None:
            return f"{base}/clusterkopfpeerings"
        return f"{base}/namespaces/{self.namespace}/kopfpeerings"

    async def start(self, name: str, priority: int, peering: str = PEERING) -> Instance:
        """A controller peered in `peering` (empty: standalone) with `priority`, logging in (and
        named) as `name`."""
        settings = ControllerSettings(
            kfp=Connection(self.kfp_url, "controller-token", self.kfp_url),
            poll_s=POLL_S,
            schedule_poll_s=POLL_S,
            peering_name=peering,
            peering_priority=priority,
            peering_lifetime_s=LIFETIME_S,
            watch_namespace=self.namespace or "",
        )
        registry, runtime = build(settings, kube_host=self.url, clock=self.cluster.clock)
        url = self.url

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=url, token=name)

        thread = ControllerThread(settings, registry, runtime, identity=name)
        instance = Instance(name, thread, metrics=runtime.metrics)
        self.instances.append(instance)
        assert await asyncio.to_thread(thread.start, 20), f"{name} did not start within 20 s"
        if not peering:
            return instance
        # Its keep-alive is in the peering object: from now on every peer started later sees it.
        await self.cluster.wait(lambda: name in self.peers(), 20, f"{name}'s keep-alive")
        return instance

    async def stop(self, instance: Instance) -> None:
        assert await asyncio.to_thread(instance.thread.stop, 20), f"{instance.name} did not stop"
        instance.running = False

    def peers(self) -> dict[str, Any]:
        """The keep-alives in the peering object: identity -> {priority, lifetime, lastseen}."""
        plural = "clusterkopfpeerings" if self.namespace is None else "kopfpeerings"
        for (resource, ns, name), obj in self.kmock.objects.items():
            if (resource.plural, ns, name) == (plural, self.namespace, PEERING) and not obj.deleted:
                return dict(obj.raw.get("status") or {})
        return {}

    async def keep_alive(self, identity: str, priority: int, lifetime_s: int) -> None:
        """A keep-alive written as of now for a peer that is not one of the instances: what `kopf
        freeze` writes, or what a pod leaves behind when it dies without exiting."""
        entry = {"priority": priority, "lifetime": lifetime_s, "lastseen": datetime.now(UTC).isoformat()}
        async with aiohttp.ClientSession(headers=TEST_CLIENT) as http:
            response = await http.patch(
                f"{self.peering_url}/{PEERING}",
                json={"status": {identity: entry}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            assert response.status == 200, await response.text()

    def run_writes(self, instance: Instance) -> list[Any]:
        """Every change `instance` sent to a BenchmarkRun (its annotations, finalizer or status)."""
        return [
            request
            for request in list(self.kmock)
            if request.resource is not None
            and request.resource.plural == "benchmarkruns"
            and verb_of(request) in ("patch", "update", "create", "delete")
            and authorization(request) == instance.authorization
        ]

    def status_writers(self, run: str) -> set[str]:
        """Who wrote the status of BenchmarkRun `run`, by login token."""
        return {
            authorization(request).removeprefix("Bearer ")
            for request in list(self.kmock)
            if request.resource is not None
            and request.resource.plural == "benchmarkruns"
            and request.subresource == "status"
            and request.name == run
            and verb_of(request) == "patch"
        }


def authorization(request: Any) -> str:
    headers = {k.lower(): v for k, v in dict(request.headers).items()}
    return str(headers.get("authorization", ""))


@pytest_asyncio.fixture
async def peers(
    kmock: Any, fake_kfp: tuple[FakeKfp, str], request: pytest.FixtureRequest
) -> AsyncIterator[Peers]:
    """Nothing running yet; the peering object created. `indirect` parameter: "namespaced" for
    controllers that watch only team-a, as with the chart's rbac.namespaced (default: cluster-wide)."""
    namespaced = getattr(request, "param", "") == "namespaced"
    kmock.resources.load_bundled()
    for plural, kind in (("benchmarkruns", "BenchmarkRun"), ("benchmarkschedules", "BenchmarkSchedule")):
        kmock.resources[f"{GROUP}/{VERSION}/{plural}"] = {
            "kind": kind,
            "namespaced": True,
            "verbs": {"list", "watch", "get", "create", "patch", "update", "delete"},
            "subresources": {"status"},
        }
    # kopf's peering kinds, as the chart's crds/ defines them (no status subresource).
    for crd in load_yaml(PEERING_CRDS):
        spec = crd["spec"]
        for version in spec["versions"]:
            kmock.resources[f"{spec['group']}/{version['name']}/{spec['names']['plural']}"] = {
                "kind": spec["names"]["kind"],
                "namespaced": spec["scope"] == "Namespaced",
                "verbs": {"list", "watch", "get", "create", "patch", "update", "delete"},
                "subresources": set(version.get("subresources", {})),
            }
    url = str(kmock.url).rstrip("/")
    state, kfp_url = fake_kfp
    cluster = Cluster(kmock, url, state, kfp_url, FastClock(1.0), runtime=None)
    harness = Peers(cluster, kmock, url, kfp_url, "team-a" if namespaced else None)
    # The peering object exists before any controller starts, as the chart creates it.
    metadata = {"name": PEERING} if not namespaced else {"name": PEERING, "namespace": "team-a"}
    kind = "KopfPeering" if namespaced else "ClusterKopfPeering"
    async with aiohttp.ClientSession(headers=TEST_CLIENT) as http:
        body = {"apiVersion": f"{PEERING_GROUP}/v1", "kind": kind, "metadata": metadata}
        response = await http.post(harness.peering_url, json=body)
        assert response.status in (200, 201), await response.text()
    yield harness
    for instance in harness.instances:
        if instance.running:
            await harness.stop(instance)
    assert forbidden_requests(kmock, required_access(namespaced=namespaced, peering=True)) == []
    refused = refused_statuses(written_statuses(kmock))
    assert not refused, "\n".join(refused)


async def settle(check: Callable[[], Any], what: str) -> None:
    """Several poll intervals in which `check` must hold throughout (a standby that acted would
    have written by then: the follow timer ticks every POLL_S)."""
    for _ in range(10):
        assert check(), what
        await asyncio.sleep(POLL_S)


async def test_without_peering_both_instances_act(peers: Peers) -> None:
    """What peering prevents, and proof that the checks below can see it: two standalone instances
    (BENCHGATE_PEERING empty, as every controller ran before) both handle the same BenchmarkRun."""
    first = await peers.start("first", priority=0, peering="")
    second = await peers.start("second", priority=0, peering="")
    # A slow KFP keeps the first submission in flight until the second instance has taken up the new
    # object too: otherwise, on a loaded host, it may only see the first's finished status, and skip.
    peers.cluster.kfp.scenario.create_delay_s = 1.0
    await peers.cluster.create(run_manifest("pr-1"))
    await peers.cluster.phase("pr-1", "Running")
    await peers.cluster.wait(
        lambda: peers.run_writes(first) and peers.run_writes(second), what="writes from both instances"
    )
    assert peers.peers() == {}
    assert first.active == second.active == 1  # standalone: each acts from the start


@pytest.mark.parametrize("peers", ["cluster-wide", "namespaced"], indirect=True)
async def test_two_instances_one_run_one_kfp_run(peers: Peers) -> None:
    active = await peers.start("active", priority=200)
    standby = await peers.start("standby", priority=100)
    assert {name: p["priority"] for name, p in peers.peers().items()} == {"active": 200, "standby": 100}

    await peers.cluster.create(run_manifest("pr-1"))
    await peers.cluster.phase("pr-1", "Running")
    await settle(lambda: len(peers.cluster.kfp.created_runs) == 1, "one KFP run")
    # Every write to the run came from the active instance; the standby did not touch it.
    assert peers.status_writers("pr-1") == {"active"}
    assert peers.run_writes(active) and peers.run_writes(standby) == []


async def test_the_standby_takes_over_when_the_active_stops(peers: Peers) -> None:
    active = await peers.start("active", priority=200)
    standby = await peers.start("standby", priority=100)
    await peers.cluster.create(run_manifest("pr-1"))
    await peers.cluster.phase("pr-1", "Running")

    # Both are Ready; the gauge says which one acts.
    await peers.cluster.wait(lambda: (active.active, standby.active) == (1, 0), what="the active gauges")

    # A clean exit removes the active instance's keep-alive, and the standby resumes at once.
    await peers.stop(active)
    assert "active" not in peers.peers()
    await peers.cluster.create(run_manifest("pr-2"))
    await peers.cluster.phase("pr-2", "Running")
    assert peers.status_writers("pr-2") == {"standby"}
    assert standby.active == 1
    # pr-1 is followed on, not submitted again: the standby read kopf's record of the submission.
    await settle(lambda: len(peers.cluster.kfp.created_runs) == 2, "two KFP runs, one per BenchmarkRun")
    assert peers.status_writers("pr-1") == {"active"}
    assert standby.running


async def test_equal_priorities_pause_both(peers: Peers, caplog: pytest.LogCaptureFixture) -> None:
    """kopf's rule, which the chart's per-pod "auto" priorities exist for: two live peers of the same
    priority both pause, and say so."""
    caplog.set_level(logging.WARNING, logger="kopf")
    first = await peers.start("first", priority=100)
    second = await peers.start("second", priority=100)
    await peers.cluster.create(run_manifest("pr-1"))
    await settle(
        lambda: peers.cluster.kfp.created_runs == [] and peers.cluster.status("pr-1") == {},
        "no instance acts",
    )
    assert peers.run_writes(first) == peers.run_writes(second) == []
    assert "Possibly conflicting operators with the same priority" in caplog.text
    assert first.active == second.active == 0

    # One of them gone, the other resumes.
    await peers.stop(second)
    assert "second" not in peers.peers()
    await peers.cluster.phase("pr-1", "Running")
    assert peers.status_writers("pr-1") == {"first"}


async def test_a_peer_that_stops_keeping_alive_is_taken_over_after_its_lifetime(
    peers: Peers, caplog: pytest.LogCaptureFixture
) -> None:
    """A keep-alive of a higher priority that is not renewed (a pod killed without exiting, or
    `kopf freeze --lifetime N`) pauses the instances until it expires; then the highest live one acts."""
    caplog.set_level(logging.INFO, logger="kopf")
    active = await peers.start("active", priority=200)
    await peers.start("standby", priority=100)
    lifetime_s = 3
    expires = asyncio.get_running_loop().time() + lifetime_s
    await peers.keep_alive("gone", priority=300, lifetime_s=lifetime_s)
    await peers.cluster.wait(lambda: "Pausing operations in favour of" in caplog.text, what="the pause")
    await peers.cluster.create(run_manifest("pr-1"))
    await peers.cluster.phase("pr-1", "Running")
    assert asyncio.get_running_loop().time() >= expires, "acted before the stale keep-alive expired"
    assert peers.status_writers("pr-1") == {active.name}
    # The expired keep-alive was cleaned out of the peering object.
    assert set(peers.peers()) == {"active", "standby"}
