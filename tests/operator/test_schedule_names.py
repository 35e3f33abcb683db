"""BenchmarkSchedule names and run-template metadata through the real controller: a schedule named
longer than a label value may be still creates its runs, a bad template label is the schedule's
InvalidSpec condition, and a schedule lists its own runs only (by its label), not the namespace's.

kmock checks no names or labels, so these tests check what the controller sent against Kubernetes'
rules (controller/spec/kube_names.py) themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from operator_harness import TEST_CLIENT, Cluster, finish, schedule_manifest, verb_of

from benchgate.controller.decide import schedule as sched
from benchgate.controller.spec import kube_names as kn

pytestmark = pytest.mark.asyncio
# 120x: a cron time of every minute comes every 0.5 s of real time.
FAST = [{"speed": 120.0}]
LONG = "nightly-" + "x" * 60 + ".team-a-" + "y" * 40  # 116 characters: a name, not a label value


def runs_of(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    """The runs schedule `name` owns, by the owner reference (its label may hold a shortened name)."""
    uid = cluster.get(name, plural="benchmarkschedules")["metadata"]["uid"]
    runs = [cluster.get(n) for n in cluster.names()]
    return [r for r in runs if r and sched.owned_runs([r], uid)]


def run_listings(cluster: Cluster) -> list[dict[str, str]]:
    """The query of every list of BenchmarkRuns the controller's own client sent (kopf's watch of all
    runs, which keeps its own list, left out)."""
    found = []
    for request in list(cluster.kmock):
        if request.resource is None or request.resource.plural != "benchmarkruns":
            continue
        agent = request.headers.get("User-Agent") or ""
        if agent == TEST_CLIENT["User-Agent"] or agent.startswith("kopf/") or verb_of(request) != "list":
            continue
        found.append(dict(request.params))
    return found


@pytest.mark.parametrize("cluster", FAST, indirect=True)
async def test_a_schedule_with_a_long_name_creates_runs_it_then_finds_by_its_label(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    url, _ = repository
    assert kn.name_problem(LONG) is None and kn.label_value_problem(LONG) is not None
    await cluster.create(schedule_manifest(LONG, url), plural="benchmarkschedules")
    await cluster.create(schedule_manifest("other", url), plural="benchmarkschedules")
    (run,) = await cluster.wait(lambda: runs_of(cluster, LONG), what="a run of the long-named schedule")
    meta = run["metadata"]
    assert kn.name_problem(meta["name"]) is None
    assert kn.labels_problem(meta["labels"]) is None and meta["labels"]["team"] == "infra"
    assert meta["labels"][sched.SCHEDULE_LABEL] == kn.label_safe(LONG) != LONG
    assert meta["annotations"][sched.SCHEDULE_NAME_ANNOTATION] == LONG
    # Forbid: the schedule finds its active run through its label, and skips the next times.
    await cluster.wait(
        lambda: any(
            c.get("reason") == "ConcurrencyForbid"
            for c in cluster.status(LONG, plural="benchmarkschedules").get("conditions", [])
        ),
        what="a time skipped for the active run",
    )
    assert len(runs_of(cluster, LONG)) == 1
    await finish(cluster, run)
    await cluster.wait(lambda: len(runs_of(cluster, LONG)) == 2, what="the next run once the first ended")
    # Every listing asked for one schedule's runs, by its label: none listed the whole namespace.
    listings = run_listings(cluster)
    assert listings, "the schedules listed no runs"
    selectors = {query.get("labelSelector") for query in listings}
    assert selectors == {sched.runs_selector(LONG), sched.runs_selector("other")}, listings


@pytest.mark.parametrize("cluster", FAST, indirect=True)
async def test_a_bad_template_label_is_the_schedules_invalid_spec_not_a_refused_create(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    url, _ = repository
    manifest = schedule_manifest("badlabel", url)
    manifest["spec"]["runTemplate"]["metadata"]["labels"] = {"team": "infra team"}
    await cluster.create(manifest, plural="benchmarkschedules")
    conditions = await cluster.wait(
        lambda: cluster.status("badlabel", plural="benchmarkschedules").get("conditions"),
        what="a condition",
    )
    (valid,) = [c for c in conditions if c["type"] == "Valid"]
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.runTemplate.metadata.labels" in valid["message"] and "'infra team'" in valid["message"]
    await cluster.wait(lambda: cluster.events("InvalidSpec"), what="an InvalidSpec event")
    assert runs_of(cluster, "badlabel") == [] and cluster.events("CreateRefused") == []
