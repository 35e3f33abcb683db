"""BenchmarkSchedule decisions, computed: when a run is due, which runs to prune, the run to create.

Pure functions (the clock and the cluster's objects are arguments), so cron, time zones, concurrency
policies and history limits are tested without waiting for a real minute to pass.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.resources import BenchmarkScheduleSpec
from benchgate.controller.status import CANCELED, FAILED, SUCCEEDED, TERMINAL_PHASES, parse_time
from benchgate.errors import ConfigError

SCHEDULE_LABEL = f"{GROUP}/schedule"
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


def due_time(spec: BenchmarkScheduleSpec, last: datetime, now: datetime) -> datetime | None:
    """The latest scheduled time in (last, now], or None when nothing is due. Missed times collapse into
    the latest one: a controller that was down all week runs the branch head once, not seven times."""
    from croniter import croniter

    zone = check_schedule(spec)
    times = croniter(spec.schedule, last.astimezone(zone))
    due = None
    for _ in range(MAX_CATCH_UP):
        candidate = times.get_next(datetime)
        if candidate > now:
            break
        due = candidate
    else:
        # Far behind: jump straight to the newest time not after now.
        due = croniter(spec.schedule, now.astimezone(zone)).get_prev(datetime)
    return due


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


def run_name(schedule_name: str, due: datetime) -> str:
    """One name per schedule and time: creating it twice (a retried tick) is a conflict, not a second run."""
    minute = int(due.timestamp()) // 60
    digest = hashlib.sha256(f"{schedule_name}/{minute}".encode()).hexdigest()[:6]
    return f"{schedule_name[:200]}-{minute}-{digest}"


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
            "labels": {**template.metadata.labels, SCHEDULE_LABEL: meta["name"]},
            "annotations": {**template.metadata.annotations, f"{GROUP}/scheduled-at": due.isoformat()},
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


def last_time(status: dict[str, Any], meta: dict[str, Any], now: datetime) -> datetime:
    """Where the schedule counts from: its last scheduled time, else its creation."""
    return parse_time(status.get("lastScheduleTime")) or parse_time(meta.get("creationTimestamp")) or now
