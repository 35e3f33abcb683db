"""The kopf handlers of BenchmarkRun (those of BenchmarkSchedule: `schedule`): each gathers its inputs
(the object, the clock, a slot, remote answers), asks a pure function of `planning` what to do, and
applies the `Outcome` (status through its model, an Event, kopf's give-up) and the remote calls. The
runtime they share with the schedule's handlers and `apply_outcome` are in `runtime`. Each handler is a
module-level function; `register` binds them to a registry with their ids, intervals and filters.

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
from typing import Any

import kopf

from benchgate.controller.access import KOPF_DEFAULT_FINALIZER
from benchgate.controller.decide import admission, fencing
from benchgate.controller.decide import planning as plan
from benchgate.controller.decide.planning import REFUSED, Outcome
from benchgate.controller.decide.spec_edits import spec_changed
from benchgate.controller.handlers.finalizer import claim
from benchgate.controller.handlers.runtime import RUNS, SCHEDULES, Runtime, apply_outcome
from benchgate.controller.settings import ControllerSettings
from benchgate.controller.spec.status import kfp_run_name
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.api import TERMINABLE_STATES, KfpRefused, KfpRejected, KfpRunGone


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
    claimed = await _claim(rt, meta, namespace, name, status, now)
    if claimed is not None:  # another controller's, or the API server refused or failed the claim
        _release_slot(rt, namespace, name)
        rt.told[uid] = "SubmissionClaimed"
        return claimed
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


async def _claim(rt: Runtime, meta: Any, namespace: str, name: str, status: Any, now: Any) -> Outcome | None:
    """Claim the submission before KFP's find-then-create (`decide.fencing`): the claim and benchgate's
    finalizer in one write fenced by the resourceVersion read. None when claimed; else why the run
    waits (the dispatch timer looks again)."""
    lease_s = rt.settings.peering_lifetime_s
    annotations = meta.get("annotations") or {}
    if not fencing.may_claim(annotations, rt.identity, now, lease_s):
        holder = annotations.get(fencing.CLAIM)
        message = (
            f"claimed by another controller ({holder}); taken over if it has not submitted in {lease_s} s"
        )
        return plan.claimed_elsewhere(status, message, now)
    token = fencing.claim_token(rt.identity, now)
    try:
        if await asyncio.to_thread(claim, rt.kube.api, namespace, name, meta, token):
            return None
        message = "the run changed while being claimed (another controller, or an edit): looked at again"
    except Exception as e:  # the API server failing the write: nothing was claimed, nothing submitted
        message = f"could not claim the submission: {e}"
    return plan.claimed_elsewhere(status, message, now)


def _decided(rt: Runtime, uid: str, decision: str) -> None:
    """Remember the create handler's decision (a KFP run id, or REFUSED); the run waits no longer."""
    rt.decided[uid] = decision
    rt.told.pop(uid, None)


async def reclaim(
    meta: Any, status: Any, namespace: str, name: str, patch: kopf.Patch, memo: Runtime, **_: Any
) -> None:
    """A run found at the controller's start (kopf's resume): one already submitted holds its slot
    again (the slots are kept in memory only). One an older controller finalized under kopf's default
    finalizer name (nothing removes that name now: it would stay Terminating) takes benchgate's if a
    KFP run of it may still go, else loses it."""
    if plan.holds_slot(status):
        memo.slots[namespace].add(name)
    finalizers = plan.migrated_finalizers(meta.get("finalizers"))
    if finalizers is not None and not fencing.finalized(status, meta.get("annotations")):
        # Not held: the old name goes, and benchgate's is kopf's to remove (its filter says so); a
        # list without it here would race kopf's own removal of it.
        finalizers = [f for f in meta.get("finalizers") or [] if f != KOPF_DEFAULT_FINALIZER]
    if finalizers is not None:
        patch.metadata["finalizers"] = finalizers


def schedule_templates(
    uid: str, namespace: str, spec: Any, **_: Any
) -> dict[str, admission.ScheduleTemplate]:
    """The index of BenchmarkSchedules by uid, for whether a run's owner is one: a run's
    ownerReferences are the creator's to write, so admission checks them against the schedules."""
    return {uid: admission.template_of(namespace, spec)}


def waiting(status: Any, **_: Any) -> bool:
    """The dispatch timer's filter: a run Pending for a slot or for KFP, with no KFP run."""
    return plan.waiting(status)


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
    """A run created (the create handler) or waiting (the dispatch timer): submitted, or told why it
    waits or was refused. A run that must wait is not retried by its create handler (kopf would log an
    error at every look); the dispatch timer submits it later."""
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
    """The follow timer's filter: a run with a KFP run that has not ended."""
    return plan.following(status)


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
    """A submitted run, at every look: the KFP run's state mirrored into the phase; past the deadline,
    the KFP run terminated; at its end, the verdict and figures read from MLflow and the slot freed."""
    rt, now = memo, memo.clock()
    run_id = str(status["kfpRunId"])
    # The state first: a run that ended is reported as it ended, deadline or not, and KFP would
    # refuse to terminate it (HTTP 400).
    try:
        state, tasks = await asyncio.to_thread(rt.kfp.state, run_id)
    except KfpRunGone as e:  # deleted from KFP: waiting cannot bring it back (planning.GONE_AFTER)
        logger.warning(str(e))
        gone = plan.kfp_run_gone(status, str(e), now)
        if gone.warning is not None:  # failed for good, not only said as a condition: the slot is free
            _release_slot(rt, namespace, name)
        apply_outcome(gone, body, patch, rt)
        return
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
    apply_outcome(plan.ended(status, seen, found, error, bool(rt.settings.mlflow_uri), now), body, patch, rt)


def expiring(spec: Any, status: Any, **_: Any) -> bool:
    """The expire timer's filter: a run with ttlSecondsAfterFinished that has ended."""
    return plan.expiring(spec, status)


async def expire(spec: Any, status: Any, namespace: str, name: str, memo: Runtime, **_: Any) -> None:
    """A run that ended, with a TTL: deleted once ttlSecondsAfterFinished have passed since its end."""
    if plan.expired(spec, status, memo.clock()):
        await asyncio.to_thread(memo.kube.delete, namespace, name)


async def terminate(
    status: Any, namespace: str, name: str, uid: str, memo: Runtime, logger: logging.Logger, **_: Any
) -> None:
    """A run deleted: its slot and what was told of it forgotten, and its KFP run, if it has one that
    may still go, terminated, so that deleting a BenchmarkRun stops the work it started."""
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


async def immutable(
    body: Any, spec: Any, meta: Any, status: Any, patch: kopf.Patch, memo: Runtime, **_: Any
) -> None:
    """A run's spec edited: the CRD's CEL rule refuses edits of typed fields where it is evaluated, but
    edits inside the free-form workloadArgs and config pass it (CEL cannot see into them). A run still
    waiting is submitted with the edited spec; a submitted or finished one goes on as it was submitted,
    and says so (condition SpecApplied False, a warning Event)."""
    apply_outcome(spec_changed(spec, status, meta, memo.clock()), body, patch, memo)


def finalized(status: Any, annotations: Any, **_: Any) -> bool:
    """The delete handler's filter, and so what holds benchgate's finalizer (`fencing.finalized`)."""
    return fencing.finalized(status, annotations)


def unsubmitted(status: Any, **_: Any) -> bool:
    """The repair timer's filter: a run that has not ended and whose status names no KFP run."""
    return plan.needs_repair(status)


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
    """A run whose status lost its KFP run (kopf writes the object and its /status apart, and either
    can fail after the submission): found by its deterministic name, it is followed again. Only ever a
    lookup: creating runs stays the create handler's and the dispatch timer's."""
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


def register(registry: kopf.OperatorRegistry, settings: ControllerSettings) -> None:
    """Add every BenchmarkRun handler to `registry` (timer intervals come from `settings`). kopf keeps
    a handler's progress in the object's status under its id: the ids must not change."""
    kopf.on.resume(*RUNS, registry=registry, id="reclaim")(reclaim)
    # The index's id is also the name of the keyword argument that hands it to `submit`.
    kopf.index(*SCHEDULES, registry=registry, id="schedule_templates")(schedule_templates)
    poll_s = settings.poll_s
    kopf.timer(*RUNS, registry=registry, id="dispatch", interval=poll_s, when=waiting)(submit)
    kopf.on.create(*RUNS, registry=registry, id="submit")(submit)
    kopf.timer(*RUNS, registry=registry, id="follow", interval=poll_s, when=following)(follow)
    kopf.timer(*RUNS, registry=registry, id="expire", interval=poll_s, when=expiring)(expire)
    # The delete handler's filter is what holds benchgate's finalizer: only while a KFP run may go.
    kopf.on.delete(*RUNS, registry=registry, id="terminate", when=finalized)(terminate)
    kopf.on.update(*RUNS, registry=registry, id="immutable", field="spec")(immutable)
    repair_s = settings.repair_s
    kopf.timer(
        *RUNS, registry=registry, id="repair", interval=repair_s, initial_delay=repair_s, when=unsubmitted
    )(repair)
