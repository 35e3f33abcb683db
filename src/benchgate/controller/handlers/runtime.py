"""What the handlers of both kinds share (`run`, `schedule`): the resources they serve, the runtime kopf
hands each of them as its `memo`, and `apply_outcome`, which applies a decision's `Outcome`.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.clients import KfpRuns, KubeRuns, Verdicts
from benchgate.controller.decide import conditions
from benchgate.controller.decide.planning import Outcome
from benchgate.controller.metrics import ControllerMetrics
from benchgate.controller.settings import ControllerSettings
from benchgate.kfp.run_request import pipeline_parameter_names

RUNS = (GROUP, VERSION, "benchmarkruns")
SCHEDULES = (GROUP, VERSION, "benchmarkschedules")


def default_identity() -> str:
    """This instance's name in submission claims: the pod's name (POD_ID, which the chart sets and kopf
    also uses in the peering object), else host and process."""
    return os.environ.get("POD_ID", "").strip() or f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Runtime:
    """What every handler needs, passed to kopf as its `memo`."""

    settings: ControllerSettings
    kfp: KfpRuns
    kube: KubeRuns
    verdicts: Verdicts
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    # Runs holding a slot of their namespace's concurrency limit (by name), claimed before submitting.
    slots: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    slot_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # What the create handler decided per object uid: the KFP run id, or REFUSED. kmock (and a watch that
    # restarts) can deliver an object's creation again with its old body, before our status; this
    # memory keeps a second firing from reaching KFP again. After a restart, `ensure_run` finds the run.
    decided: dict[str, str] = field(default_factory=dict)
    # Objects (by uid) whose submission is under way: the create handler and the dispatch timer run
    # apart, and must not both submit one object.
    submitting: set[str] = field(default_factory=set)
    # What this controller last told (as an Event) of each object, by uid, that it tells only when it
    # changes: the reason a run waits for, a schedule's refused create. The decisions compare with it
    # before the status, which a handler can be given before the write of the look before has landed.
    told: dict[str, str] = field(default_factory=dict)
    known_parameters: set[str] = field(default_factory=pipeline_parameter_names)
    metrics: ControllerMetrics = field(default_factory=ControllerMetrics)
    # Who claims submissions (`decide.fencing`): one word per instance.
    identity: str = field(default_factory=default_identity)


def apply_outcome(outcome: Outcome, body: Any, patch: kopf.Patch, rt: Runtime) -> None:
    """Write the outcome's status, post its Event, and end the handler as it says. Every status of
    both kinds is written here, with what `conditions.written` adds (the generation of each condition;
    a run's Succeeded, Ready and observedGeneration with its phase)."""
    if outcome.status is not None:
        generation = int(body.get("metadata", {}).get("generation") or 1)
        current = body.get("status") or {}
        patch.status.update(conditions.written(outcome.status, current, generation, rt.clock()))
    if outcome.warning is not None:
        reason, message = outcome.warning
        kopf.warn(body, reason=reason, message=message[:1000])
    if outcome.notice is not None:  # kopf.info would be held back by the posting level (WARNING)
        reason, message = outcome.notice
        kopf.event(body, type="Normal", reason=reason, message=message[:1000])
    if outcome.give_up is not None:
        raise kopf.PermanentError(outcome.give_up)
