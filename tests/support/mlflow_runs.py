"""Gate runs as MLflow returns them: a parent run's metrics and tags, without a server."""

from __future__ import annotations

from mlflow.entities import Metric, Run, RunData, RunInfo, RunTag

from benchgate.tracking import client as tracking


def logged(figures: dict[str, float], workload: str = "stack", branch: str = "main", i: int = 0) -> Run:
    """A gate run as MLflow returns it (a parent run's metrics and tags)."""
    started_ms = 1_700_000_000_000 + 1000 * i
    tags = [
        RunTag(tracking.TAG_COMMIT, f"{i:02d}" * 20),
        RunTag(tracking.TAG_BRANCH, branch),
        RunTag(tracking.TAG_WORKLOAD, workload),
    ]
    info = RunInfo(f"run{i:02d}", "0", "ci", "FINISHED", started_ms, started_ms + 1000, "active")
    return Run(info, RunData(metrics=[Metric(k, v, started_ms, 0) for k, v in figures.items()], tags=tags))
