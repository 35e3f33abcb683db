"""benchgate's view of the MLflow runs table: the columns it shows, kept across world sizes, written only
when it changes, and never touching a view someone else shared; the links that open it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from benchgate.tracking.view import TAG_VIEW, share_view, ui_url, view_world_sizes


@dataclass
class Experiment:
    tags: dict[str, str]


@dataclass
class FakeClient:
    """The two MlflowClient calls share_view makes, on one experiment's tags; counts the writes."""

    tags: dict[str, str] = field(default_factory=dict)
    writes: int = 0
    fail: bool = False

    def get_experiment(self, experiment_id: str) -> Experiment:
        if self.fail:
            raise MlflowException("server error")
        return Experiment(dict(self.tags))

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        self.tags[key] = value
        self.writes += 1


def share(client: FakeClient, world_sizes: Iterable[int]) -> None:
    share_view(cast(MlflowClient, client), "1", world_sizes)


def view(client: FakeClient) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(client.tags[TAG_VIEW])
    return loaded


def test_the_view_shows_verdict_profile_commit_and_key_figures() -> None:
    client = FakeClient()
    share(client, [2, 1])
    shown = view(client)
    assert shown["selectedColumns"] == [
        "tags.`benchgate.verdict`",
        "tags.`benchgate.machine_profile`",
        "tags.`benchgate.workload`",
        "attributes.`Version`",  # the UI's commit column
        "metrics.`ws1/tokens_per_s_mean`",
        "metrics.`ws2/tokens_per_s_mean`",
        "metrics.`scaling_efficiency_pct`",
        "metrics.`eval/perplexity`",
    ]
    assert shown["columnOrder"][:3] == ["attributes.`Run Name`", "runDateAndNestInfo", "duration"]
    assert shown["columnOrder"][3:] == shown["selectedColumns"]
    assert set(shown["columnWidths"]) == set(shown["columnOrder"])
    assert shown["columnWidths"]["attributes.`Run Name`"] <= 240


def test_a_run_with_another_world_size_adds_its_column_in_order() -> None:
    client = FakeClient()
    share(client, [1, 4])
    share(client, {2: {}, 8: {}})
    throughput = [c for c in view(client)["selectedColumns"] if "tokens_per_s" in c]
    assert throughput == [f"metrics.`ws{n}/tokens_per_s_mean`" for n in (1, 2, 4, 8)]
    assert view_world_sizes(client.tags[TAG_VIEW]) == {1, 2, 4, 8}


def test_a_view_stored_with_the_p50_columns_keeps_its_world_sizes_and_shows_the_runs_tokens_per_s() -> None:
    # As runs_view wrote it before the run's one tokens/s (tokens_per_s_mean) was logged.
    old = {"selectedColumns": [f"metrics.`ws{n}/tokens_per_s_p50`" for n in (1, 4)]}
    client = FakeClient({TAG_VIEW: json.dumps(old)})
    share(client, [2])
    throughput = [c for c in view(client)["selectedColumns"] if "tokens_per_s" in c]
    assert throughput == [f"metrics.`ws{n}/tokens_per_s_mean`" for n in (1, 2, 4)]


def test_the_view_is_written_only_when_it_changes() -> None:
    client = FakeClient()
    share(client, [1, 2])
    share(client, [1, 2])
    share(client, [2])
    assert client.writes == 1
    share(client, [4])
    assert client.writes == 2


def test_other_views_are_untouched_and_a_damaged_own_one_is_rewritten() -> None:
    mine = json.dumps({"selectedColumns": ["metrics.`loss`"]})
    client = FakeClient({"mlflow.sharedViewState.mine": mine, TAG_VIEW: "{not json"})
    share(client, [1])
    assert client.tags["mlflow.sharedViewState.mine"] == mine
    assert view_world_sizes(client.tags[TAG_VIEW]) == {1}
    for stored in (None, "", "[]", '{"selectedColumns": 3}', "{}"):
        assert view_world_sizes(stored) == set()


def test_a_server_error_leaves_the_run_to_be_logged() -> None:
    client = FakeClient(fail=True)
    share(client, [1])
    assert client.writes == 0


def test_the_runs_table_link_opens_benchgates_view_and_a_runs_link_its_page() -> None:
    table = (
        "http://mlflow:5000/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=benchgate"
    )
    assert ui_url("http://mlflow:5000/", "7") == table
    assert ui_url("http://mlflow:5000", "7", "abc") == (
        "http://mlflow:5000/#/experiments/7/runs/abc?workflowType=machine_learning"
    )
    assert TAG_VIEW == "mlflow.sharedViewState.benchgate"
