"""How a gate run looks in MLflow's UI: the experiment opens on its runs table with benchgate's columns,
a parent run's name and description carry the verdict, its series chart against the right axis, and
the links benchgate prints go straight to the runs.

`tracking.py` logs the runs with the experiment kind, names, descriptions and series made here; the
CLI prints the links. The UI decides much from tags and from the link it is opened with, not from
anything else a run holds, hence the tags and URL parameters below. docs/mlflow.md says it for people.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchgate.results.figures import RUN_TOKENS_PER_S

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Experiment, Metric

TAG_DESCRIPTION = "mlflow.note.content"  # the run's description in the MLflow UI (Markdown)
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
# MLflow 3's UI shows an experiment of this kind as model training: the runs table first.
EXPERIMENT_KIND = "custom_model_development"
MAX_TAG_LENGTH = 8000  # MLflow's limit on a tag value

# The runs table shows by default only Run Name, Created, Duration, Source, Models and Dataset, and keeps
# any other choice in the browser. It loads a saved view from the experiment tag
# `mlflow.sharedViewState.<key>` when its link has `viewStateShareKey=<key>` (what its Share button
# writes): benchgate keeps one under its own key, and leaves the views people share alone.
VIEW_KEY = "benchgate"
TAG_VIEW = f"mlflow.sharedViewState.{VIEW_KEY}"
# Columns as the table names them (<type>.`<name>`), in order, with widths in px. Run Name, Created and
# Duration always show; Run Name can be narrow, its parts have columns. `Version` is the UI's column for
# the commit (tag mlflow.source.git.commit): it offers no mlflow.* tag as a tag column.
ALWAYS_SHOWN = {"attributes.`Run Name`": 180, "runDateAndNestInfo": 140, "duration": 80}
IDENTITY_COLUMNS = {
    "tags.`benchgate.verdict`": 120,
    "tags.`benchgate.machine_profile`": 230,
    "tags.`benchgate.workload`": 135,
    "attributes.`Version`": 90,
}
FIGURE_COLUMNS = {"metrics.`scaling_efficiency_pct`": 160, "metrics.`eval/perplexity`": 120}
THROUGHPUT_WIDTH = 150
# The run's tokens/s at each world size (results/figures.RUN_TOKENS_PER_S: the verdict table's figure);
# views stored before it was logged showed the p50 column, whose world sizes are still read from them.
THROUGHPUT = re.compile(r"metrics\.`ws(\d+)/tokens_per_s_(?:mean|p50)`")


def mark_experiment_kind(client: MlflowClient, experiment: Experiment) -> None:
    """Tag an experiment found without a kind (one created before benchgate set it, or by hand) with
    EXPERIMENT_KIND; new experiments get it when created."""
    from mlflow.exceptions import MlflowException

    if TAG_EXPERIMENT_KIND in experiment.tags:  # a kind someone chose in the UI stays
        return
    with contextlib.suppress(MlflowException):  # only how the UI opens it: not worth failing
        client.set_experiment_tag(experiment.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND)


def runs_view(world_sizes: Iterable[int]) -> dict[str, Any]:
    """benchgate's view of the runs table: identity columns, the run's tokens/s at each world size
    (sorted), scaling efficiency and perplexity."""
    throughput = {f"metrics.`ws{n}/{RUN_TOKENS_PER_S}`": THROUGHPUT_WIDTH for n in sorted(set(world_sizes))}
    widths = ALWAYS_SHOWN | IDENTITY_COLUMNS | throughput | FIGURE_COLUMNS
    selected = [column for column in widths if column not in ALWAYS_SHOWN]
    return {"selectedColumns": selected, "columnOrder": list(widths), "columnWidths": widths}


def view_world_sizes(value: str | None) -> set[int]:
    """The world sizes whose tokens/s a stored view shows (none from a missing or unreadable one)."""
    try:
        selected = json.loads(value or "{}")["selectedColumns"]
        return {int(m[1]) for column in selected if (m := THROUGHPUT.fullmatch(str(column)))}
    except (ValueError, TypeError, KeyError):
        return set()


def share_view(client: MlflowClient, experiment_id: str, world_sizes: Iterable[int]) -> None:
    """Keep benchgate's view of the experiment showing these world sizes as well as those it showed
    (runs with other world sizes share the table); written only when it changes."""
    from mlflow.exceptions import MlflowException

    with contextlib.suppress(MlflowException):  # only how the UI shows runs: not worth failing
        current = client.get_experiment(experiment_id).tags.get(TAG_VIEW)
        view = json.dumps(runs_view(view_world_sizes(current) | set(world_sizes)))
        if view != current:
            client.set_experiment_tag(experiment_id, TAG_VIEW, view)


def ui_url(base: str, experiment_id: str, run_id: str = "") -> str:
    """The experiment's runs table in benchgate's view (or one run's page) in the MLflow UI at `base`.

    MLflow 3.17's UI shows GenAI or model-training pages by a switch it remembers per browser (GenAI
    at first), not by the experiment's kind; the link's `workflowType` sets it, so it opens on runs."""
    page = f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs"
    if run_id:
        return f"{page}/{run_id}?workflowType=machine_learning"
    return f"{page}?workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"


def run_name(verdict: str, profile: str, workload: str, commit: str) -> str:
    """The parent's name: verdict, machine profile, workload and commit, all in the one text column the
    runs table shows without benchgate's view (the others are Created, Duration, Source, Models,
    Dataset), in the order it keeps them when it cuts the name to its width."""
    return f"{verdict} on {profile}: {workload}" + (f" @ {commit[:12]}" if commit else "")


def description(entry: Path, verdict: str) -> str:
    """The run's description: the verdict table of compare.md (Markdown), cut to fit a tag."""
    try:
        text = (entry / "compare.md").read_text(encoding="utf-8").strip()
    except FileNotFoundError:  # entries spooled before compare.md existed
        return f"benchgate verdict: **{verdict}**"
    cut = "\n\n… (cut: the whole table is the run's compare.md artifact)"
    return text if len(text) <= MAX_TAG_LENGTH else text[: MAX_TAG_LENGTH - len(cut)] + cut


def metric(key: str, value: float, timestamp_ms: int, step: int = 0) -> Metric:
    from mlflow.entities import Metric

    return Metric(key, float(value), timestamp_ms, step)


def step_series(prefix: str, metrics: dict[str, Any], timestamp_ms: int) -> list[Metric]:
    """Per-step series of one world size: step time, throughput, loss (step = measured step index)."""
    samples = metrics["samples"]
    out = []
    for i, seconds in enumerate(samples["step_time_s"]):
        out.append(metric(f"{prefix}step_time_ms", seconds * 1e3, timestamp_ms, i))
        out.append(metric(f"{prefix}tokens_per_s", samples["tokens_per_s"][i], timestamp_ms, i))
        if i < len(samples["loss"]):  # a diverged run's losses stop before it (measure/divergence.py)
            out.append(metric(f"{prefix}loss", samples["loss"][i], timestamp_ms, i))
    return out


def system_series(metrics: dict[str, Any], started_ms: int) -> list[Metric]:
    """One world size's system metrics (system/<name>): step = sample index, timestamp = when it was
    sampled (the run's start plus its offset), so they chart against wall-clock time as well."""
    system = metrics.get("system") or {}
    times = system.get("t_s", [])
    out = []
    for name, values in system.get("series", {}).items():
        for i, value in enumerate(values):
            if value is not None:
                out.append(metric(f"system/{name}", value, started_ms + int(times[i] * 1e3), i))
    return out
