"""The kopf handlers of BenchmarkSchedule: a timer creates an owned BenchmarkRun for the branch head at
each cron time, honouring suspend, the concurrency policy and the history limits (`schedule`); with
spec.historyCheck, another checks the history in MLflow each time one of its runs has ended
(`history_check`). Like the run handlers (`run`), each gathers its inputs, asks a pure function what to
do and applies the `Outcome`; `register_schedules` binds them to a registry.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from benchgate.controller.decide import history_check as hc
from benchgate.controller.decide import schedule as sched
from benchgate.controller.decide.planning import Outcome
from benchgate.controller.handlers.runtime import SCHEDULES, Runtime, apply_outcome
from benchgate.controller.settings import ControllerSettings
from benchgate.errors import ConfigError, RunFailedError
from benchgate.measure.source import remote_branch_head


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
    """A schedule, at every look: Valid, observedGeneration and nextScheduleTime kept up to date and,
    at a cron time due, a BenchmarkRun of the branch head created (or the time skipped, as suspend and
    the concurrency policy say), then the runs past the history limits pruned."""
    rt, now = memo, memo.clock()
    # Valid, observedGeneration and nextScheduleTime, written only when one of them changed.
    reconciled = sched.reconcile(spec, status, meta, now)
    if reconciled is not None:
        apply_outcome(Outcome(status=reconciled), body, patch, rt)
    due = sched.look(spec, status, meta, now)
    if isinstance(due, Outcome):  # invalid, nothing due, or skipped
        if due.status is not None:  # a time handled: a refusal told before is over
            rt.told.pop(uid, None)
        apply_outcome(due, body, patch, rt)
        return
    # The refusal told at an earlier time, if any (the status may not show it yet): only a refusal
    # at this time keeps it.
    refused_before = rt.told.pop(uid, None)
    # The time is handled from here on: kopf writes the patch even when a call below fails.
    patch.status.update(due.handled().patch())
    owned = await _owned_runs(rt, namespace, str(meta.get("name") or ""), uid)
    blocked = sched.forbidden(due, owned, status, now)
    if blocked is not None:
        apply_outcome(blocked, body, patch, rt)
        return
    template = due.spec.run_template.spec
    try:
        commit = await asyncio.to_thread(remote_branch_head, template.repository, template.branch or "main")
    except (ConfigError, RunFailedError) as e:
        apply_outcome(sched.branch_unresolved(due, status, str(e), now), body, patch, rt)
        return
    creation = sched.creation(due, body, owned, commit, status, now)
    for active in creation.replace:
        await asyncio.to_thread(rt.kube.delete, namespace, active)
    try:
        await asyncio.to_thread(rt.kube.create, creation.manifest)
    except (ConfigError, RunFailedError) as e:  # refused or failing: a condition, not a traceback
        apply_outcome(sched.create_refused(due, status, str(e), now, refused_before), body, patch, rt)
        rt.told[uid] = sched.refusal(due, str(e))
        return
    for old in creation.prune:
        await asyncio.to_thread(rt.kube.delete, namespace, old)
    apply_outcome(creation.outcome, body, patch, rt)


async def _owned_runs(rt: Runtime, namespace: str, name: str, uid: str) -> list[dict[str, Any]]:
    """The schedule's runs: listed by its label (the API server sends those only, not every run of the
    namespace), then kept when the schedule owns them (a label anyone can set)."""
    listed = await asyncio.to_thread(rt.kube.list, namespace, sched.runs_selector(name))
    return sched.owned_runs(listed, uid)


def checking_history(spec: Any, **_: Any) -> bool:
    """The history timer's filter: a schedule with spec.historyCheck."""
    return hc.checks_history(spec)


async def check_history(
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
    """A schedule with spec.historyCheck, after each of its runs has ended: the history of the newest
    gate runs of that run's machine profile and workload read from MLflow and checked for a regression
    (`benchgate history --check`), so that a run that passes its gate but is one more small slowdown in
    a row is told. The result goes to status.historyCheck; a check that could not be made says why and
    is made again later."""
    rt, now = memo, memo.clock()
    owned = await _owned_runs(rt, namespace, str(meta.get("name") or ""), uid)
    todo = hc.pending(spec, status, owned, now)
    if todo is None:
        return
    if not rt.settings.mlflow_uri:
        apply_outcome(hc.failed(todo, hc.NO_MLFLOW, now), body, patch, rt)
        return
    try:
        found = await asyncio.to_thread(
            rt.verdicts.history, todo.kfp_run_id, todo.experiment, todo.check.runs
        )
    except Exception as e:  # MLflow down or failing: the status says so, and the check is made again
        apply_outcome(hc.failed(todo, f"reading the history from MLflow: {e}", now), body, patch, rt)
        return
    # In a thread: the permutation tests of a hundred runs take a moment of CPU.
    apply_outcome(await asyncio.to_thread(hc.checked, todo, found, now), body, patch, rt)


def register_schedules(registry: kopf.OperatorRegistry, settings: ControllerSettings) -> None:
    """Add the BenchmarkSchedule handlers to `registry` (timer intervals come from `settings`). kopf
    keeps a handler's progress in the object's status under its id: the ids must not change."""
    poll_s = settings.schedule_poll_s
    kopf.timer(*SCHEDULES, registry=registry, id="schedule", interval=poll_s)(tick)
    kopf.timer(*SCHEDULES, registry=registry, id="history", interval=poll_s, when=checking_history)(
        check_history
    )
