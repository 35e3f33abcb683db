"""A BenchmarkSchedule's history check (spec.historyCheck), decided: which ended run to check after,
and what the check found, as the schedule's status.historyCheck and an Event.

A nightly run that passes its gate can still be the fifth 1.5% slowdown in a row; the history shows it
(history/series.py). So after each run of the schedule ends, the controller makes the check of
`benchgate history --check --recent N`: the change points of every figure over the newest gate runs
in MLflow of that run's machine profile and workload, failing on a regression that starts in one of
the newest N runs and that nobody acknowledged (`benchgate history ack`). The machine profile is
known only once the run has measured it, so it is read from the run's gate run in MLflow (found by its
KFP run id). The controller has no checkout, so the runs are in the order they started: a schedule's
runs are of successive branch heads, so that is their commit order.

Pure: the schedule's runs, its status, the clock and the history read from MLflow are arguments. The
handler (`handlers/schedule.check_history`) gathers them; a check that could not be made (MLflow down, no gate
run logged) is result "error" with the reason, made again after RETRY_AFTER.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from benchgate.controller.decide.planning import Outcome, mlflow_experiment
from benchgate.controller.decide.schedule import phase_of
from benchgate.controller.spec.resources import BenchmarkScheduleSpec, HistoryCheck, parse_spec
from benchgate.controller.spec.status import (
    FAILED,
    SUCCEEDED,
    BenchmarkScheduleStatus,
    HistoryCheckStatus,
    HistoryRegression,
    parse_time,
    timestamp,
)
from benchgate.errors import ConfigError
from benchgate.history.series import FigureChange, figure_changes, in_commit_order, unacknowledged_regressions
from benchgate.tracking.read import RunHistory

REGRESSION_EVENT = "HistoryRegression"
# A check that could not be made is made again this long after, not at every look: an MLflow outage is
# waited out with a request every few minutes, not every schedule poll.
RETRY_AFTER = timedelta(minutes=5)
NO_MLFLOW = "the controller has no MLflow to read the history from: set mlflow.trackingUri"
ACK_HINT = "if it is wanted, accept it with `benchgate history ack RUN_ID --reason TEXT`"


@dataclass(frozen=True)
class Pending:
    """An ended run of the schedule whose history is to be checked: its name, its KFP run (which finds its
    gate run in MLflow), the MLflow experiment it logged to, and the check's settings."""

    run_name: str
    kfp_run_id: str
    experiment: str
    check: HistoryCheck


def checks_history(spec: Mapping[str, Any]) -> bool:
    """Whether the schedule asks for the check (the handler's filter): historyCheck present, even empty."""
    return spec.get("historyCheck") is not None


def _ended(run: Mapping[str, Any]) -> tuple[str, str]:
    # RFC 3339 times in UTC with a Z, as the controller writes them: ordered as text.
    return str((run.get("status") or {}).get("completionTime") or ""), str(
        run.get("metadata", {}).get("creationTimestamp") or ""
    )


def pending(
    spec: Mapping[str, Any], status: Mapping[str, Any], owned: list[dict[str, Any]], now: datetime
) -> Pending | None:
    """The newest ended run of the schedule (`owned`) to check after, or None: no check asked for, an
    invalid spec (the schedule timer reports it), no run that reached KFP has ended, or its check is
    made (an error only until RETRY_AFTER has passed). Canceled runs reached no verdict: not checked."""
    try:
        check = parse_spec(BenchmarkScheduleSpec, dict(spec)).history_check
    except ConfigError:
        return None
    if check is None:
        return None
    ended = [
        r for r in owned if phase_of(r) in (SUCCEEDED, FAILED) and (r.get("status") or {}).get("kfpRunId")
    ]
    if not ended:
        return None
    newest = max(ended, key=_ended)
    name = str(newest["metadata"]["name"])
    last = status.get("historyCheck") or {}
    if last.get("runName") == name:
        checked_at = parse_time(last.get("checkedAt"))
        if last.get("result") != "error" or (checked_at is not None and now - checked_at < RETRY_AFTER):
            return None
    experiment = mlflow_experiment(newest.get("spec") or {})
    return Pending(name, str(newest["status"]["kfpRunId"]), experiment, check)


def _regression(change: FigureChange) -> HistoryRegression:
    return HistoryRegression(
        figure=change.figure,
        commit=change.run.commit or "",
        run_id=change.run.run_id or "",
        change_pct=round(change.point.change_pct, 2),
    )


def _said(change: FigureChange) -> str:
    commit = (change.run.commit or "?")[:12]
    return f"{change.figure} {change.point.change_pct:+.1f}% from commit {commit} (run {change.run.run_id})"


def checked(todo: Pending, found: RunHistory | None, now: datetime) -> Outcome:
    """What the check of `todo` found over `found` (the history of its gate run; None: MLflow has no
    gate run of it): ok, or a regression with a Warning Event naming each and how to accept it."""
    if found is None:
        return failed(
            todo,
            f"MLflow has no gate run of {todo.run_name} (KFP run {todo.kfp_run_id}) in experiment "
            f"{todo.experiment!r}: it ended before logging one, or it is not sent yet",
            now,
        )
    runs = in_commit_order(found.points, None)
    alerts = unacknowledged_regressions(figure_changes(runs), runs, todo.check.recent)
    newest = min(todo.check.recent, len(runs))
    if alerts:
        result = "regression"
        message = f"{'; '.join(_said(c) for c in alerts)}; {ACK_HINT}"
    else:
        result = "ok"
        message = f"no unacknowledged regression starts in the newest {newest} of {len(runs)} runs"
    history = HistoryCheckStatus(
        result=result,
        checked_at=timestamp(now),
        run_name=todo.run_name,
        profile=found.profile,
        workload=found.workload,
        runs=len(runs),
        regressions=[_regression(c) for c in alerts],
        message=message[:1000],
    )
    warning = (REGRESSION_EVENT, message) if alerts else None
    return Outcome(status=BenchmarkScheduleStatus(history_check=history), warning=warning)


def failed(todo: Pending, error: str, now: datetime) -> Outcome:
    """The check of `todo` could not be made (`error` says why): result error, no Event (an outage is
    retried, and would post one at every try)."""
    history = HistoryCheckStatus(
        result="error",
        checked_at=timestamp(now),
        run_name=todo.run_name,
        profile="",
        workload="",
        runs=0,
        regressions=[],
        message=error[:1000],
    )
    return Outcome(status=BenchmarkScheduleStatus(history_check=history))
