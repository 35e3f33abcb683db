"""The kopf handlers of BenchmarkRun and BenchmarkSchedule: each gathers its inputs (the object, the
clock, a slot, remote answers), asks a pure function of `planning` or `schedule` what to do, and applies
the `Outcome` (status through its model, an Event, kopf's retry or give-up) and the remote calls.

BenchmarkRun life cycle:
  create  -> validate the spec (a bad one: phase Failed, condition, Event, kopf.PermanentError; never a
             KFP run) -> wait for a slot of the namespace's concurrency limit (phase Pending, reason
             Queued) -> submit the pipeline exactly once (`ensure_run` attaches to a run of the same
             name, so a handler that fires twice, or a controller restarted mid-submit, makes one run)
             -> phase Submitted. KFP unreachable or 5xx: phase Pending, reason KfpUnavailable, retried
             (kopf.TemporaryError); KFP refusing the token or the run: Failed, not retried.
  follow  -> a timer mirrors the KFP run's state into the phase; at the end it reads the verdict and
             figures of the gate run from MLflow; past activeDeadlineSeconds it terminates the run.
  expire  -> a timer deletes a finished run ttlSecondsAfterFinished after completion.
  delete  -> terminates the KFP run of an unfinished BenchmarkRun.
BenchmarkSchedule: a timer creates an owned BenchmarkRun for the branch head at each cron time,
  honouring suspend, the concurrency policy and the history limits; with spec.historyCheck, another
  checks the history in MLflow each time one of its runs has ended (`history_check`).

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

from benchgate.controller import history_check as hc
from benchgate.controller import planning as plan
from benchgate.controller import schedule as sched
from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.clients import KfpRuns, KubeRuns, Verdicts
from benchgate.controller.planning import REFUSED, Outcome
from benchgate.controller.settings import ControllerSettings
from benchgate.controller.status import kfp_run_name
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.api import KfpRefused, KfpRejected
from benchgate.kfp.submit import pipeline_parameter_names
from benchgate.measure.source import remote_branch_head

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
    known_parameters: set[str] = field(default_factory=pipeline_parameter_names)


def _apply(outcome: Outcome, body: Any, patch: kopf.Patch, rt: Runtime) -> None:
    """Write the outcome's status, post its Event, and end the handler as it says."""
    if outcome.status is not None:
        patch.status.update(outcome.status.patch())
    if outcome.warning is not None:
        reason, message = outcome.warning
        kopf.warn(body, reason=reason, message=message[:1000])
    if outcome.give_up is not None:
        raise kopf.PermanentError(outcome.give_up)
    if outcome.retry is not None:
        raise kopf.TemporaryError(outcome.retry, delay=rt.settings.poll_s)


async def _claim_slot(rt: Runtime, namespace: str, name: str) -> bool:
    async with rt.slot_lock:
        free = plan.slot_free(rt.slots[namespace], name, rt.settings.max_active_per_namespace)
        if free:
            rt.slots[namespace].add(name)
        return free


def _release_slot(rt: Runtime, namespace: str, name: str) -> None:
    rt.slots[namespace].discard(name)


def register(registry: kopf.OperatorRegistry, settings: ControllerSettings) -> None:
    """Add every handler to `registry` (timer intervals come from `settings`)."""

    @kopf.on.resume(*RUNS, registry=registry, id="reclaim")
    async def reclaim(status: Any, namespace: str, name: str, memo: Runtime, **_: Any) -> None:
        # After a restart, runs already submitted hold their slots again.
        if plan.holds_slot(status):
            memo.slots[namespace].add(name)

    @kopf.on.create(*RUNS, registry=registry, id="submit")
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
        **_: Any,
    ) -> None:
        rt, now = memo, memo.clock()
        if plan.seen_before(status, uid in rt.decided):
            return
        submission = plan.submission(
            spec, meta, status, namespace, name, uid, rt.settings.mlflow_uri, rt.known_parameters, now
        )
        if isinstance(submission, Outcome):  # an invalid spec: refused for good
            rt.decided[uid] = REFUSED
            _apply(submission, body, patch, rt)  # raises kopf.PermanentError
            return
        patch.status.update(submission.status.patch())
        if not await _claim_slot(rt, namespace, name):
            limit = rt.settings.max_active_per_namespace
            _apply(plan.queued(status, namespace, limit, now), body, patch, rt)  # kopf.TemporaryError
            return
        run_name = submission.run_name
        try:
            run_id, reused = await asyncio.to_thread(rt.kfp.ensure, run_name, submission.arguments)
        except (KfpRefused, KfpRejected) as e:
            _release_slot(rt, namespace, name)
            rt.decided[uid] = REFUSED
            outcome = plan.kfp_refused(status, isinstance(e, KfpRefused), str(e), now)
        except RunFailedError as e:
            _release_slot(rt, namespace, name)
            outcome = plan.kfp_unavailable(status, str(e), now)
        else:
            rt.decided[uid] = run_id
            logger.info(f"{'attached to' if reused else 'submitted'} KFP run {run_name} ({run_id})")
            outcome = plan.submitted(status, run_name, run_id, rt.kfp.url(run_id), reused, now)
        _apply(outcome, body, patch, rt)

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
        if plan.past_deadline(spec, status, now):
            try:
                await asyncio.to_thread(rt.kfp.terminate, run_id)
            except RunFailedError as e:
                message = f"terminating after the deadline: {e}"
                raise kopf.TemporaryError(message, delay=rt.settings.poll_s) from None
            _release_slot(rt, namespace, name)
            _apply(plan.deadline_exceeded(spec, status, now), body, patch, rt)
            return
        try:
            state, tasks = await asyncio.to_thread(rt.kfp.state, run_id)
        except (RunFailedError, ConfigError) as e:
            logger.warning(f"cannot read KFP run {run_id}: {e}")
            _apply(plan.kfp_unreadable(status, str(e), now), body, patch, rt)
            return
        seen = plan.observed(status, state, tasks, now)
        if isinstance(seen, Outcome):  # still going (nothing to write when nothing changed)
            _apply(seen, body, patch, rt)
            return
        found, error = None, None
        try:
            found = await asyncio.to_thread(rt.verdicts.find, run_id, plan.mlflow_experiment(spec))
        except Exception as e:  # MLflow down must not hide the KFP outcome
            error = e
        _release_slot(rt, namespace, name)
        _apply(plan.ended(status, seen, found, error, bool(rt.settings.mlflow_uri), now), body, patch, rt)

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
        run_id = plan.to_terminate(status, memo.decided.pop(uid, None))
        if run_id is None:
            return
        # A lookup that fails does not hold up the deletion (there may be no run at all); a known run
        # is terminated, retried while KFP is down.
        if not run_id:
            try:
                run_id = await asyncio.to_thread(memo.kfp.find, kfp_run_name(namespace, name, uid))
            except (RunFailedError, ConfigError) as e:
                logger.warning(f"could not look for a KFP run of {namespace}/{name} to terminate: {e}")
                return
            if not run_id:
                return
        try:
            await asyncio.to_thread(memo.kfp.terminate, run_id)
        except ConfigError as e:  # refused, or KFP will not terminate it (it has ended)
            logger.warning(f"could not terminate KFP run {run_id}: {e}")
        except RunFailedError as e:
            message = f"terminating KFP run {run_id}: {e}"
            raise kopf.TemporaryError(message, delay=memo.settings.poll_s) from None

    @kopf.on.update(*RUNS, registry=registry, id="immutable", field="spec")
    async def immutable(body: Any, **_: Any) -> None:
        # The CRD's CEL rule rejects this on API servers that evaluate it; elsewhere, say it is ignored.
        kopf.warn(body, reason="SpecImmutable", message="spec changes are ignored; create a new BenchmarkRun")

    @kopf.timer(*SCHEDULES, registry=registry, id="schedule", interval=settings.schedule_poll_s)
    async def tick(
        body: Any,
        spec: Any,
        meta: Any,
        status: Any,
        namespace: str,
        uid: str,
        patch: kopf.Patch,
        memo: Runtime,
        **_: Any,
    ) -> None:
        rt, now = memo, memo.clock()
        due = sched.look(spec, status, meta, now)
        if isinstance(due, Outcome):  # invalid, nothing due, or skipped
            _apply(due, body, patch, rt)
            return
        # The time is handled from here on: kopf writes the patch even when a call below fails.
        patch.status.update(due.handled().patch())
        owned = sched.owned_runs(await asyncio.to_thread(rt.kube.list, namespace), uid)
        blocked = sched.forbidden(due, owned, status, now)
        if blocked is not None:
            _apply(blocked, body, patch, rt)
            return
        template = due.spec.run_template.spec
        try:
            commit = await asyncio.to_thread(
                remote_branch_head, template.repository, template.branch or "main"
            )
        except (ConfigError, RunFailedError) as e:
            _apply(sched.branch_unresolved(due, status, str(e), now), body, patch, rt)
            return
        creation = sched.creation(due, body, owned, commit, status, now)
        for active in creation.replace:
            await asyncio.to_thread(rt.kube.delete, namespace, active)
        await asyncio.to_thread(rt.kube.create, creation.manifest)
        for old in creation.prune:
            await asyncio.to_thread(rt.kube.delete, namespace, old)
        _apply(creation.outcome, body, patch, rt)

    def checking_history(spec: Any, **_: Any) -> bool:
        return hc.checks_history(spec)

    @kopf.timer(
        *SCHEDULES, registry=registry, id="history", interval=settings.schedule_poll_s, when=checking_history
    )
    async def check_history(
        body: Any,
        spec: Any,
        status: Any,
        namespace: str,
        uid: str,
        patch: kopf.Patch,
        memo: Runtime,
        **_: Any,
    ) -> None:
        rt, now = memo, memo.clock()
        owned = sched.owned_runs(await asyncio.to_thread(rt.kube.list, namespace), uid)
        todo = hc.pending(spec, status, owned, now)
        if todo is None:
            return
        if not rt.settings.mlflow_uri:
            _apply(hc.failed(todo, hc.NO_MLFLOW, now), body, patch, rt)
            return
        try:
            found = await asyncio.to_thread(
                rt.verdicts.history, todo.kfp_run_id, todo.experiment, todo.check.runs
            )
        except Exception as e:  # MLflow down or failing: the status says so, and the check is made again
            _apply(hc.failed(todo, f"reading the history from MLflow: {e}", now), body, patch, rt)
            return
        # In a thread: the permutation tests of a hundred runs take a moment of CPU.
        _apply(await asyncio.to_thread(hc.checked, todo, found, now), body, patch, rt)
