"""What a person sees of a gate run in MLflow: the experiment opens as model training on benchgate's
columns, the run name and description carry the verdict, every metric is documented in docs/mlflow.md's
Metrics section, and the trace is stored once, gzipped. The gate run tests/tracking shares (gpt-tiny at
ws=1 and 2, eval, trace) against a real `mlflow server`."""

from __future__ import annotations

import gzip
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness import REPO, make_config
from mlflow import MlflowClient

from benchgate.kit.files import read_json
from benchgate.tracking.client import TAG_PARENT, connect
from benchgate.tracking.view import EXPERIMENT_KIND, TAG_EXPERIMENT_KIND, TAG_VIEW

DOC = REPO / "docs" / "mlflow.md"
# A row of the metrics table: | `name or pattern` | run | unit | meaning |
ROW = re.compile(r"^\| `([^`]+)` \| (parent|bench|eval) \|", re.MULTILINE)


def documented() -> dict[str, list[re.Pattern[str]]]:
    """The metrics table of docs/mlflow.md as patterns per run (`<N>`, `<name>`: one name
    segment)."""
    rows: dict[str, list[re.Pattern[str]]] = {"parent": [], "bench": [], "eval": []}
    for name, run in ROW.findall(DOC.read_text(encoding="utf-8")):
        parts = re.split(r"(<[A-Za-z]+>)", name)
        regex = "".join("[A-Za-z0-9_]+" if p.startswith("<") else re.escape(p) for p in parts)
        rows[run].append(re.compile(f"{regex}$"))
    return rows


def test_the_metrics_table_is_read_whole() -> None:
    # Guards the parser: a table it could not read would make the check below vacuous.
    rows = documented()
    assert len(rows["parent"]) >= 20 and len(rows["bench"]) >= 20 and len(rows["eval"]) == 2
    assert any(p.match("ws8/step_time_per_reference_p50") for p in rows["parent"])
    assert not any(p.match("ws8/undocumented") for p in rows["parent"])


@pytest.fixture(scope="module")
def viewed(logged_gate_run: dict[str, Any]) -> dict[str, Any]:
    """The gate run tests/tracking shares, with its children."""
    parent = logged_gate_run["parent"]
    children = logged_gate_run["client"].search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`{TAG_PARENT}` = '{parent.info.run_id}'"
    )
    return {**logged_gate_run, "children": children}


@pytest.mark.slow
def test_every_logged_metric_matches_a_documented_row(viewed: dict[str, Any]) -> None:
    rows = documented()
    runs = [("parent", viewed["parent"])]
    runs += [("eval" if c.info.run_name == "eval" else "bench", c) for c in viewed["children"]]
    assert sorted(kind for kind, _ in runs) == ["bench", "bench", "eval", "parent"]
    for kind, run in runs:
        logged = set(run.data.metrics)
        assert logged, run.info.run_name
        missing = sorted(k for k in logged if not any(p.match(k) for p in rows[kind]))
        assert not missing, f"{run.info.run_name}: not in {DOC}: {missing}"
    # Spot checks that the patterns were exercised by the real keys they stand for.
    assert {"ws1/step_time_per_reference_p50", "ws2/loss", "eval/probe_facts_accuracy_pct"} <= set(
        viewed["parent"].data.metrics
    )


@pytest.mark.slow
def test_the_run_name_description_and_tags_show_verdict_and_profile(viewed: dict[str, Any]) -> None:
    outcome = viewed["outcome"]
    parent = viewed["parent"]
    env = read_json(outcome.out_dir / "env.json")
    verdict, profile = outcome.comparison.verdict, env["machine_profile"]
    commit = env["git"]["commit"]
    suffix = f" @ {commit[:12]}" if commit else ""
    assert parent.info.run_name == f"{verdict} on {profile}: gpt-tiny{suffix}"
    assert parent.data.tags["benchgate.verdict"] == verdict
    assert parent.data.tags["benchgate.machine_profile"] == profile
    description = parent.data.tags["mlflow.note.content"]
    assert description == (outcome.out_dir / "compare.md").read_text(encoding="utf-8").strip()
    assert f"benchgate verdict: **{verdict}**" in description
    # The children are not described: the description is the gate run's.
    assert all("mlflow.note.content" not in c.data.tags for c in viewed["children"])
    experiment = viewed["client"].get_experiment(parent.info.experiment_id)
    assert experiment.tags[TAG_EXPERIMENT_KIND] == EXPERIMENT_KIND == "custom_model_development"


@pytest.mark.slow
def test_the_experiment_holds_benchgates_view_of_the_runs_table(viewed: dict[str, Any]) -> None:
    parent = viewed["parent"]
    experiment = viewed["client"].get_experiment(parent.info.experiment_id)
    shown = json.loads(experiment.tags[TAG_VIEW])["selectedColumns"]
    assert {
        "tags.`benchgate.verdict`",
        "tags.`benchgate.machine_profile`",
        "metrics.`ws1/tokens_per_s_mean`",
        "metrics.`ws2/tokens_per_s_mean`",
    } <= set(shown)
    # Each column names what the parent really logged: a misspelt one would show an empty column.
    for kind, values in (("metrics", parent.data.metrics), ("tags", parent.data.tags)):
        names = [c.removeprefix(f"{kind}.`").removesuffix("`") for c in shown if c.startswith(kind)]
        assert names and set(names) <= set(values), (kind, names)


@pytest.mark.slow
def test_the_trace_is_gzipped_and_stored_once(viewed: dict[str, Any]) -> None:
    outcome = viewed["outcome"]
    copies = sorted(outcome.out_dir.rglob("*.pt.trace.json*"))
    # The trace task's output, the bundle compare gathered and --out/trace/: three names, one file.
    assert len(copies) == 3, copies
    assert all(p.name.endswith(".pt.trace.json.gz") for p in copies)
    assert len({p.stat().st_ino for p in copies}) == 1
    assert (outcome.out_dir / "trace" / copies[0].name).is_file()
    assert json.loads(gzip.decompress(copies[0].read_bytes()))["traceEvents"]
    client: MlflowClient = viewed["client"]
    logged = [a.path for a in client.list_artifacts(viewed["parent"].info.run_id, "trace")]
    assert logged == [f"trace/{copies[0].name}"]


@pytest.mark.slow
def test_the_experiment_kind_is_set_once_and_a_chosen_one_kept(mlflow_server: str, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=mlflow_server)
    bare = f"bare-{uuid.uuid4().hex[:8]}"
    chosen = f"chosen-{uuid.uuid4().hex[:8]}"
    bare_id = client.create_experiment(bare)
    chosen_id = client.create_experiment(chosen, tags={TAG_EXPERIMENT_KIND: "genai_development"})
    for name in (bare, chosen):
        connect(make_config(tmp_path, tracking={"enabled": True, "uri": mlflow_server, "experiment": name}))
    assert client.get_experiment(bare_id).tags[TAG_EXPERIMENT_KIND] == EXPERIMENT_KIND
    assert client.get_experiment(chosen_id).tags[TAG_EXPERIMENT_KIND] == "genai_development"
