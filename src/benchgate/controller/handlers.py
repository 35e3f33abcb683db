"""The kopf handlers of BenchmarkRun (those of BenchmarkSchedule: `schedule_handlers`): each gathers its
inputs (the object, the clock, a slot, remote answers), asks a pure function of `planning` what to do,
and applies the `Outcome` (status through its model, an Event, kopf's give-up) and the remote
calls. The runtime they share and `apply_outcome` are here for both modules.

BenchmarkRun life cycle:
  create  -> validate the spec (a bad one: phase Failed, condition, Event, kopf.PermanentError; never a
             KFP run) -> check it against the admin policy (`admission`: refused like a bad spec, or
             admitted, updateBaseline perhaps lowered; condition Admitted)
             -> wait for a slot of the namespace's concurrency limit (phase Pending, reason
             Queued) -> submit the pipeline exactly once (`ensure_run` attaches to a run of the same
             name, so a handler that fires twice, or a controller restarted mid-submit, makes one run)
             -> phase Submitted. KFP unreachable or 5xx: phase Pending, reason KfpUnavailable. A run
             that waits is submitted by the dispatch timer, quietly (one Event when the wait starts);
             KFP refusing the token or the run: Failed, not retried.
  follow  -> a timer mirrors the KFP run's state into the phase; at the end it reads the verdict and
             figures of the gate run from MLflow; past activeDeadlineSeconds it terminates the run if
             it is still going (an ended run keeps its own outcome).
  repair  -> a timer looks up, by its name, the KFP run of an unfinished run whose status names none
             (a status write lost after the submission) and follows it; it never creates one.
  expire  -> a timer deletes a finished run ttlSecondsAfterFinished after completion.
  delete  -> terminates the KFP run of an unfinished BenchmarkRun.
Everything remote runs in a thread (`asyncio.to_thread`): the clients are synchronous.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from benchgate.controller import admission, conditions
from benchgate.controller import planning as plan
from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.clients import KfpRuns, KubeRuns, Verdicts
from benchgate.controller.metrics import ControllerMetrics
from benchgate.controller.planning import REFUSED, Outcome
from benchgate.controller.settings import ControllerSettings
from benchgate.controller.spec_edits import spec_changed
from benchgate.controller.status import kfp_run_name
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.api import TERMINABLE_STATES, KfpRefused, KfpRejected
from benchgate.kfp.run_request import pipeline_parameter_names

RUNS = (GROUP, VERSION, "benchmarkruns")
SCHEDULES = (GROUP, VERSION, "benchmarkschedules")


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


async def _claim_slot(rt: Runtime, namespace: str, name: str) -> bool:
    async with rt.slot_lock:
        free = plan.slot_free(rt.slots[namespace], name, rt.settings.max_active_per_namespace)
        if free:
            rt.slots[namespace].add(name)
        return free


def _release_slot(rt: Runtime, namespace: str, name: str) -> None:
    rt.slots[namespace].discard(name)


async def _submission(
    rt: Runtime,
    spec: Any,
    meta: Any,
    status: Any,
    namespace: str,
    name: str,
    uid: str,
    patch: kopf.Patch,
    logger: logging.Logger,
    schedules: Any,
) -> Outcome:
    """Submit the run (exactly once: `ensure_run`), or say why it waits (a slot, KFP) or was refused
    (an invalid spec, the admin policy). `schedules`: the index of BenchmarkSchedules."""
    now = rt.clock()
    submission = plan.submission(
        spec, meta, status, namespace, name, uid, rt.settings.mlflow_uri, rt.known_parameters, now
    )
    if isinstance(submission, Outcome):  # an invalid spec: refused for good
        _decided(rt, uid, REFUSED)
        return submission
    owned = admission.schedule_owned(meta, namespace, submission.spec, schedules)
    admitted = admission.admit(submission, namespace, owned, rt.settings.policy, status, now)
    if isinstance(admitted, Outcome):  # outside the admin policy: refused for good
        _decided(rt, uid, REFUSED)
        return admitted
    # Every outcome from here on carries the Admitted condition.
    submission, status = admitted.submission, admitted.status
    if not status.get("shortCommit"):  # the first look: what the status says from the start
        patch.status.update(submission.status.patch())
    if not await _claim_slot(rt, namespace, name):
        limit = rt.settings.max_active_per_namespace
        waits = plan.queued(status, namespace, limit, now, rt.told.get(uid))
        rt.told[uid] = "Queued"
        return waits
    run_name = submission.run_name
    try:
        run_id, reused = await asyncio.to_thread(rt.kfp.ensure, run_name, submission.arguments, namespace)
    except (KfpRefused, KfpRejected) as e:
        _release_slot(rt, namespace, name)
        _decided(rt, uid, REFUSED)
        return plan.kfp_refused(status, isinstance(e, KfpRefused), str(e), now)
    except RunFailedError as e:
        _release_slot(rt, namespace, name)
        waits = plan.kfp_unavailable(status, str(e), now, rt.told.get(uid))
        rt.told[uid] = "KfpUnavailable"
        return waits
    _decided(rt, uid, run_id)
    logger.info(f"{'attached to' if reused else 'submitted'} KFP run {run_name} ({run_id})")
    return plan.submitted(status, run_name, run_id, rt.kfp.url(run_id), reused, now)


def _decided(rt: Runtime, uid: str, decision: str) -> None:
    """Remember the create handler's decision (a KFP run id, or REFUSED); the run waits no longer."""
    rt.decided[uid] = decision
    rt.told.pop(uid, None)


def register(registry: kopf.OperatorRegistry, settings: ControllerSettings) -> None:
    """Add every handler to `registry` (timer intervals come from `settings`)."""

    @kopf.on.resume(*RUNS, registry=registry, id="reclaim")
    async def reclaim(
        meta: Any, status: Any, namespace: str, name: str, patch: kopf.Patch, memo: Runtime, **_: Any
    ) -> None:
        # After a restart, runs already submitted hold their slots again ...
        if plan.holds_slot(status):
            memo.slots[namespace].add(name)
        # ... and a run an older controller finalized under kopf's default name takes benchgate's.
        finalizers = plan.migrated_finalizers(meta.get("finalizers"))
        if finalizers is not None:
            patch.metadata["finalizers"] = finalizers

    # The BenchmarkSchedules by uid, for whether a run's owner is one (a run's ownerReferences are the
    # creator's to write).
    @kopf.index(*SCHEDULES, registry=registry, id="schedule_templates")
    def schedule_templates(
        uid: str, namespace: str, spec: Any, **_: Any
    ) -> dict[str, admission.ScheduleTemplate]:
        return {uid: admission.template_of(namespace, spec)}

    def waiting(status: Any, **_: Any) -> bool:
        return plan.waiting(status)

    # Created: submitted at once. Waiting for a slot or for KFP: the create handler has returned (so
    # kopf neither retries it nor logs an error at every look), and the dispatch timer submits it later.
    @kopf.on.create(*RUNS, registry=registry, id="submit")
    @kopf.timer(*RUNS, registry=registry, id="dispatch", interval=settings.poll_s, when=waiting)
    async def submit(
        body: Any,
        spec: Any,
        meta: Any,
        status: Any,
        namespace: str,
        name: str,
        uid: str,
        patch: kopf.Patch,
        memo: Runtime,
        logger: logging.Logger,
        schedule_templates: kopf.Index[str, admission.ScheduleTemplate],
        **_: Any,
    ) -> None:
        # One submission per object at a time: the two registrations run apart, and nothing is awaited
        # between this check and the claim.
        if plan.seen_before(status, uid in memo.decided) or uid in memo.submitting:
            return
        memo.submitting.add(uid)
        try:
            outcome = await _submission(
                memo, spec, meta, status, namespace, name, uid, patch, logger, schedule_templates
            )
            apply_outcome(outcome, body, patch, memo)
        finally:
            memo.submitting.discard(uid)

    def following(status: Any, **_: Any) -> bool:
        return plan.following(status)

    @kopf.timer(*RUNS, registry=registry, id="follow", interval=settings.poll_s, when=following)
    async def follow(
        body: Any,
        spec: Any,
        status: Any,
        namespace: str,
        name: str,
        patch: kopf.Patch,
        memo: Runtime,
        logger: logging.Logger,
        **_: Any,
    ) -> None:
        rt, now = memo, memo.clock()
        run_id = str(status["kfpRunId"])
        # The state first: a run that ended is reported as it ended, deadline or not, and KFP would
        # refuse to terminate it (HTTP 400).
        try:
            state, tasks = await asyncio.to_thread(rt.kfp.state, run_id)
        except (RunFailedError, ConfigError) as e:
            logger.warning(f"cannot read KFP run {run_id}: {e}")
            apply_outcome(plan.kfp_unreadable(status, str(e), now), body, patch, rt)
            return
        seen = plan.observed(status, state, tasks, now)
        if isinstance(seen, Outcome) and plan.past_deadline(spec, status, now):
            terminating = state in TERMINABLE_STATES  # else it is being canceled already
            try:
                if terminating and not await asyncio.to_thread(rt.kfp.terminate, run_id):
                    return  # it ended since its state was read: the next look reports how
            except RunFailedError as e:
                message = f"terminating after the deadline: {e}"
                raise kopf.TemporaryError(message, delay=rt.settings.poll_s) from None
            except ConfigError as e:  # refused: KFP's answer is the condition; the next look retries
                refused = plan.terminate_refused(status, f"terminating after the deadline: {e}", now)
                apply_outcome(refused, body, patch, rt)
                return
            _release_slot(rt, namespace, name)
            apply_outcome(plan.deadline_exceeded(spec, status, terminating, now), body, patch, rt)
            return
        if isinstance(seen, Outcome):  # still going (nothing to write when nothing changed)
            apply_outcome(seen, body, patch, rt)
            return
        found, error = None, None
        try:
            experiment = plan.mlflow_experiment(spec)
            found = await asyncio.to_thread(rt.verdicts.find, run_id, experiment, bool(spec.get("suite")))
        except Exception as e:  # MLflow down must not hide the KFP outcome
            error = e
        _release_slot(rt, namespace, name)
        apply_outcome(
            plan.ended(status, seen, found, error, bool(rt.settings.mlflow_uri), now), body, patch, rt
        )

    def expiring(spec: Any, status: Any, **_: Any) -> bool:
        return plan.expiring(spec, status)

    @kopf.timer(*RUNS, registry=registry, id="expire", interval=settings.poll_s, when=expiring)
    async def expire(spec: Any, status: Any, namespace: str, name: str, memo: Runtime, **_: Any) -> None:
        if plan.expired(spec, status, memo.clock()):
            await asyncio.to_thread(memo.kube.delete, namespace, name)

    @kopf.on.delete(*RUNS, registry=registry, id="terminate")
    async def terminate(
        status: Any, namespace: str, name: str, uid: str, memo: Runtime, logger: logging.Logger, **_: Any
    ) -> None:
        _release_slot(memo, namespace, name)
        memo.told.pop(uid, None)
        run_id = plan.to_terminate(status, memo.decided.pop(uid, None))
        if run_id is None:
            return
        # A lookup that fails does not hold up the deletion (there may be no run at all); a known run
        # is terminated, retried while KFP is down.
        if not run_id:
            try:
                run_name = kfp_run_name(namespace, name, uid)
                run_id = await asyncio.to_thread(memo.kfp.find, run_name, namespace)
            except (RunFailedError, ConfigError) as e:
                logger.warning(f"could not look for a KFP run of {namespace}/{name} to terminate: {e}")
                return
            if not run_id:
                return
        try:
            if not await asyncio.to_thread(memo.kfp.terminate, run_id):
                logger.info(f"KFP run {run_id} had already ended or was being canceled")
        except ConfigError as e:  # refused: the deletion goes on, the run is KFP's to clean up
            logger.warning(f"could not terminate KFP run {run_id}: {e}")
        except RunFailedError as e:
            message = f"terminating KFP run {run_id}: {e}"
            raise kopf.TemporaryError(message, delay=memo.settings.poll_s) from None

    @kopf.on.update(*RUNS, registry=registry, id="immutable", field="spec")
    async def immutable(
        body: Any, spec: Any, meta: Any, status: Any, patch: kopf.Patch, memo: Runtime, **_: Any
    ) -> None:
        # The CRD's CEL rule refuses edits of typed fields where it is evaluated; edits inside the
        # free-form workloadArgs and config pass it (CEL cannot see into them), and are reported.
        apply_outcome(spec_changed(spec, status, meta, memo.clock()), body, patch, memo)

    def unsubmitted(status: Any, **_: Any) -> bool:
        return plan.needs_repair(status)

    # A run whose status lost its KFP run (kopf writes the object and its /status apart, and either can
    # fail after the submission): found by its deterministic name, it is followed again. Only ever a
    # lookup: creating runs stays the create handler's and the dispatch timer's.
    @kopf.timer(
        *RUNS,
        registry=registry,
        id="repair",
        interval=settings.repair_s,
        initial_delay=settings.repair_s,
        when=unsubmitted,
    )
    async def repair(
        body: Any,
        status: Any,
        namespace: str,
        name: str,
        uid: str,
        patch: kopf.Patch,
        memo: Runtime,
        logger: logging.Logger,
        **_: Any,
    ) -> None:
        remembered = memo.decided.get(uid)
        if uid in memo.submitting or remembered == REFUSED:
            return  # being submitted now, or refused: nothing of KFP's to find
        run_name = kfp_run_name(namespace, name, uid)
        run_id = remembered
        if run_id is None:  # not submitted by this controller since it started: ask KFP
            try:
                run_id = await asyncio.to_thread(memo.kfp.find, run_name, namespace)
            except (RunFailedError, ConfigError) as e:  # the next look asks again
                logger.warning(f"could not look for KFP run {run_name}: {e}")
                return
        if not run_id or uid in memo.submitting:
            return  # none yet (still waiting to be submitted), or a submission started meanwhile
        async with memo.slot_lock:  # it runs: it holds its slot, whatever the limit says
            memo.slots[namespace].add(name)
        _decided(memo, uid, run_id)
        logger.warning(f"KFP run {run_name} ({run_id}) was missing from the status: following it again")
        repaired = plan.repaired(status, run_name, run_id, memo.kfp.url(run_id), memo.clock())
        apply_outcome(repaired, body, patch, memo)
