"""The kopf handlers of BenchmarkRun and BenchmarkSchedule: thin, over `status`, `schedule`, `clients`.

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
  honouring suspend, the concurrency policy and the history limits.

Everything remote runs in a thread (`asyncio.to_thread`): the clients are synchronous.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf

from benchgate.controller import schedule as sched
from benchgate.controller import status as st
from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.clients import KfpRuns, KubeRuns, Verdicts
from benchgate.controller.resources import (
    BenchmarkRunSpec,
    BenchmarkScheduleSpec,
    parse_spec,
    pipeline_arguments,
)
from benchgate.controller.settings import ControllerSettings
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.submit import KfpRefused, KfpRejected, pipeline_parameter_names
from benchgate.source import remote_branch_head

RUNS = (GROUP, VERSION, "benchmarkruns")
REFUSED = "refused"
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


def _reject(body: Any, patch: kopf.Patch, status: Any, reason: str, message: str, now: datetime) -> None:
    patch.status["phase"] = st.FAILED
    patch.status["completionTime"] = st.timestamp(now)
    patch.status["conditions"] = st.merge_conditions(
        status.get("conditions"),
        st.condition("Submitted", False, reason, message, now),
        # Finished too, so `kubectl wait --for=condition=Finished` ends for refused runs as well.
        st.condition("Finished", True, reason, message, now),
    )
    kopf.warn(body, reason=reason, message=message[:1000])


async def _claim_slot(rt: Runtime, namespace: str, name: str) -> bool:
    limit = rt.settings.max_active_per_namespace
    async with rt.slot_lock:
        held = rt.slots[namespace]
        if name in held or limit <= 0 or len(held) < limit:
            held.add(name)
            return True
        return False


def _release_slot(rt: Runtime, namespace: str, name: str) -> None:
    rt.slots[namespace].discard(name)


def register(registry: kopf.OperatorRegistry, settings: ControllerSettings) -> None:
    """Add every handler to `registry` (timer intervals come from `settings`)."""

    @kopf.on.resume(*RUNS, registry=registry, id="reclaim")
    async def reclaim(status: Any, namespace: str, name: str, memo: Runtime, **_: Any) -> None:
        # After a restart, runs already submitted hold their slots again.
        if status.get("phase") in st.ACTIVE_PHASES:
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
        if status.get("kfpRunId") or status.get("phase") in st.TERMINAL_PHASES or uid in rt.decided:
            return  # submitted or refused already: this is the create event seen a second time
        try:
            parsed = parse_spec(BenchmarkRunSpec, dict(spec))
            arguments = pipeline_arguments(parsed, rt.settings.mlflow_uri, rt.known_parameters)
        except ConfigError as e:
            rt.decided[uid] = REFUSED
            _reject(body, patch, status, "InvalidSpec", str(e), now)
            raise kopf.PermanentError(f"invalid spec: {e}") from None
        patch.status["shortCommit"] = parsed.commit[:12]
        patch.status["observedGeneration"] = meta.get("generation", 1)
        if not await _claim_slot(rt, namespace, name):
            limit = rt.settings.max_active_per_namespace
            message = f"waiting: {limit} BenchmarkRuns of namespace {namespace} are submitted or running"
            patch.status["phase"] = st.PENDING
            patch.status["conditions"] = st.merge_conditions(
                status.get("conditions"), st.condition("Submitted", False, "Queued", message, now)
            )
            raise kopf.TemporaryError(message, delay=rt.settings.poll_s)
        run_name = st.kfp_run_name(namespace, name, uid)
        try:
            run_id, reused = await asyncio.to_thread(rt.kfp.ensure, run_name, arguments)
        except (KfpRefused, KfpRejected) as e:
            _release_slot(rt, namespace, name)
            rt.decided[uid] = REFUSED
            reason = "KfpUnauthorized" if isinstance(e, KfpRefused) else "KfpRejected"
            _reject(body, patch, status, reason, str(e), now)
            raise kopf.PermanentError(str(e)) from None
        except RunFailedError as e:
            _release_slot(rt, namespace, name)
            patch.status["phase"] = st.PENDING
            patch.status["conditions"] = st.merge_conditions(
                status.get("conditions"), st.condition("Submitted", False, "KfpUnavailable", str(e), now)
            )
            raise kopf.TemporaryError(str(e), delay=rt.settings.poll_s) from None
        rt.decided[uid] = run_id
        logger.info(f"{'attached to' if reused else 'submitted'} KFP run {run_name} ({run_id})")
        message = f"{'attached to existing' if reused else 'submitted'} KFP run {run_name}"
        patch.status.update(
            {
                "phase": st.SUBMITTED,
                "kfpRunId": run_id,
                "kfpRunName": run_name,
                "kfpRunUrl": rt.kfp.url(run_id),
                "kfpState": "PENDING",
                "startTime": st.timestamp(now),
                "conditions": st.merge_conditions(
                    status.get("conditions"), st.condition("Submitted", True, "KfpRunCreated", message, now)
                ),
            }
        )

    def following(status: Any, **_: Any) -> bool:
        return bool(status.get("kfpRunId")) and status.get("phase") not in st.TERMINAL_PHASES

    @kopf.timer(*RUNS, registry=registry, id="follow", interval=settings.poll_s, when=following)
    async def follow(
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
        deadline = spec.get("activeDeadlineSeconds")
        started = st.parse_time(status.get("startTime"))
        if deadline and started and now - started > timedelta(seconds=int(deadline)):
            try:
                await asyncio.to_thread(rt.kfp.terminate, run_id)
            except RunFailedError as e:
                raise kopf.TemporaryError(
                    f"terminating after the deadline: {e}", delay=rt.settings.poll_s
                ) from None
            _finish(
                rt,
                patch,
                status,
                namespace,
                name,
                st.FAILED,
                "DeadlineExceeded",
                f"ran longer than activeDeadlineSeconds={deadline}; the KFP run was terminated",
                now,
            )
            return
        try:
            state, tasks = await asyncio.to_thread(rt.kfp.state, run_id)
        except (RunFailedError, ConfigError) as e:
            logger.warning(f"cannot read KFP run {run_id}: {e}")
            patch.status["conditions"] = st.merge_conditions(
                status.get("conditions"), st.condition("KfpReachable", False, "KfpUnavailable", str(e), now)
            )
            return
        phase, reason, message = st.phase_for(state, tasks)
        unchanged = status.get("kfpState") == state and status.get("phase") == phase
        if (
            phase not in st.TERMINAL_PHASES
            and unchanged
            and st.holds(status.get("conditions"), "KfpReachable", reason)
        ):
            return  # nothing changed: no patch, no watch event for every run on every poll
        patch.status["kfpState"] = state
        if phase not in st.TERMINAL_PHASES:
            patch.status["phase"] = phase
            patch.status["conditions"] = st.merge_conditions(
                status.get("conditions"), st.condition("KfpReachable", True, reason, message, now)
            )
            return
        experiment = str(spec.get("mlflowExperiment") or "benchgate")
        try:
            found = await asyncio.to_thread(rt.verdicts.find, run_id, experiment)
        except Exception as e:  # MLflow down must not hide the KFP outcome
            found, reason_text = None, f"MLflow unavailable: {type(e).__name__}: {str(e)[:200]}"
        else:
            reason_text = (
                "no gate run in MLflow for this KFP run" if rt.settings.mlflow_uri else "no MLflow set"
            )
        verdict_condition = st.condition("VerdictRead", False, "VerdictUnavailable", reason_text, now)
        if found is not None:
            patch.status["verdict"] = st.verdict_summary(found["tags"], found["metrics"])
            patch.status["mlflowRunId"] = found["run_id"]
            patch.status["mlflowRunUrl"] = found["url"]
            verdict_condition = st.condition(
                "VerdictRead", True, "FromMLflow", "verdict read from MLflow", now
            )
        _finish(rt, patch, status, namespace, name, phase, reason, message, now, verdict_condition)

    def _finish(
        rt: Runtime,
        patch: kopf.Patch,
        status: Any,
        namespace: str,
        name: str,
        phase: str,
        reason: str,
        message: str,
        now: datetime,
        *extra: dict[str, str],
    ) -> None:
        _release_slot(rt, namespace, name)
        patch.status["phase"] = phase
        patch.status["completionTime"] = st.timestamp(now)
        patch.status["conditions"] = st.merge_conditions(
            status.get("conditions"), st.condition("Finished", True, reason, message, now), *extra
        )

    def expiring(spec: Any, status: Any, **_: Any) -> bool:
        return spec.get("ttlSecondsAfterFinished") is not None and status.get("phase") in st.TERMINAL_PHASES

    @kopf.timer(*RUNS, registry=registry, id="expire", interval=settings.poll_s, when=expiring)
    async def expire(spec: Any, status: Any, namespace: str, name: str, memo: Runtime, **_: Any) -> None:
        finished = st.parse_time(status.get("completionTime"))
        ttl = timedelta(seconds=int(spec["ttlSecondsAfterFinished"]))
        if finished is not None and memo.clock() - finished >= ttl:
            await asyncio.to_thread(memo.kube.delete, namespace, name)

    @kopf.on.delete(*RUNS, registry=registry, id="terminate")
    async def terminate(
        status: Any, namespace: str, name: str, uid: str, memo: Runtime, logger: logging.Logger, **_: Any
    ) -> None:
        _release_slot(memo, namespace, name)
        decided = memo.decided.pop(uid, None)
        if status.get("phase") in st.TERMINAL_PHASES or decided == REFUSED:
            return
        # The status may predate the submission (deleted while submitting): the id is remembered, and
        # after a restart the run is looked up by its name. A lookup that fails does not hold up the
        # deletion (there may be no run at all); a known run is terminated, retried while KFP is down.
        run_id = status.get("kfpRunId") or decided
        if not run_id:
            try:
                run_id = await asyncio.to_thread(memo.kfp.find, st.kfp_run_name(namespace, name, uid))
            except (RunFailedError, ConfigError) as e:
                logger.warning(f"could not look for a KFP run of {namespace}/{name} to terminate: {e}")
                return
        if not run_id:
            return
        try:
            await asyncio.to_thread(memo.kfp.terminate, str(run_id))
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
        name: str,
        uid: str,
        patch: kopf.Patch,
        memo: Runtime,
        **_: Any,
    ) -> None:
        rt, now = memo, memo.clock()
        conditions = status.get("conditions")
        try:
            parsed = parse_spec(BenchmarkScheduleSpec, dict(spec))
            sched.check_schedule(parsed)
        except ConfigError as e:
            if not any(
                c.get("reason") == "InvalidSpec" and c.get("message") == str(e)[:1000]
                for c in conditions or []
            ):
                kopf.warn(body, reason="InvalidSpec", message=str(e)[:1000])
            patch.status["conditions"] = st.merge_conditions(
                conditions, st.condition("Valid", False, "InvalidSpec", str(e), now)
            )
            return
        due = sched.due_time(parsed, sched.last_time(status, meta, now), now)
        if due is None:
            return
        patch.status["lastScheduleTime"] = st.timestamp(due)
        valid = st.condition("Valid", True, "Valid", "the schedule is valid", now)
        if parsed.suspend or sched.too_late(parsed, due, now):
            why = "suspended" if parsed.suspend else "missed by more than startingDeadlineSeconds"
            patch.status["conditions"] = st.merge_conditions(
                conditions,
                valid,
                st.condition("Scheduled", False, "Skipped", f"{st.timestamp(due)}: {why}", now),
            )
            return
        owned = sched.owned_runs(await asyncio.to_thread(rt.kube.list, namespace), uid)
        running = sched.active(owned)
        if running and parsed.concurrency_policy == "Forbid":
            message = (
                f"{st.timestamp(due)}: skipped, {running[0]['metadata']['name']} is still active (Forbid)"
            )
            patch.status["conditions"] = st.merge_conditions(
                conditions, valid, st.condition("Scheduled", False, "ConcurrencyForbid", message, now)
            )
            return
        template = parsed.run_template.spec
        try:
            commit = await asyncio.to_thread(
                remote_branch_head, template.repository, template.branch or "main"
            )
        except (ConfigError, RunFailedError) as e:
            patch.status["conditions"] = st.merge_conditions(
                conditions, valid, st.condition("Scheduled", False, "BranchUnresolved", str(e), now)
            )
            kopf.warn(body, reason="BranchUnresolved", message=str(e)[:1000])
            return
        if parsed.concurrency_policy == "Replace":
            for run in running:
                await asyncio.to_thread(rt.kube.delete, namespace, run["metadata"]["name"])
        manifest = sched.run_manifest(dict(body), parsed, commit, due)
        await asyncio.to_thread(rt.kube.create, manifest)
        run_name = manifest["metadata"]["name"]
        for old in sched.to_prune(
            owned, parsed.successful_runs_history_limit, parsed.failed_runs_history_limit
        ):
            await asyncio.to_thread(rt.kube.delete, namespace, old)
        patch.status.update(
            {
                "lastRunName": run_name,
                "lastCommit": commit,
                "active": [r["metadata"]["name"] for r in running if parsed.concurrency_policy != "Replace"]
                + [run_name],
                "observedGeneration": meta.get("generation", 1),
                "conditions": st.merge_conditions(
                    conditions,
                    valid,
                    st.condition(
                        "Scheduled", True, "RunCreated", f"created {run_name} at {commit[:12]}", now
                    ),
                ),
            }
        )
