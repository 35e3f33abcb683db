"""The controller's HTTP endpoint for its cluster: `/metrics` for Prometheus and `/readyz` for the
readiness probe (kopf serves the liveness probe, `/healthz`, itself).

Ready means the controller has started and watches its resources: kopf's ready flag. A standby that
kopf peering keeps paused is ready too: it can take over at once.
It runs on the controller's own event loop, beside kopf (aiohttp is kopf's own HTTP stack).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from benchgate.controller.metrics import CONTENT_TYPE, ControllerMetrics


def app(metrics: ControllerMetrics, ready: asyncio.Event) -> web.Application:
    async def scrape(_: web.Request) -> web.Response:
        # The exposition is computed from in-memory figures: fast enough to run on the loop.
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    async def readiness(_: web.Request) -> web.Response:
        if not ready.is_set():
            return web.Response(status=503, text="starting\n")
        return web.Response(text="ready\n")

    application = web.Application()
    application.router.add_get("/metrics", scrape)
    application.router.add_get("/readyz", readiness)
    return application


async def serve(
    metrics: ControllerMetrics,
    port: int,
    ready: asyncio.Event,
    host: str = "0.0.0.0",
) -> web.AppRunner:
    """Start serving on `host:port`; the caller ends it with `await runner.cleanup()`."""
    runner = web.AppRunner(app(metrics, ready), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
