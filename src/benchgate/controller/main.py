"""`benchgate controller`: run the kopf operator for BenchmarkRun and BenchmarkSchedule.

In a cluster it logs in with its service account (kopf's own login), watches every namespace, or
only BENCHGATE_WATCH_NAMESPACE with the chart's namespaced RBAC, and serves a liveness endpoint;
with BENCHGATE_METRICS_PORT also /metrics and /readyz (`metrics.py`, `probes.py`).

One controller acts at a time. With BENCHGATE_PEERING (the chart sets it) every instance writes a
keep-alive with its priority into kopf's peering object and pauses while a live peer has a higher
one. Of the replicas, the old and new pods of a rolling update, or a pod and an instance started by
hand against the cluster (priority 0), the highest acts; the others wait, and take over when it exits
(at once: it removes its keep-alive) or dies (after the keep-alive's lifetime). An instance starts
paused until it has read the peering object. Without BENCHGATE_PEERING it runs standalone: alone, as
on a laptop with its own cluster, and as the chart runs it with `peering.enabled=false` (one replica,
Recreate).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from benchgate.controller.access import FINALIZER
from benchgate.controller.activity import follow_peering
from benchgate.controller.clients import KfpRuns, KubeRuns, Verdicts
from benchgate.controller.handlers.finalizer import timers_without_finalizer
from benchgate.controller.handlers.persistence import keep_records_in_status
from benchgate.controller.handlers.run import register
from benchgate.controller.handlers.runtime import RUNS, Runtime
from benchgate.controller.handlers.schedule import register_schedules
from benchgate.controller.metrics import ControllerMetrics
from benchgate.controller.probes import serve
from benchgate.controller.settings import ControllerSettings


async def configure(settings: kopf.OperatorSettings, memo: Runtime, **_: Any) -> None:
    """At startup: kopf's settings for this controller (its `settings`; the controller's own are in
    the runtime, kopf's `memo`)."""
    # No CRD or namespace scanning: the resources are known, and RBAC grants nothing for scanning.
    settings.scanning.disabled = True
    settings.posting.level = logging.WARNING
    settings.watching.reconnect_backoff = 1.0
    # Bounded watches: a silently dropped one is replaced, not waited on forever (settings.py).
    settings.watching.server_timeout = memo.settings.watch_server_timeout_s
    settings.watching.client_timeout = memo.settings.watch_client_timeout_s
    settings.watching.connect_timeout = memo.settings.watch_connect_timeout_s
    # A timer's status write that fails past kopf's last retry stops that timer for the object
    # until the controller restarts (kopf does not catch it): the retries outlast an API server
    # restarting or failing over (about 15 minutes, not kopf's 54 s).
    settings.networking.error_backoffs = list(memo.settings.api_backoffs_s)
    # A run deleted while one of its timers is mid-call (the TTL timer deletes its own object)
    # keeps its finalizer until kopf looks again: every second, not kopf's default minute.
    settings.background.cancellation_polling = 1.0
    settings.persistence.finalizer = FINALIZER
    # kopf's records in the status, written with ours: a lost status write loses both.
    keep_records_in_status(settings)


async def configure_peering(settings: kopf.OperatorSettings, memo: Runtime, **_: Any) -> None:
    """At startup: how this instance keeps its place in the peering object (used with BENCHGATE_PEERING)."""
    # Keep-alives are written every lifetime less 5-10 s; kopf logs each one unless stealthy.
    settings.peering.lifetime = memo.settings.peering_lifetime_s
    settings.peering.stealth = True


def count(
    type: str, meta: Any, status: Any, namespace: str | None, name: str, memo: Runtime, **_: Any
) -> None:
    """Every watch event of a run: the phase gauges of /metrics updated. An event handler, so no
    progress is kept (kopf's event handlers are fire-and-forget)."""
    memo.metrics.observe_run(type, namespace or "", name, meta, status)


def build(
    settings: ControllerSettings,
    kube_host: str | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> tuple[kopf.OperatorRegistry, Runtime]:
    """A registry with every handler, and the runtime the handlers share (kopf's `memo`, which also
    hands the startup handlers the controller's settings)."""
    registry = kopf.OperatorRegistry()
    register(registry, settings)
    register_schedules(registry, settings)
    timers_without_finalizer(registry)  # the finalizer only while a KFP run may go (`finalizer`)
    kopf.on.startup(registry=registry)(configure)
    kopf.on.startup(registry=registry)(configure_peering)
    kopf.on.event(*RUNS, registry=registry)(count)
    metrics = ControllerMetrics()
    kfp, verdicts = KfpRuns(settings, metrics), Verdicts(settings, metrics)
    runtime = Runtime(settings, kfp, KubeRuns(kube_host), verdicts, clock, metrics=metrics)
    return registry, runtime


async def operate(
    settings: ControllerSettings,
    registry: kopf.OperatorRegistry,
    runtime: Runtime,
    liveness: str | None = None,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    identity: str | None = None,
) -> None:
    """Run kopf until `stop_flag` (or a signal). `identity` names this instance in the peering
    object; kopf's default is the POD_ID variable (the chart sets the pod's name), else user@host
    with the start time."""
    namespace = settings.watch_namespace
    peering = settings.peering_name
    ready_flag = ready_flag or asyncio.Event()
    follow_peering(runtime.metrics, peered=bool(peering))  # benchgate_controller_active
    probes = None
    if settings.metrics_port:  # /metrics and /readyz, before kopf starts: the probe says "starting"
        probes = await serve(runtime.metrics, settings.metrics_port, ready_flag)
    try:
        await kopf.operator(
            registry=registry,
            memo=runtime,
            # With a peering name kopf peers in a ClusterKopfPeering of that name (cluster-wide) or a
            # KopfPeering in the watched namespace, and the object must exist (the chart creates it).
            standalone=not peering,
            peering_name=peering or None,
            priority=settings.peering_priority,
            # kopf types it as its Identity, a NewType of str that kopf does not export.
            identity=cast(Any, identity),
            clusterwide=not namespace,
            namespaces=[namespace] if namespace else (),
            liveness_endpoint=liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if probes is not None:
            await probes.cleanup()


class ControllerThread:
    """The controller in a thread and event loop of its own, inside another program (the operator
    tests, the overhead benchmark): kopf cancels the tasks of its loop when it stops, which must not
    reach the host program's."""

    def __init__(
        self,
        settings: ControllerSettings,
        registry: kopf.OperatorRegistry,
        runtime: Runtime,
        identity: str | None = None,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.stop_flag = asyncio.Event()
        self.ready = threading.Event()

        async def main() -> None:
            ready_flag = asyncio.Event()
            waiter = asyncio.ensure_future(ready_flag.wait())
            waiter.add_done_callback(lambda _: self.ready.set())
            await operate(
                settings,
                registry,
                runtime,
                stop_flag=self.stop_flag,
                ready_flag=ready_flag,
                identity=identity,
            )

        self.thread = threading.Thread(target=lambda: self.loop.run_until_complete(main()), daemon=True)

    def start(self, timeout_s: float) -> bool:
        """Start it; True once kopf is ready, False if not within `timeout_s`."""
        self.thread.start()
        return self.ready.wait(timeout_s)

    def stop(self, timeout_s: float) -> bool:
        """Ask kopf to stop and wait; True once the thread has ended."""
        self.loop.call_soon_threadsafe(self.stop_flag.set)
        self.thread.join(timeout_s)
        return not self.thread.is_alive()


def run(settings: ControllerSettings, liveness: str | None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registry, runtime = build(settings)
    asyncio.run(operate(settings, registry, runtime, liveness))
