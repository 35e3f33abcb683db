"""A resource's status: the pydantic models it is written through, and its values, computed.

`BenchmarkRunStatus` and `BenchmarkScheduleStatus` are to the status what `resources.py`'s models are to
the spec: `crds.py` generates the CRDs' status schemas from them (their descriptions are what
`kubectl explain` shows), and every status a handler writes is one of them, dumped (`patch()`), so a
key the model lacks cannot be written. The functions below compute the values (phases from KFP states,
conditions, the verdict summary): pure functions over plain values, tested without a cluster.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from benchgate.kfp.run_request import exit_code_for
from benchgate.results.comparison import STATUSES

Phase = Literal["Pending", "Submitted", "Running", "Succeeded", "Failed", "Canceled"]
PENDING: Final = "Pending"
SUBMITTED: Final = "Submitted"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
CANCELED: Final = "Canceled"
ACTIVE_PHASES: tuple[Phase, ...] = (SUBMITTED, RUNNING)
TERMINAL_PHASES: tuple[Phase, ...] = (SUCCEEDED, FAILED, CANCELED)
VerdictResult = Literal["PASS", "WARN", "FAIL", "UNKNOWN"]
HistoryResult = Literal["ok", "regression", "error"]
VERDICTS: tuple[str, ...] = get_args(VerdictResult)

# KFP v2beta1 run states -> phase. A state KFP adds later reads as Running until it ends.
KFP_PHASES: dict[str, Phase] = {
    "PENDING": SUBMITTED,
    "RUNTIME_STATE_UNSPECIFIED": SUBMITTED,
    "RUNNING": RUNNING,
    "PAUSED": RUNNING,
    "CANCELING": RUNNING,
    "SUCCEEDED": SUCCEEDED,
    "SKIPPED": FAILED,  # nothing ran, so nothing passed
    "FAILED": FAILED,
    "CANCELED": CANCELED,
}


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, as Kubernetes writes times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def kfp_run_name(namespace: str, name: str, uid: str) -> str:
    """The KFP run's name for one BenchmarkRun object: the same on every retry of the same object, and
    different for a new object of the same name (its uid differs)."""
    digest = hashlib.sha256(f"{namespace}/{name}/{uid}".encode()).hexdigest()[:10]
    return f"br-{namespace[:40]}-{name[:60]}-{digest}"


def phase_for(kfp_state: str, tasks: list[tuple[str, str]]) -> tuple[Phase, str, str]:
    """(phase, reason, message) for a KFP run in `kfp_state` with `tasks` (display name, state)."""
    phase = KFP_PHASES.get(kfp_state, RUNNING)
    if phase not in TERMINAL_PHASES:
        return phase, f"Kfp{kfp_state.title().replace('_', '')}", f"the KFP run is {kfp_state}"
    code, message = exit_code_for(kfp_state, tasks)
    if phase == SUCCEEDED:
        return phase, "GatePassed", message
    if phase == CANCELED:
        return phase, "KfpCanceled", "the KFP run was canceled"
    return phase, ("Regression" if code == 1 else "RunFailed"), message


def condition(
    kind: str,
    status: bool | None,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None = None,
) -> dict[str, Any]:
    """A condition as Kubernetes writes them; `status` None is Unknown. Its observedGeneration is
    usually left to `stamped` (applied to every status a handler writes); `generation` sets it here,
    for a condition about a generation other than the object's current one."""
    made: dict[str, Any] = {
        "type": kind,
        "status": "Unknown" if status is None else "True" if status else "False",
        "reason": reason,
        "message": message[:1000],
        "lastTransitionTime": timestamp(now),
    }
    if generation is not None:
        made["observedGeneration"] = generation
    return made


def merge_conditions(
    existing: Sequence[Mapping[str, Any]] | None, *updates: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Replace conditions of the same type; keep a condition's transition time while its status holds."""
    merged = {str(c.get("type")): dict(c) for c in existing or []}
    for update in updates:
        old = merged.get(update["type"])
        if old is not None and old.get("status") == update["status"]:
            update = {
                **update,
                "lastTransitionTime": old.get("lastTransitionTime", update["lastTransitionTime"]),
            }
        merged[update["type"]] = dict(update)
    return list(merged.values())


def holds(conditions: list[Mapping[str, Any]] | None, kind: str, reason: str) -> bool:
    """Whether a True condition of `kind` with `reason` is there already."""
    return any(
        c.get("type") == kind and c.get("status") == "True" and c.get("reason") == reason
        for c in conditions or []
    )


def verdict_summary(tags: Mapping[str, str], metrics: Mapping[str, float]) -> dict[str, Any]:
    """status.verdict from the MLflow gate run's verdict tag and gate/* metrics."""
    from benchgate.tracking.client import TAG_VERDICT

    changes: dict[str, float] = {}
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "gate" and parts[2] == "tokens_per_s_change_pct":
            changes[parts[1]] = float(value)
    summary: dict[str, Any] = {"result": tags.get(TAG_VERDICT, "")}
    if changes:
        summary["tokensPerSecondChangePct"] = {ws: round(change, 2) for ws, change in changes.items()}
        worst = min(changes, key=lambda ws: changes[ws])
        summary["throughputChange"] = f"{changes[worst]:+.1f}% (ws={worst.removeprefix('ws')})"
    checks = {
        status: int(metrics[f"gate/checks_{status.lower()}"])
        for status in STATUSES
        if f"gate/checks_{status.lower()}" in metrics
    }
    if checks:
        summary["checks"] = checks
    return summary


# ---------------------------------------------------------------- the models the status is written through


def _rfc3339(text: str) -> str:
    parse_time(text)  # a ValueError (pydantic's validation error) unless it is a time
    return text


# A time as Kubernetes writes them (`timestamp`): a string in the status and in the schema.
Timestamp = Annotated[
    str, AfterValidator(_rfc3339), WithJsonSchema({"type": "string", "format": "date-time"})
]


class StatusModel(BaseModel):
    """A status (or a part of one) as the handlers write it: every field optional and written only when
    set (a handler writes what it decided, nothing else); unknown keys refused (a typo would otherwise
    be a field no one reads)."""

    # `status` keeps kopf's own progress keys beside these: the CRD preserves unknown fields there.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def patch(self) -> dict[str, Any]:
        """The fields set, under their Kubernetes names: what a handler merges into `.status`."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class Condition(StatusModel):
    """One condition, shaped as Kubernetes' own (`kubectl wait --for=condition=<type>`)."""

    type: str = Field(
        ...,
        description="BenchmarkRun: Succeeded, Ready, Admitted, Submitted, KfpReachable, Finished, "
        "VerdictRead, SpecApplied. BenchmarkSchedule: Valid, Scheduled. One condition per type.",
    )
    status: Literal["True", "False", "Unknown"] = Field(..., description="True, False or Unknown.")
    reason: str | None = Field(None, description="Why, in one CamelCase word (e.g. Queued, GatePassed).")
    message: str | None = Field(None, description="Why, in words (at most 1000 characters).")
    last_transition_time: Timestamp | None = Field(
        None, description="When the status last changed (a new reason with the same status keeps it)."
    )
    observed_generation: int | None = Field(
        None, description="The metadata.generation of the object when the condition was set."
    )


# Conditions are a map keyed by their type (Kubernetes API conventions): server-side apply merges them
# by type, and an API server refuses two of one type.
CONDITIONS_LIST_MAP: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


class Verdict(StatusModel):
    """The gate's verdict and headline figures, read from the gate run in MLflow when the KFP run ends."""

    result: VerdictResult | None = Field(
        None, description="PASS, WARN, FAIL or UNKNOWN: the gate run's benchgate.verdict tag."
    )
    throughput_change: str | None = Field(
        None, description="Headline tokens/s change: the worst world size's, e.g. '-8.4% (ws=8)'."
    )
    tokens_per_second_change_pct: (
        dict[
            str,
            Annotated[
                float, Field(description="The change at that world size, in percent (negative: slower).")
            ],
        ]
        | None
    ) = Field(None, description="tokens/s change in percent per world size ('ws1', 'ws8').")
    checks: dict[str, Annotated[int, Field(description="How many checks ended with that result.")]] | None = (
        Field(None, description="How many checks ended PASS, WARN, UNKNOWN, FAIL, NEW, INFO.")
    )


class BenchmarkRunStatus(StatusModel):
    """What the controller observed of a BenchmarkRun: its phase, its KFP run and the gate's verdict."""

    phase: Phase | None = Field(
        None,
        description="Pending: validated, waiting (queue or KFP retry); Submitted: the KFP run exists; "
        "Running; Succeeded: the pipeline finished and the gate passed or warned; Failed: a regression, "
        "UNKNOWN, a failed task, a rejected spec or the deadline; Canceled: the KFP run was canceled.",
    )
    short_commit: str | None = Field(None, description="The first 12 characters of spec.commit.")
    kfp_run_id: str | None = Field(None, description="The KFP run's id.")
    kfp_run_name: str | None = Field(
        None, description="The KFP run's name, br-<namespace>-<name>-<hash>: one per object."
    )
    kfp_run_url: str | None = Field(None, description="The KFP run's page in the KFP UI.")
    kfp_state: str | None = Field(None, description="The KFP run's own state, as KFP reports it.")
    mlflow_run_id: str | None = Field(None, description="The gate's parent run in MLflow.")
    mlflow_run_url: str | None = Field(None, description="The gate's parent run in the MLflow UI.")
    verdict: Verdict | None = Field(
        None, description="The gate's verdict (empty when MLflow has no gate run for the KFP run)."
    )
    conditions: list[Condition] | None = Field(
        None,
        description="Succeeded (True, False or Unknown while it runs) and Ready, from the phase; "
        "Admitted (the admin policy), Submitted, KfpReachable, Finished, VerdictRead, SpecApplied; "
        "with reasons.",
        json_schema_extra=CONDITIONS_LIST_MAP,
    )
    observed_generation: int | None = Field(
        None,
        description="The metadata.generation the controller last acted on: validated and submitted, or, "
        "for an edit after the submission, answered with condition SpecApplied False.",
    )
    submitted_generation: int | None = Field(
        None,
        description="The metadata.generation the KFP run was submitted with, once a later edit was not "
        "applied (set with SpecApplied False).",
    )
    start_time: Timestamp | None = Field(None, description="When the KFP run was submitted.")
    completion_time: Timestamp | None = Field(None, description="When the run ended, or was refused.")
    active_deadline_seconds: int | None = Field(
        None,
        description="The deadline the run goes with: spec.activeDeadlineSeconds, else the admin policy's "
        "defaultActiveDeadlineSeconds (unset: none).",
    )


class HistoryRegression(StatusModel):
    """A change for the worse that nobody acknowledged, starting in one of the newest runs."""

    figure: str = Field(..., description="The figure whose level moved, e.g. 'tokens/s ws=8'.")
    commit: str = Field(..., description="The commit of the first run at the new level (a full SHA).")
    run_id: str = Field(
        ...,
        description="That run's gate run in MLflow: `benchgate history ack RUN_ID --reason TEXT` accepts "
        "the change.",
    )
    change_pct: float = Field(
        ..., description="The change of the figure's level in percent (tokens/s negative: slower)."
    )


class HistoryCheckStatus(StatusModel):
    """The last history check of a schedule (spec.historyCheck), made after one of its runs ended."""

    result: HistoryResult | None = Field(
        None,
        description="ok: no unacknowledged regression starts in the newest runs; regression: one does "
        "(with a Warning Event); error: the check could not be made (message says why; retried).",
    )
    checked_at: Timestamp | None = Field(None, description="When the check was made.")
    run_name: str | None = Field(None, description="The BenchmarkRun whose end the check followed.")
    profile: str | None = Field(
        None, description="The machine profile checked: that run's (empty when its gate run was not read)."
    )
    workload: str | None = Field(None, description="The workload checked: that run's (empty likewise).")
    runs: int | None = Field(None, description="How many gate runs the change points were found over.")
    regressions: list[HistoryRegression] | None = Field(
        None,
        description="The unacknowledged regressions among the newest runs (empty unless result is "
        "regression).",
    )
    message: str | None = Field(None, description="The outcome in words (at most 1000 characters).")


class BenchmarkScheduleStatus(StatusModel):
    """What the controller did with a BenchmarkSchedule at its last cron time."""

    last_schedule_time: Timestamp | None = Field(
        None, description="The last cron time handled, whether a run was created or not."
    )
    last_run_name: str | None = Field(None, description="The BenchmarkRun created last.")
    last_commit: str | None = Field(None, description="The branch head the last run benchmarks (a full SHA).")
    active: list[Annotated[str, Field(description="A BenchmarkRun's name.")]] | None = Field(
        None,
        description="The schedule's unfinished runs when it last created one, that one included (not "
        "updated as they finish).",
    )
    conditions: list[Condition] | None = Field(
        None, description="Valid and Scheduled, with reasons.", json_schema_extra=CONDITIONS_LIST_MAP
    )
    observed_generation: int | None = Field(
        None, description="The metadata.generation the controller validated."
    )
    next_schedule_time: Timestamp | None = Field(
        None,
        description="The next cron time the controller acts on (a suspended schedule skips it); absent "
        "while the spec is invalid.",
    )
    history_check: HistoryCheckStatus | None = Field(
        None,
        description="The last history check (spec.historyCheck), made after a run of the schedule ended.",
    )
