"""BenchmarkSchedule decisions, computed: when a run is due, which runs to prune, the run to create.

Pure functions (the clock and the cluster's objects are arguments), so cron, time zones, concurrency
policies and history limits are tested without waiting for a real minute to pass. The schedule timer
(`handlers/schedule.tick`) calls the last ones in turn, gathering what each needs between them:
`reconcile` (Valid, observedGeneration, nextScheduleTime: written only when they change), `look` (due?
skipped?), `forbidden` (after listing the schedule's runs), `branch_unresolved` (when the branch head
cannot be resolved) and `creation` (what to delete, create and prune, and the status to write).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.decide.planning import Outcome
from benchgate.controller.spec.kube_names import label_safe, name_prefix
from benchgate.controller.spec.resources import BenchmarkScheduleSpec, parse_spec
from benchgate.controller.spec.status import (
    CANCELED,
    FAILED,
    SUCCEEDED,
    TERMINAL_PHASES,
    BenchmarkScheduleStatus,
    condition,
    merge_conditions,
    parse_time,
    timestamp,
)
from benchgate.errors import ConfigError

SCHEDULE_LABEL = f"{GROUP}/schedule"
# The schedule's full name, on each of its runs: the label holds a shortened one when the name is
# longer than a label value may be (63 characters).
SCHEDULE_NAME_ANNOTATION = f"{GROUP}/schedule-name"
# A schedule that has not run for longer than this does not replay every missed time: it runs once.
MAX_CATCH_UP = 100


def check_schedule(spec: BenchmarkScheduleSpec) -> ZoneInfo:
    """The schedule's time zone; a ConfigError naming the field for a bad cron expression or zone."""
    from croniter import croniter

    if len(spec.schedule.split()) != 5 or not croniter.is_valid(spec.schedule):
        raise ConfigError(
            f"spec.schedule: got {spec.schedule!r} (expected a cron expression of five fields, "
            "e.g. '0 2 * * *')"
        )
    try:
        return ZoneInfo(spec.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"spec.timeZone: got {spec.time_zone!r} (expected an IANA time zone such as 'Europe/Berlin')"
        ) from None


def _repeated(moment: datetime, zone: ZoneInfo) -> bool:
    """Whether `moment` is the second occurrence of its wall-clock time: the hour a fall-back to
    standard time repeats (01:30 comes twice in New York on 1 November 2026)."""
    wall = moment.replace(tzinfo=None)
    first, second = wall.replace(tzinfo=zone, fold=0), wall.replace(tzinfo=zone, fold=1)
    return (
        first.utcoffset() != second.utcoffset()
        and moment.utcoffset() == second.utcoffset()
        and (
            # Ambiguous, not a time in a spring-forward gap (which croniter never yields anyway).
            first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall
        )
    )


def _fixed_hour(spec: BenchmarkScheduleSpec) -> bool:
    """A schedule at fixed hours (not '*' or '*/N' in the hour field): as cron has it, such a time runs
    once on a fall-back day, not again when the wall clock repeats it; an every-hour schedule runs in
    the repeated hour as in any other (time did pass)."""
    return not spec.schedule.split()[1].startswith("*")


def _times(spec: BenchmarkScheduleSpec, start: datetime, zone: ZoneInfo) -> Iterator[datetime]:
    """The schedule's cron times after `start`, in `zone`, without the repeats of a fall-back day."""
    from croniter import croniter

    times = croniter(spec.schedule, start.astimezone(zone))
    skip_repeats = _fixed_hour(spec)
    while True:
        candidate: datetime = times.get_next(datetime)
        if not (skip_repeats and _repeated(candidate, zone)):
            yield candidate


def due_time(spec: BenchmarkScheduleSpec, last: datetime, now: datetime) -> datetime | None:
    """The latest scheduled time in (last, now], or None when nothing is due. Missed times collapse into
    the latest one: a controller that was down all week runs the branch head once, not seven times."""
    from croniter import croniter

    zone = check_schedule(spec)
    times = _times(spec, last, zone)
    due = None
    for _ in range(MAX_CATCH_UP):
        candidate = next(times)
        if candidate > now:
            break
        due = candidate
    else:
        # Far behind: jump straight to the newest time not after now.
        back = croniter(spec.schedule, now.astimezone(zone))
        due = back.get_prev(datetime)
        while _fixed_hour(spec) and _repeated(due, zone):
            due = back.get_prev(datetime)
    return due


def next_time(spec: BenchmarkScheduleSpec, now: datetime) -> datetime:
    """The first cron time after `now`: the one `due_time` acts on next (in the schedule's zone, so a
    time a DST change skips comes at the first valid minute after it, and one a fall-back repeats
    comes once, as due_time has them too)."""
    return next(_times(spec, now, check_schedule(spec)))


def too_late(spec: BenchmarkScheduleSpec, due: datetime, now: datetime) -> bool:
    deadline = spec.starting_deadline_seconds
    return deadline is not None and now - due > timedelta(seconds=deadline)


def owned_runs(runs: list[dict[str, Any]], schedule_uid: str) -> list[dict[str, Any]]:
    """The BenchmarkRuns this schedule created (its owner reference, not only a label anyone can set)."""
    return [
        r
        for r in runs
        if any(ref.get("uid") == schedule_uid for ref in r.get("metadata", {}).get("ownerReferences", []))
    ]


def phase_of(run: dict[str, Any]) -> str:
    return str((run.get("status") or {}).get("phase") or "")


def active(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if phase_of(r) not in TERMINAL_PHASES]


def to_prune(runs: list[dict[str, Any]], keep_succeeded: int, keep_failed: int) -> list[str]:
    """Names of finished runs beyond the history limits, oldest first."""

    def oldest_first(phases: tuple[str, ...]) -> list[dict[str, Any]]:
        chosen = [r for r in runs if phase_of(r) in phases]
        return sorted(chosen, key=lambda r: str(r["metadata"].get("creationTimestamp", "")))

    names = []
    for phases, keep in (((SUCCEEDED,), keep_succeeded), ((FAILED, CANCELED), keep_failed)):
        finished = oldest_first(phases)
        names += [r["metadata"]["name"] for r in finished[: max(0, len(finished) - keep)]]
    return names


def schedule_label(schedule_name: str) -> str:
    """The value of SCHEDULE_LABEL on the schedule's runs: its name, or, for a name longer than a label
    value may be, a shortened one with a hash of the whole (kube_names.label_safe)."""
    return label_safe(schedule_name)


def runs_selector(schedule_name: str) -> str:
    """The label selector of the schedule's runs: its listings ask the API server for these only."""
    return f"{SCHEDULE_LABEL}={schedule_label(schedule_name)}"


def run_name(schedule_name: str, due: datetime) -> str:
    """One name per schedule and time: creating it twice (a retried tick) is a conflict, not a second run.
    A valid object name for every valid schedule name: the schedule's part is cut to leave room for the
    suffix and never ends in '-' or '.' (a '.-' is no DNS-1123 subdomain)."""
    minute = int(due.timestamp()) // 60
    digest = hashlib.sha256(f"{schedule_name}/{minute}".encode()).hexdigest()[:6]
    suffix = f"{minute}-{digest}"
    return f"{name_prefix(schedule_name, len(suffix))}-{suffix}"


def run_manifest(
    schedule: dict[str, Any], spec: BenchmarkScheduleSpec, commit: str, due: datetime
) -> dict[str, Any]:
    meta = schedule["metadata"]
    template = spec.run_template
    # The run names the branch it benchmarks, so baselines update when that branch is main.
    run_spec = template.spec.model_dump(by_alias=True, exclude_none=True) | {
        "commit": commit,
        "branch": template.spec.branch or "main",
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BenchmarkRun",
        "metadata": {
            "name": run_name(meta["name"], due),
            "namespace": meta["namespace"],
            "labels": {**template.metadata.labels, SCHEDULE_LABEL: schedule_label(meta["name"])},
            "annotations": {
                **template.metadata.annotations,
                f"{GROUP}/scheduled-at": due.isoformat(),
                SCHEDULE_NAME_ANNOTATION: meta["name"],
            },
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "BenchmarkSchedule",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": run_spec,
    }


def last_time(status: Mapping[str, Any], meta: Mapping[str, Any], now: datetime) -> datetime:
    """Where the schedule counts from: its last scheduled time, else its creation."""
    return parse_time(status.get("lastScheduleTime")) or parse_time(meta.get("creationTimestamp")) or now


# ---------------------------------------------------------------- the schedule timer's decisions


@dataclass(frozen=True)
class Due:
    """A valid schedule with a cron time to act on."""

    spec: BenchmarkScheduleSpec
    time: datetime
    schedule: str = ""  # the schedule's name

    def run_name(self) -> str:
        """The name of the run this time creates."""
        return run_name(self.schedule, self.time)

    def handled(self) -> BenchmarkScheduleStatus:
        """The status that records this time as handled (the timer writes it before anything remote:
        a failure after it does not retry this time, the next cron time comes)."""
        return BenchmarkScheduleStatus(last_schedule_time=timestamp(self.time))


def _validated(spec: Mapping[str, Any]) -> BenchmarkScheduleSpec | ConfigError:
    try:
        parsed: BenchmarkScheduleSpec = parse_spec(BenchmarkScheduleSpec, dict(spec))
        check_schedule(parsed)
    except ConfigError as e:
        return e
    return parsed


def _valid(error: ConfigError | None, now: datetime, generation: int | None = None) -> dict[str, Any]:
    """The Valid condition: True, or False with reason InvalidSpec and the error naming the field."""
    if error is None:
        return condition("Valid", True, "Valid", "the schedule is valid", now, generation)
    return condition("Valid", False, "InvalidSpec", str(error), now, generation)


def reconcile(
    spec: Mapping[str, Any], status: Mapping[str, Any], meta: Mapping[str, Any], now: datetime
) -> BenchmarkScheduleStatus | None:
    """What every look at a schedule keeps current, due or not: condition Valid, observedGeneration
    and nextScheduleTime (none while the spec is invalid). None when the status says all three
    already: no status write, and no watch event, at every look."""
    generation = int(meta.get("generation") or 1)
    parsed = _validated(spec)
    error = parsed if isinstance(parsed, ConfigError) else None
    next_at = None if isinstance(parsed, ConfigError) else timestamp(next_time(parsed, now))
    valid = _valid(error, now, generation)
    current: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Valid"), {}
    )
    same_valid = all(
        current.get(k) == valid[k] for k in ("status", "reason", "message", "observedGeneration")
    )
    if (
        same_valid
        and status.get("observedGeneration") == generation
        and status.get("nextScheduleTime") == next_at
    ):
        return None
    return BenchmarkScheduleStatus(
        conditions=merge_conditions(status.get("conditions"), valid),
        observed_generation=generation,
        next_schedule_time=next_at,
    )


def look(
    spec: Mapping[str, Any], status: Mapping[str, Any], meta: Mapping[str, Any], now: datetime
) -> Outcome | Due:
    """The schedule's look at `now` (after `reconcile`, which writes Valid): the time due, or an
    Outcome when the look ends here: an invalid spec (an Event unless this message had one), nothing
    due, or a time skipped (suspended, or later than startingDeadlineSeconds)."""
    conditions = status.get("conditions")
    parsed = _validated(spec)
    if isinstance(parsed, ConfigError):
        message = str(parsed)
        told = any(
            c.get("reason") == "InvalidSpec" and c.get("message") == message[:1000] for c in conditions or []
        )
        return Outcome(warning=None if told else ("InvalidSpec", message))
    due = due_time(parsed, last_time(status, meta, now), now)
    if due is None:
        return Outcome()
    if parsed.suspend or too_late(parsed, due, now):
        why = "suspended" if parsed.suspend else "missed by more than startingDeadlineSeconds"
        return Outcome(status=_scheduled(due, status, False, "Skipped", f"{timestamp(due)}: {why}", now))
    return Due(parsed, due, str(meta.get("name") or ""))


def forbidden(
    due: Due, owned: list[dict[str, Any]], status: Mapping[str, Any], now: datetime
) -> Outcome | None:
    """Under concurrencyPolicy Forbid, a run of the schedule still active skips this time (else None)."""
    running = active(owned)
    if not running or due.spec.concurrency_policy != "Forbid":
        return None
    message = f"{timestamp(due.time)}: skipped, {running[0]['metadata']['name']} is still active (Forbid)"
    return Outcome(status=_scheduled(due.time, status, False, "ConcurrencyForbid", message, now))


def branch_unresolved(due: Due, status: Mapping[str, Any], message: str, now: datetime) -> Outcome:
    """The branch head could not be resolved: this time is skipped, with an Event."""
    return Outcome(
        status=_scheduled(due.time, status, False, "BranchUnresolved", message, now),
        warning=("BranchUnresolved", message),
    )


def refusal(due: Due, message: str) -> str:
    """A refused create as it is told once: the API server's answer without the run's name, which is
    another at every cron time (and which the answer may repeat)."""
    return message.replace(due.run_name(), "")


def create_refused(
    due: Due, status: Mapping[str, Any], message: str, now: datetime, told: str | None = None
) -> Outcome:
    """The API server refused the scheduled run (a quota, an admission policy, RBAC): this time is
    skipped. The Event is posted when the refusal is new, not again at every time it repeats: the same
    `refusal` as `told` (what this controller last told of the schedule, when it told any since the
    schedule's last handled time) or, when it told none (it just started), as the status says (its
    Scheduled condition names the run of the last scheduled time)."""
    said = told
    if said is None:
        last = parse_time(status.get("lastScheduleTime"))
        before = [
            c.get("message") or ""
            for c in status.get("conditions") or []
            if c.get("type") == "Scheduled" and c.get("reason") == "CreateRefused"
        ]
        if before and last is not None:
            said = refusal(Due(due.spec, last, due.schedule), before[0])
    return Outcome(
        status=_scheduled(due.time, status, False, "CreateRefused", message, now),
        warning=None if said == refusal(due, message) else ("CreateRefused", message),
    )


@dataclass(frozen=True)
class Creation:
    """A scheduled run to create: `replace` (unfinished runs deleted first, under Replace), `manifest`,
    `prune` (finished runs beyond the history limits, deleted after) and the schedule's new status."""

    replace: list[str]
    manifest: dict[str, Any]
    prune: list[str]
    outcome: Outcome


def creation(
    due: Due,
    schedule: Mapping[str, Any],
    owned: list[dict[str, Any]],
    commit: str,
    status: Mapping[str, Any],
    now: datetime,
) -> Creation:
    """The run of `commit` (the branch head) for the due time, with what to delete around it."""
    spec = due.spec
    running = [r["metadata"]["name"] for r in active(owned)]
    replacing = spec.concurrency_policy == "Replace"
    manifest = run_manifest(dict(schedule), spec, commit, due.time)
    name = manifest["metadata"]["name"]
    final = _scheduled(
        due.time,
        status,
        True,
        "RunCreated",
        f"created {name} at {commit[:12]}",
        now,
        last_run_name=name,
        last_commit=commit,
        active=([] if replacing else running) + [name],
        observed_generation=schedule["metadata"].get("generation", 1),
    )
    prune = to_prune(owned, spec.successful_runs_history_limit, spec.failed_runs_history_limit)
    return Creation(running if replacing else [], manifest, prune, Outcome(status=final))


def _scheduled(
    due: datetime,
    status: Mapping[str, Any],
    created: bool,
    reason: str,
    message: str,
    now: datetime,
    **fields: Any,
) -> BenchmarkScheduleStatus:
    """The status of a handled time: its lastScheduleTime, the schedule Valid, Scheduled or not."""
    valid = _valid(None, now)
    scheduled = condition("Scheduled", created, reason, message, now)
    return BenchmarkScheduleStatus(
        last_schedule_time=timestamp(due),
        conditions=merge_conditions(status.get("conditions"), valid, scheduled),
        **fields,
    )
