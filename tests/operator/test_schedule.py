"""BenchmarkSchedule through the real controller: cron times on a fast clock, the branch head resolved
with `git ls-remote` from a real repository, concurrency policies and history limits."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from operator_harness import POLL_S, TEST_CLIENT, Cluster, finish, git, owned, schedule_manifest, verb_of

pytestmark = pytest.mark.asyncio
# 120x: a cron time of every minute comes every 0.5 s of real time.
FAST = [{"speed": 120.0}]


@pytest.mark.parametrize("cluster", FAST, indirect=True)
async def test_forbid_creates_one_run_for_the_branch_head_and_waits_for_it(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    url, repo = repository
    head = git(repo, "rev-parse", "HEAD")
    await cluster.create(schedule_manifest("nightly", url), plural="benchmarkschedules")
    (first,) = await cluster.wait(lambda: owned(cluster, "nightly"), what="a scheduled run")
    assert first["spec"]["commit"] == head and first["spec"]["repository"] == url
    assert first["metadata"]["labels"]["team"] == "infra"
    assert first["metadata"]["ownerReferences"][0]["kind"] == "BenchmarkSchedule"
    # Every minute passes while the first run is still RUNNING: Forbid skips them.
    await cluster.wait(
        lambda: any(
            c.get("reason") == "ConcurrencyForbid"
            for c in cluster.status("nightly", plural="benchmarkschedules").get("conditions", [])
        ),
        what="a skipped time",
    )
    assert len(owned(cluster, "nightly")) == 1
    # A new commit lands on main; once the first run finishes, the next time runs the new head.
    (repo / "train.py").write_text("print('v2')\n")
    git(repo, "commit", "--quiet", "-am", "v2")
    new_head = git(repo, "rev-parse", "HEAD")
    await finish(cluster, first)
    await cluster.wait(lambda: len(owned(cluster, "nightly")) == 2, what="a second run")
    commits = {r["spec"]["commit"] for r in owned(cluster, "nightly")}
    assert commits == {head, new_head}
    status = await cluster.wait(
        lambda: (
            (s := cluster.status("nightly", plural="benchmarkschedules")).get("lastCommit") == new_head and s
        ),
        what="the schedule's status to name the new head",
    )
    assert status["lastScheduleTime"].endswith("Z") and status["lastRunName"] in cluster.names()


@pytest.mark.parametrize("cluster", FAST, indirect=True)
async def test_history_limits_prune_the_oldest_finished_runs(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    url, _ = repository
    manifest = schedule_manifest("keep-one", url, successfulRunsHistoryLimit=1, concurrencyPolicy="Allow")
    await cluster.create(manifest, plural="benchmarkschedules")
    finished: list[str] = []
    while len(finished) < 3:
        runs = await cluster.wait(
            lambda: [r for r in owned(cluster, "keep-one") if r["metadata"]["name"] not in finished],
            what="a new run",
        )
        await finish(cluster, runs[0])
        finished.append(runs[0]["metadata"]["name"])
    # Once three have succeeded, the schedule's next times delete all but the newest succeeded one.
    await cluster.wait(lambda: cluster.get(finished[0]) is None and cluster.get(finished[1]) is None)
    succeeded = [r for r in owned(cluster, "keep-one") if r.get("status", {}).get("phase") == "Succeeded"]
    assert len(succeeded) <= 1


@pytest.mark.parametrize("cluster", FAST, indirect=True)
async def test_replace_deletes_the_active_run_before_creating_the_next(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    url, _ = repository
    await cluster.create(
        schedule_manifest("latest", url, concurrencyPolicy="Replace"), plural="benchmarkschedules"
    )
    # On a loaded host the next tick (0.5 s apart) can replace a run before it was submitted; that
    # run has no KFP run to terminate, so the check follows the first run seen submitted.
    submitted: dict[str, str] = {}

    def a_submitted_run_replaced() -> str | None:
        for run in owned(cluster, "latest"):
            if run_id := run.get("status", {}).get("kfpRunId"):
                submitted[run["metadata"]["name"]] = run_id
        return next((rid for name, rid in submitted.items() if cluster.get(name) is None), None)

    run_id = await cluster.wait(a_submitted_run_replaced, what="a submitted run replaced")
    assert run_id in cluster.kfp.terminated  # its KFP run was terminated with it
    await cluster.wait(lambda: owned(cluster, "latest"), what="a replacement run")


@pytest.mark.parametrize("cluster", FAST, indirect=True)
async def test_suspended_schedule_creates_nothing(cluster: Cluster, repository: tuple[str, Path]) -> None:
    url, _ = repository
    await cluster.create(schedule_manifest("paused", url, suspend=True), plural="benchmarkschedules")
    await cluster.wait(
        lambda: cluster.status("paused", plural="benchmarkschedules").get("lastScheduleTime"), what="a tick"
    )
    ticks = cluster.status("paused", plural="benchmarkschedules")["lastScheduleTime"]
    await cluster.wait(
        lambda: cluster.status("paused", plural="benchmarkschedules")["lastScheduleTime"] != ticks,
        what="a later tick",
    )
    assert owned(cluster, "paused") == []
    # Its timers ran, and it carries no finalizer: a schedule holds no KFP run, and kopf's timers
    # would otherwise keep one on it for life (undeletable once the controller is gone).
    assert not cluster.get("paused", plural="benchmarkschedules")["metadata"].get("finalizers")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"schedule": "0 2 * * * *"}, "spec.schedule"),
        ({"schedule": "every night"}, "spec.schedule"),
        ({"timeZone": "Mars/Olympus"}, "spec.timeZone"),
    ],
)
@pytest.mark.parametrize("cluster", FAST, indirect=True)
async def test_bad_cron_or_time_zone_is_a_condition_and_an_event(
    cluster: Cluster, repository: tuple[str, Path], spec: dict[str, Any], field: str
) -> None:
    url, _ = repository
    await cluster.create(schedule_manifest("broken", url, **spec), plural="benchmarkschedules")
    conditions = await cluster.wait(
        lambda: cluster.status("broken", plural="benchmarkschedules").get("conditions"), what="a condition"
    )
    (valid,) = [c for c in conditions if c["type"] == "Valid"]
    assert valid["status"] == "False" and field in valid["message"]
    await cluster.wait(lambda: cluster.events("InvalidSpec"), what="an InvalidSpec event")
    assert owned(cluster, "broken") == [] and cluster.kfp.requests == []


@pytest.mark.parametrize("cluster", [{**FAST[0], "enforce_owner_references": True}], indirect=True)
async def test_a_cluster_that_enforces_owner_references_accepts_the_scheduled_runs(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    # OpenShift refuses an owner reference with blockOwnerDeletion from a client that may not update the
    # owner's finalizers; the chart grants that (access.REQUIRED_ACCESS), so the runs are created.
    url, _ = repository
    await cluster.create(schedule_manifest("owned", url), plural="benchmarkschedules")
    (run,) = await cluster.wait(lambda: owned(cluster, "owned"), what="a scheduled run")
    assert run["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True


REFUSAL = "exceeded quota: team-a-quota, requested: count/benchmarkruns.benchgate.dev=1, limited: 5"


@pytest.mark.parametrize("cluster", [{**FAST[0], "refuse_creates": REFUSAL}], indirect=True)
async def test_a_refused_create_is_a_condition_and_one_event_not_a_traceback(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    url, _ = repository
    await cluster.create(schedule_manifest("quota", url), plural="benchmarkschedules")

    def refused_times() -> list[str]:
        status = cluster.status("quota", plural="benchmarkschedules")
        scheduled = [c for c in status.get("conditions", []) if c["type"] == "Scheduled"]
        if scheduled and scheduled[0]["reason"] == "CreateRefused":
            return [status["lastScheduleTime"]]
        return []

    (first,) = await cluster.wait(refused_times, what="a refused time")
    # Three cron times later: the same refusal is said once, and kopf logged no error for it.
    await cluster.wait(lambda: refused_times() and refused_times()[0] > first, what="a later refused time")
    later = refused_times()[0]
    await cluster.wait(lambda: refused_times() and refused_times()[0] > later, what="a third refused time")
    (scheduled,) = [
        c
        for c in cluster.status("quota", plural="benchmarkschedules")["conditions"]
        if c["type"] == "Scheduled"
    ]
    assert scheduled["status"] == "False" and "HTTP 403" in scheduled["message"]
    assert REFUSAL in scheduled["message"]
    assert len(cluster.events("CreateRefused")) == 1
    assert [e for e in cluster.events() if e.get("type") == "Error"] == []
    assert owned(cluster, "quota") == []


@pytest.mark.parametrize("cluster", FAST, indirect=True)
async def test_a_branch_the_repository_lacks_is_a_condition(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    url, _ = repository
    manifest = schedule_manifest("nobranch", url)
    manifest["spec"]["runTemplate"]["spec"]["branch"] = "release/9.9"
    await cluster.create(manifest, plural="benchmarkschedules")
    await cluster.wait(lambda: cluster.events("BranchUnresolved"), what="a BranchUnresolved event")
    assert owned(cluster, "nobranch") == []


def status_patches(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    """The status patches the controller sent for schedule `name` (kopf's own progress left out)."""
    found = []
    for request in list(cluster.kmock):
        if request.resource is None or request.resource.plural != "benchmarkschedules":
            continue
        if request.name != name or verb_of(request) != "patch":
            continue
        if request.headers.get("User-Agent") == TEST_CLIENT["User-Agent"]:
            continue
        status = (request.data or {}).get("status") if isinstance(request.data, dict) else None
        if {k: v for k, v in (status or {}).items() if k != "kopf"}:
            found.append(status)
    return found


async def test_a_new_schedule_is_valid_with_its_next_time_before_any_run(
    cluster: Cluster, repository: tuple[str, Path]
) -> None:
    """Its status says it is valid, which generation that was of, and when it runs next, from the first
    look on, not only once a cron time has come; and a look with nothing new to say writes nothing."""
    url, _ = repository
    # Once a day at an hour at least eleven hours away: nothing is due during the test.
    hour = (datetime.now(UTC).hour + 12) % 24
    await cluster.create(
        schedule_manifest("idle", url, schedule=f"0 {hour} * * *"), plural="benchmarkschedules"
    )
    status = await cluster.wait(
        lambda: (s := cluster.status("idle", plural="benchmarkschedules")).get("nextScheduleTime") and s,
        timeout_s=30 * POLL_S,
        what="the schedule's first status",
    )
    (valid,) = [c for c in status["conditions"] if c["type"] == "Valid"]
    assert valid["status"] == "True" and valid["observedGeneration"] == 1
    assert status["observedGeneration"] == 1
    next_time = datetime.fromisoformat(status["nextScheduleTime"].replace("Z", "+00:00"))
    assert next_time.hour == hour and next_time.minute == 0
    assert timedelta(hours=11) < next_time - datetime.now(UTC) <= timedelta(hours=13)
    await asyncio.sleep(10 * POLL_S)  # ten looks of the schedule timer
    assert len(status_patches(cluster, "idle")) == 1, status_patches(cluster, "idle")
    assert owned(cluster, "idle") == [] and "lastScheduleTime" not in cluster.status(
        "idle", plural="benchmarkschedules"
    )
