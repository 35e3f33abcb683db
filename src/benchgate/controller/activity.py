"""Whether this controller instance acts: the gauge `benchgate_controller_active`, from kopf's peering.

kopf pauses an instance while a live peer has a higher priority (or one of the same) and resumes it
when none is left; it keeps that state inside its operator task and publishes it nowhere but in the
log lines its peering module writes as it turns: "Pausing operations ..." / "Pausing all operators
..." and "Resuming operations after the pause ...". A filter on that logger turns those into the
gauge. Each instance sets its metrics in a context variable before kopf starts, which every task
kopf creates inherits, so two instances in one process (the operator tests) keep their own gauges.
A peered instance starts paused (kopf pauses until it has read the peering object); a standalone
one acts from the start. `tests/operator/test_peering.py` holds kopf's wording to this.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from benchgate.controller.metrics import ControllerMetrics

PEERING_LOGGER = "kopf._core.engines.peering"
_CURRENT: ContextVar[ControllerMetrics | None] = ContextVar("benchgate_controller_metrics", default=None)


class _PeeringTurns(logging.Filter):
    """Sets the gauge of the instance whose kopf logged a pause or a resume; lets every record pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        metrics = _CURRENT.get()
        if metrics is not None:
            message = record.getMessage()
            if message.startswith("Pausing"):
                metrics.set_active(False)
            elif message.startswith("Resuming"):
                metrics.set_active(True)
        return True


_FILTER = _PeeringTurns()


def follow_peering(metrics: ControllerMetrics, peered: bool) -> None:
    """From now on, in this context (call it in the task that starts kopf), `metrics`' gauge follows
    kopf's pauses and resumes."""
    _CURRENT.set(metrics)
    metrics.set_active(not peered)
    logger = logging.getLogger(PEERING_LOGGER)
    # kopf logs the turns at INFO: a logger that drops INFO before its filters would hide them.
    if not logger.isEnabledFor(logging.INFO):
        logger.setLevel(logging.INFO)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
