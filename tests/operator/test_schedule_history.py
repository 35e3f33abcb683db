"""A BenchmarkSchedule's history check (spec.historyCheck) through the real controller: once a scheduled
run ends, the check of `benchgate history --check` over the gate runs of a real `mlflow server` (logged
by benchgate's own tracking code), in the schedule's status and as a Warning Event; and an MLflow that
does not answer, which the check reports instead of crashing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import free_port
from operator_harness import Cluster, finish, git, owned, schedule_manifest

from benchgate.config import parse_config
from benchgate.controller.access import GROUP, VERSION
from benchgate.kit.files import write_json
from benchgate.results.comparison import Check, Comparison
from benchgate.store import spool
from benchgate.tracking import client as tracking
from benchgate.tracking.record import log_entry

pytestmark = pytest.mark.asyncio
PROFILE = "cpu-nightly-x8_torch2.9.0"
WORKLOAD = "nightly-gpt"


def gate_run(tracker: tracking.Tracker, root: Path, commit: str, step_s: float, started_unix: float) -> str:
    """Log one gate run of PROFILE at `commit` whose steps take `step_s` (2% noise) with benchgate's own
    spool and tracking code, from result files as the stages write them; returns its MLflow run id."""
    results = root / f"results-{uuid.uuid4().hex[:8]}"
    results.mkdir(parents=True)
    rng = np.random.default_rng(int(started_unix))
    times = [float(step_s * (1 + 0.02 * rng.standard_normal())) for _ in range(20)]
    write_json(
        results / "env.json", {"machine_profile": PROFILE, "git": {"commit": commit, "branch": "main"}}
    )
    metrics = {
        "schema_version": 1,
        "machine_profile": PROFILE,
        "workload": WORKLOAD,
        "world_size": 1,
        "precision": "bf16",
        "tokens_per_step_global": 4096,
        "samples": {"step_time_s": times, "tokens_per_s": [4096 / t for t in times], "loss": [3.0] * 20},
        "memory": {"peak_bytes": 30 * 2**30},
    }
    write_json(results / "metrics-ws1.json", metrics)
    comparison = Comparison(PROFILE, WORKLOAD, None, [Check("tokens/s (ws=1)", "tokens/s", 4096 / step_s)])
    write_json(results / "compare.json", comparison.to_dict())
    write_json(results / "config.json", {})
    entry = spool.write_entry(
        root / "spool", results, {"run_key": uuid.uuid4().hex, "started_unix": started_unix}
    )
    run_id, _ = log_entry(tracker, entry)
    return run_id


def history_check(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict(cluster.status(name, plural="benchmarkschedules").get("historyCheck") or {})


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [{"speed": 120.0, "mlflow": True}], indirect=True)
async def test_a_regression_in_the_history_is_in_the_status_and_an_event_once_a_run_ends(
    cluster: Cluster, repository: tuple[str, Path], mlflow_server: str, tmp_path: Path
) -> None:
    """Twelve nightly runs, every step 25% slower from the seventh on: once the twelfth (the schedule's
    own run) ends, the check names the seventh commit, as `benchgate history --check` would."""
    url, repo = repository
    experiment = f"nightly-{uuid.uuid4().hex[:8]}"
    tracker = tracking.connect(parse_config({"tracking": {"uri": mlflow_server, "experiment": experiment}}))
    commits = [f"{i:02x}" * 20 for i in range(11)] + [git(repo, "rev-parse", "HEAD")]
    started = datetime.now(UTC).timestamp() - 86_400 * len(commits)
    run_ids = [
        gate_run(tracker, tmp_path, commit, 0.125 if i >= 6 else 0.1, started + 86_400 * i)
        for i, commit in enumerate(commits)
    ]
    manifest = schedule_manifest("nightly", url, historyCheck={"recent": 10})
    manifest["spec"]["runTemplate"]["spec"]["mlflowExperiment"] = experiment
    await cluster.create(manifest, plural="benchmarkschedules")
    (run,) = await cluster.wait(lambda: owned(cluster, "nightly"), what="a scheduled run")
    name = run["metadata"]["name"]
    kfp_run_id = await cluster.wait(lambda: cluster.status(name).get("kfpRunId"), what="submitted")
    # The pipeline tags its gate run with the KFP run it ran under; here the newest logged run is it.
    tracker.client.set_tag(run_ids[-1], tracking.TAG_KFP_RUN_ID, kfp_run_id)
    assert history_check(cluster, "nightly") == {}  # nothing ended yet: nothing checked
    await finish(cluster, run)

    checked = await cluster.wait(lambda: history_check(cluster, "nightly"), what="a history check")
    assert checked["result"] == "regression", checked
    assert checked["runName"] == name and checked["runs"] == 12
    assert (checked["profile"], checked["workload"]) == (PROFILE, WORKLOAD)
    (regression,) = checked["regressions"]
    assert regression["figure"] == "tokens/s ws=1"
    assert regression["commit"] == commits[6] and regression["runId"] == run_ids[6]
    assert regression["changePct"] == pytest.approx(-20.0, abs=2.0)  # 1/1.25 - 1
    (event,) = await cluster.wait(
        lambda: cluster.events("HistoryRegression"), what="a HistoryRegression event"
    )
    assert event["type"] == "Warning"
    assert "benchgate history ack RUN_ID --reason TEXT" in event["message"] and run_ids[6] in event["message"]
    assert event["involvedObject"]["kind"] == "BenchmarkSchedule"
    # Checked once per ended run: later looks leave it as it is.
    await cluster.wait(lambda: len(owned(cluster, "nightly")) == 2, what="the next night's run")
    assert history_check(cluster, "nightly")["checkedAt"] == checked["checkedAt"]
    assert len(cluster.events("HistoryRegression")) == 1


DOWN = f"http://127.0.0.1:{free_port()}"  # nothing listens there


@pytest.mark.parametrize("cluster", [{"mlflow_uri": DOWN, "mlflow_wait_s": 1.5}], indirect=True)
async def test_mlflow_down_is_the_checks_error_not_a_crash(cluster: Cluster) -> None:
    """A run of the schedule has ended, and MLflow does not answer: status.historyCheck says so (the
    harness then checks that the controller stops cleanly, as a crashed handler's would not)."""
    uid = str(uuid.uuid4())
    schedule = schedule_manifest("paused", "https://github.com/example/trainer.git", suspend=True)
    schedule["metadata"]["uid"] = uid
    schedule["spec"]["historyCheck"] = {}
    ended = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BenchmarkRun",
        "metadata": {
            "name": "paused-1",
            "namespace": "team-a",
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "BenchmarkSchedule",
                    "name": "paused",
                    "uid": uid,
                }
            ],
        },
        "spec": {"commit": "a" * 40, "repository": "https://github.com/example/trainer.git", "worldSize": 2},
        "status": {"phase": "Succeeded", "kfpRunId": "kfp-run-1", "completionTime": "2026-01-01T02:40:00Z"},
    }
    await cluster.create(ended)
    await cluster.create(schedule, plural="benchmarkschedules")
    checked = await cluster.wait(lambda: history_check(cluster, "paused"), what="a history check")
    assert checked["result"] == "error" and checked["runName"] == "paused-1"
    assert "reading the history from MLflow" in checked["message"] and DOWN in checked["message"]
    assert checked["regressions"] == [] and cluster.events("HistoryRegression") == []
