"""A BenchmarkRun's status, computed: phases from KFP states, conditions, the verdict summary.

Pure functions over plain values, so every mapping here is tested without a cluster; the handlers only
fetch the inputs and write the result.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from benchgate.kfp.submit import exit_code_for

PENDING, SUBMITTED, RUNNING = "Pending", "Submitted", "Running"
SUCCEEDED, FAILED, CANCELED = "Succeeded", "Failed", "Canceled"
ACTIVE_PHASES = (SUBMITTED, RUNNING)
TERMINAL_PHASES = (SUCCEEDED, FAILED, CANCELED)
VERDICTS = ("PASS", "WARN", "FAIL", "UNKNOWN")

# KFP v2beta1 run states -> phase. A state KFP adds later reads as Running until it ends.
KFP_PHASES = {
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


def phase_for(kfp_state: str, tasks: list[tuple[str, str]]) -> tuple[str, str, str]:
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


def condition(kind: str, status: bool, reason: str, message: str, now: datetime) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message[:1000],
        "lastTransitionTime": timestamp(now),
    }


def merge_conditions(
    existing: list[Mapping[str, Any]] | None, *updates: dict[str, str]
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
        merged[update["type"]] = update
    return list(merged.values())


def holds(conditions: list[Mapping[str, Any]] | None, kind: str, reason: str) -> bool:
    """Whether a True condition of `kind` with `reason` is there already."""
    return any(
        c.get("type") == kind and c.get("status") == "True" and c.get("reason") == reason
        for c in conditions or []
    )


def verdict_summary(tags: Mapping[str, str], metrics: Mapping[str, float]) -> dict[str, Any]:
    """status.verdict from the MLflow gate run's verdict tag and gate/* metrics."""
    from benchgate.tracking import TAG_VERDICT

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
        for status in ("PASS", "WARN", "UNKNOWN", "FAIL", "NEW")
        if f"gate/checks_{status.lower()}" in metrics
    }
    if checks:
        summary["checks"] = checks
    return summary
