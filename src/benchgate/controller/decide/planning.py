"""What the BenchmarkRun handlers decide, computed: from the object (spec, status, metadata) and what a
handler gathered (a free slot, the KFP run's state, the verdict MLflow had, the clock's reading) to an
`Outcome`: the status to write, a warning Event, and whether kopf retries or gives up.

No kopf, no I/O, no clock: `handlers/run.py` gathers the inputs, calls these and applies what they return,
so every decision is tested with plain values (tests/unit/controller/test_controller_planning.py). Every
status is a `BenchmarkRunStatus`, so a key its model lacks cannot be written. The BenchmarkSchedule's
decisions are in `schedule.py`, with the same `Outcome`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from benchgate.controller.access import FINALIZER, KOPF_DEFAULT_FINALIZER
from benchgate.controller.spec import status as st
from benchgate.controller.spec.resources import BenchmarkRunSpec, parse_spec, pipeline_arguments
from benchgate.controller.spec.status import BenchmarkRunStatus, BenchmarkScheduleStatus, Verdict
from benchgate.errors import ConfigError

# What the create handler remembers of an object it refused (of one it submitted: the KFP run's id).
REFUSED = "refused"
# The object's spec, status or metadata as kopf hands them over (read-only views of plain JSON).
View = Mapping[str, Any]


@dataclass(frozen=True)
class Outcome:
    """What a handler does once it has decided: write `status` (None: nothing), post `warning` (reason,
    message) as a warning Event or `notice` as a normal one, then end: `give_up` (kopf.PermanentError,
    never tried again) or done (a run that still waits, a timer looks at again)."""

    status: BenchmarkRunStatus | BenchmarkScheduleStatus | None = None
    warning: tuple[str, str] | None = None
    notice: tuple[str, str] | None = None
    give_up: str | None = None


@dataclass(frozen=True)
class Submission:
    """A spec to submit: the pipeline's arguments, the KFP run's name, the status written first, and the
    spec as parsed (what the admin policy checks)."""

    arguments: dict[str, Any]
    run_name: str
    status: BenchmarkRunStatus
    spec: BenchmarkRunSpec


@dataclass(frozen=True)
class Ending:
    """A KFP run that has ended: its state, and the phase, reason and message it gives. The verdict is
    read from MLflow before any of it is written (`ended`)."""

    kfp_state: str
    phase: st.Phase
    reason: str
    message: str


def _conditions(status: View, *updates: dict[str, Any]) -> list[dict[str, Any]]:
    return st.merge_conditions(status.get("conditions"), *updates)


# ---------------------------------------------------------------- create: validate, queue, submit once


def seen_before(status: View, remembered: bool) -> bool:
    """Whether a create event comes for an object submitted or refused already: its status says so, or
    this controller remembers it (kmock, and a restarted watch, replay an object's old body)."""
    return bool(status.get("kfpRunId")) or status.get("phase") in st.TERMINAL_PHASES or remembered


def submission(
    spec: View,
    meta: View,
    status: View,
    namespace: str,
    name: str,
    uid: str,
    mlflow_uri: str,
    known_parameters: set[str],
    now: datetime,
) -> Submission | Outcome:
    """The submission of a new BenchmarkRun, or its refusal (Failed, for good) when the spec is invalid:
    the same checks as `benchgate submit` and the pipeline's env task, so never a KFP run for it."""
    try:
        parsed = parse_spec(BenchmarkRunSpec, dict(spec))
        arguments = pipeline_arguments(parsed, mlflow_uri, known_parameters)
    except ConfigError as e:
        return refused(status, "InvalidSpec", str(e), now, give_up=f"invalid spec: {e}")
    first = BenchmarkRunStatus(short_commit=parsed.commit[:12], observed_generation=meta.get("generation", 1))
    return Submission(arguments, st.kfp_run_name(namespace, name, uid), first, parsed)


def refused(status: View, reason: str, message: str, now: datetime, give_up: str = "") -> Outcome:
    """Refused before any KFP run (a bad spec, a refused token, a run KFP rejects): Failed, with an Event,
    never retried. Finished too, so `kubectl wait --for=condition=Finished` ends for these as well."""
    return Outcome(
        status=BenchmarkRunStatus(
            phase=st.FAILED,
            completion_time=st.timestamp(now),
            conditions=_conditions(
                status,
                st.condition("Submitted", False, reason, message, now),
                st.condition("Finished", True, reason, message, now),
            ),
        ),
        warning=(reason, message),
        give_up=give_up or message,
    )


def migrated_finalizers(finalizers: list[str] | None) -> list[str] | None:
    """The finalizers with kopf's default marker replaced by benchgate's, None when there is none: an
    object finalized under the old name would stay Terminating, as nothing removes that name now."""
    if KOPF_DEFAULT_FINALIZER not in (finalizers or []):
        return None
    kept = [f for f in finalizers or [] if f != KOPF_DEFAULT_FINALIZER]
    return kept if FINALIZER in kept else [*kept, FINALIZER]


def slot_free(held: set[str], name: str, limit: int) -> bool:
    """Whether run `name` may hold a slot of its namespace's limit (0: none), given the runs holding one."""
    return name in held or limit <= 0 or len(held) < limit


def queued(status: View, namespace: str, limit: int, now: datetime, told: str | None = None) -> Outcome:
    """No free slot: Pending (reason Queued); the dispatch timer looks again every poll interval.
    `told`: the reason this controller last told of the run's wait (`_pending`)."""
    message = f"waiting: {limit} BenchmarkRuns of namespace {namespace} are submitted or running"
    return _pending(status, "Queued", message, now, told)


def kfp_unavailable(status: View, message: str, now: datetime, told: str | None = None) -> Outcome:
    """KFP unreachable or answering 5xx: Pending (reason KfpUnavailable); submitted again later."""
    return _pending(status, "KfpUnavailable", message, now, told)


def claimed_elsewhere(status: View, message: str, now: datetime, told: str | None = None) -> Outcome:
    """Another controller claimed the submission (`fencing`): Pending (reason SubmissionClaimed)."""
    return _pending(status, "SubmissionClaimed", message, now, told)


# The reasons a run waits for: a slot of its namespace's limit, KFP, or another controller's claim.
WAITING = ("Queued", "KfpUnavailable", "SubmissionClaimed")


def waiting(status: View) -> bool:
    """Whether the dispatch timer looks at this run: Pending for a slot or for KFP, with no KFP run."""
    return (
        status.get("phase") == st.PENDING
        and not status.get("kfpRunId")
        and any(
            c.get("type") == "Submitted" and c.get("status") == "False" and c.get("reason") in WAITING
            for c in status.get("conditions") or []
        )
    )


def _pending(status: View, reason: str, message: str, now: datetime, told: str | None) -> Outcome:
    """Pending, condition Submitted False `reason`. Waiting is a state, not an error: an Event when the
    run starts waiting for this reason (normal for a queue, a warning for KFP), and the same wait seen
    again by the next look writes and tells nothing.

    What was said is `told`, the reason this controller last told of this run, before the status: the
    status a handler is given can predate the write of the look before (kopf writes after the handler
    returns, and a replayed or queued watch event carries the old body), and would tell the same wait
    twice. The status speaks only for a controller that has told nothing yet (one just restarted)."""
    current: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Submitted"), {}
    )
    same = status.get("phase") == st.PENDING and current.get("status") == "False"
    same = same and current.get("reason") == reason
    if same and current.get("message") == message:
        return Outcome()
    said = (reason if same else None) if told is None else told
    news = None if said == reason else (reason, message)
    return Outcome(
        status=BenchmarkRunStatus(
            phase=st.PENDING,
            conditions=_conditions(status, st.condition("Submitted", False, reason, message, now)),
        ),
        notice=news if reason == "Queued" else None,
        warning=news if reason != "Queued" else None,
    )


def kfp_refused(status: View, unauthorized: bool, message: str, now: datetime) -> Outcome:
    """KFP refused the token (`unauthorized`) or the run: refused for good."""
    return refused(status, "KfpUnauthorized" if unauthorized else "KfpRejected", message, now)


def submitted(status: View, run_name: str, run_id: str, url: str, reused: bool, now: datetime) -> Outcome:
    """The KFP run exists (created now, or `reused`: one of the same name was there): Submitted."""
    message = f"{'attached to existing' if reused else 'submitted'} KFP run {run_name}"
    return Outcome(
        status=BenchmarkRunStatus(
            phase=st.SUBMITTED,
            kfp_run_id=run_id,
            kfp_run_name=run_name,
            kfp_run_url=url,
            kfp_state="PENDING",
            start_time=st.timestamp(now),
            conditions=_conditions(status, st.condition("Submitted", True, "KfpRunCreated", message, now)),
        )
    )


def holds_slot(status: View) -> bool:
    """Whether a run holds a slot of its namespace's limit: submitted and not ended (after a restart)."""
    return status.get("phase") in st.ACTIVE_PHASES


# -------------------------------------------------------- follow: mirror the KFP run, read the verdict


def following(status: View) -> bool:
    """Whether the follow timer looks at this run: it has a KFP run that has not ended."""
    return bool(status.get("kfpRunId")) and status.get("phase") not in st.TERMINAL_PHASES


def past_deadline(spec: View, status: View, now: datetime) -> bool:
    deadline = _deadline(spec, status)
    started = st.parse_time(status.get("startTime"))
    return bool(deadline and started and now - started > timedelta(seconds=int(deadline)))


def _deadline(spec: View, status: View) -> Any:
    # The status holds the deadline admission gave the run (the policy's default where the spec sets
    # none); a run admitted before the status had it goes by its spec.
    return status.get("activeDeadlineSeconds") or spec.get("activeDeadlineSeconds")


def deadline_exceeded(spec: View, status: View, terminated: bool, now: datetime) -> Outcome:
    """The run passed activeDeadlineSeconds while its KFP run was still going: Failed. `terminated`:
    this look terminated the KFP run (else it was already being canceled)."""
    message = (
        f"ran longer than activeDeadlineSeconds={_deadline(spec, status)}; "
        f"the KFP run {'was terminated' if terminated else 'was already being canceled'}"
    )
    return Outcome(status=_finished(status, st.FAILED, "DeadlineExceeded", message, now))


def terminate_refused(status: View, message: str, now: datetime) -> Outcome:
    """KFP refused to terminate a run past its deadline: said as a condition (no Event on every look);
    the phase holds and the next look tries again."""
    refused = st.condition("KfpReachable", False, "TerminateRefused", message, now)
    return Outcome(status=BenchmarkRunStatus(conditions=_conditions(status, refused)))


def kfp_unreadable(status: View, message: str, now: datetime) -> Outcome:
    """The KFP run's state could not be read: the phase holds, the next look tries again."""
    unreachable = st.condition("KfpReachable", False, "KfpUnavailable", message, now)
    return Outcome(status=BenchmarkRunStatus(conditions=_conditions(status, unreachable)))


# How long KFP must keep answering 404 for a run before the run counts as gone: one answer could be a
# proxy or a KFP upgrade in flight; a run deleted from KFP (or a store reset) stays gone.
GONE_AFTER = timedelta(seconds=60)


def kfp_run_gone(status: View, message: str, now: datetime) -> Outcome:
    """KFP has no run of the status's id (HTTP 404). The first look says so as a condition; once the
    run has been missing for GONE_AFTER, the BenchmarkRun fails (reason KfpRunGone): it must not hold
    its namespace slot, or wait past its deadline, for a run that will never answer."""
    since = next(
        (
            st.parse_time(c.get("lastTransitionTime"))
            for c in status.get("conditions") or []
            if (c.get("type"), c.get("status"), c.get("reason")) == ("KfpReachable", "False", "KfpRunGone")
        ),
        None,
    )
    if since is not None and now - since >= GONE_AFTER:
        ended = f"{message}; missing since {st.timestamp(since)}"
        failed = _finished(status, st.FAILED, "KfpRunGone", ended, now)
        return Outcome(status=failed, warning=("KfpRunGone", ended))
    missing = st.condition("KfpReachable", False, "KfpRunGone", message, now)
    return Outcome(status=BenchmarkRunStatus(conditions=_conditions(status, missing)))


def observed(status: View, kfp_state: str, tasks: list[tuple[str, str]], now: datetime) -> Outcome | Ending:
    """The KFP run is in `kfp_state`: the phase it gives (nothing to write when nothing changed: no
    patch, no watch event for every run on every poll), or its `Ending`."""
    phase, reason, message = st.phase_for(kfp_state, tasks)
    if phase in st.TERMINAL_PHASES:
        return Ending(kfp_state, phase, reason, message)
    if (
        status.get("kfpState") == kfp_state
        and status.get("phase") == phase
        and st.holds(status.get("conditions"), "KfpReachable", reason)
    ):
        return Outcome()
    reachable = st.condition("KfpReachable", True, reason, message, now)
    return Outcome(
        status=BenchmarkRunStatus(kfp_state=kfp_state, phase=phase, conditions=_conditions(status, reachable))
    )


def mlflow_experiment(spec: View) -> str:
    """The MLflow experiment the run's gate run is logged to."""
    return str(spec.get("mlflowExperiment") or "benchgate")


def ended(
    status: View,
    ending: Ending,
    found: Mapping[str, Any] | None,
    mlflow_error: Exception | None,
    mlflow_set: bool,
    now: datetime,
) -> Outcome:
    """The ended run's final status: its phase, and the verdict `found` in MLflow ({run_id, url, tags,
    metrics}), or why there is none (`mlflow_error`: MLflow failed, which must not hide the KFP outcome;
    `mlflow_set`: whether the controller has an MLflow at all)."""
    fields: dict[str, Any] = {"kfp_state": ending.kfp_state}
    if found is not None:
        verdict = st.condition("VerdictRead", True, "FromMLflow", "verdict read from MLflow", now)
        summary = st.verdict_summary(found["tags"], found["metrics"])
        fields |= {
            "verdict": Verdict.model_validate(summary),
            "mlflow_run_id": found["run_id"],
            "mlflow_run_url": found["url"],
        }
    else:
        if mlflow_error is not None:
            why = f"MLflow unavailable: {type(mlflow_error).__name__}: {str(mlflow_error)[:200]}"
        else:
            why = "no gate run in MLflow for this KFP run" if mlflow_set else "no MLflow set"
        verdict = st.condition("VerdictRead", False, "VerdictUnavailable", why, now)
    final = _finished(status, ending.phase, ending.reason, ending.message, now, verdict, **fields)
    return Outcome(status=final)


def _finished(
    status: View,
    phase: st.Phase,
    reason: str,
    message: str,
    now: datetime,
    *conditions: dict[str, str],
    **fields: Any,
) -> BenchmarkRunStatus:
    finished = st.condition("Finished", True, reason, message, now)
    return BenchmarkRunStatus(
        phase=phase,
        completion_time=st.timestamp(now),
        conditions=_conditions(status, finished, *conditions),
        **fields,
    )


# ---------------------------------------------------------------- expire and delete


def expiring(spec: View, status: View) -> bool:
    """Whether the expire timer looks at this run: it has a TTL and has ended."""
    return spec.get("ttlSecondsAfterFinished") is not None and status.get("phase") in st.TERMINAL_PHASES


def expired(spec: View, status: View, now: datetime) -> bool:
    """Whether ttlSecondsAfterFinished has passed since the run ended (then it is deleted)."""
    finished = st.parse_time(status.get("completionTime"))
    ttl = timedelta(seconds=int(spec["ttlSecondsAfterFinished"]))
    return finished is not None and now - finished >= ttl


def to_terminate(status: View, remembered: str | None) -> str | None:
    """The KFP run to terminate when a BenchmarkRun is deleted, if any: None when there is none (the run
    ended, or was refused before any KFP run); else its id, from the status or, when the status
    predates the submission (deleted while submitting), from what this controller `remembered`; ""
    when neither names it (a restart since): the handler looks it up by its name.
    """
    if status.get("phase") in st.TERMINAL_PHASES or remembered == REFUSED:
        return None
    return str(status.get("kfpRunId") or remembered or "")


# ---------------------------------------------------------------- repair: a status write that was lost


def needs_repair(status: View) -> bool:
    """Whether the repair timer looks for this run's KFP run: it has none in its status and has not
    ended (refused runs are Failed). A status write lost after the submission (the API server failing
    it, the controller killed between kopf's two writes) leaves a run like this, Pending ones included:
    one the dispatch timer submitted still reads Pending. The look is a read: it never submits."""
    return not status.get("kfpRunId") and status.get("phase") not in st.TERMINAL_PHASES


def repaired(status: View, run_name: str, run_id: str, url: str, now: datetime) -> Outcome:
    """The KFP run of a run whose status had lost it was found by its name: Submitted, as `submitted`
    writes it, with reason Repaired (the follow timer then mirrors its state)."""
    found = submitted(status, run_name, run_id, url, True, now).status
    assert isinstance(found, BenchmarkRunStatus)
    message = f"found KFP run {run_name}, whose submission the status had lost"
    fixed = BenchmarkRunStatus(
        conditions=_conditions(status, st.condition("Submitted", True, "Repaired", message, now))
    )
    return Outcome(status=found.model_copy(update={"conditions": fixed.conditions}))
