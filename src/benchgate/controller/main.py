"""`benchgate controller`: run the kopf operator for BenchmarkRun and BenchmarkSchedule.

In a cluster it logs in with its service account (kopf's own login), watches every namespace, or
only BENCHGATE_WATCH_NAMESPACE with the chart's namespaced RBAC, and serves a liveness endpoint.
Standalone (no peering objects, so no RBAC for them): the chart runs exactly one replica with the
Recreate strategy, so two controllers never act on the same object.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kopf

from benchgate.controller.access import FINALIZER
from benchgate.controller.clients import KfpRuns, KubeRuns, Verdicts
from benchgate.controller.handlers import RUNS, Runtime, register
from benchgate.controller.metrics import ControllerMetrics
from benchgate.controller.probes import serve
from benchgate.controller.schedule_handlers import register_schedules
from benchgate.controller.settings import ControllerSettings


def build(
    settings: ControllerSettings,
    kube_host: str | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> tuple[kopf.OperatorRegistry, Runtime]:
    """A registry with every handler, and the runtime the handlers share (kopf's `memo`)."""
    registry = kopf.OperatorRegistry()
    register(registry, settings)
    register_schedules(registry, settings)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # No CRD or namespace scanning: the resources are known, and RBAC grants nothing for scanning.
        settings.scanning.disabled = True
        settings.posting.level = logging.WARNING
        settings.watching.reconnect_backoff = 1.0
        # A run deleted while one of its timers is mid-call (the TTL timer deletes its own object)
        # keeps its finalizer until kopf looks again: every second, not kopf's default minute.
        settings.background.cancellation_polling = 1.0
        settings.persistence.finalizer = FINALIZER

    metrics = ControllerMetrics()

    # Every watch event of a run updates the phase gauges (no progress kept: kopf's event handlers
    # are fire-and-forget).
    @kopf.on.event(*RUNS, registry=registry)
    def count(type: str, meta: Any, status: Any, namespace: str | None, name: str, **_: Any) -> None:
        metrics.observe_run(type, namespace or "", name, meta, status)

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
) -> None:
    namespace = settings.watch_namespace
    ready_flag = ready_flag or asyncio.Event()
    probes = None
    if settings.metrics_port:  # /metrics and /readyz, before kopf starts: the probe says "starting"
        probes = await serve(runtime.metrics, settings.metrics_port, ready_flag)
    try:
        await kopf.operator(
            registry=registry,
            memo=runtime,
            standalone=True,
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
        self, settings: ControllerSettings, registry: kopf.OperatorRegistry, runtime: Runtime
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.stop_flag = asyncio.Event()
        self.ready = threading.Event()

        async def main() -> None:
            ready_flag = asyncio.Event()
            waiter = asyncio.ensure_future(ready_flag.wait())
            waiter.add_done_callback(lambda _: self.ready.set())
            await operate(settings, registry, runtime, stop_flag=self.stop_flag, ready_flag=ready_flag)

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
