"""A cluster run without a baseline volume: the run MLflow did not take is kept in the publishing task's
results artifact under spool/, and `benchgate sync --from` sends it from there, once, touching nothing.

The task functions run directly (as the components call them), with the pipeline's cluster defaults:
stores under /mnt/benchgate, which without `baseline_pvc` become pod-local directories.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness import free_port
from mlflow import MlflowClient
from test_spool_and_baselines import benchgate, runs_with_key

from benchgate.kfp import params
from benchgate.kfp.params import CLUSTER_BASELINE_DIR
from benchgate.kfp.tasks import bench_task, compare_task, env_task, gate_task
from benchgate.kit.files import read_json
from benchgate.store import spool

pytestmark = pytest.mark.slow


class Figures(dict[str, float]):
    """What a task logs to its Output[Metrics], kept in a dict."""

    def log_metric(self, metric: str, value: float) -> None:
        self[metric] = value


def parameters(experiment: str, mlflow_tracking_uri: str) -> dict[str, Any]:
    """The pipeline's parameters as the env component passes them: a run started with config={} but
    for a short wait on MLflow, so the stores are the cluster defaults under /mnt/benchgate."""
    return {
        "config": {
            "bench": {"drift_reference": False},
            "eval": {"enabled": False},
            "trace": {"enabled": False},
            "tracking": {"experiment": experiment, "max_wait_s": 3},
        },
        "workload": "bg_test_workloads:sleepy",
        "workload_args": {},
        "world_size_n": 1,
        "steps": 8,
        "warmup": 1,
        "tolerances": {},
        "update_baseline": "never",
        "baseline_dir": CLUSTER_BASELINE_DIR,
        "mlflow_tracking_uri": mlflow_tracking_uri,
    }


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One bench task's results (ws=1), shared: the compare task only reads them."""
    tmp = tmp_path_factory.mktemp("measured")
    env_task(parameters("unused", ""), "", "", "", "", "run-measured", "", str(tmp / "setup"))
    bench_task(str(tmp / "setup"), 1, False, str(tmp / "bench-1"), Figures())
    return tmp / "bench-1"


@pytest.fixture
def pod_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pod's scratch directory, inside this test's directory."""
    directory = tmp_path / "pod-local"
    monkeypatch.setattr(params, "POD_LOCAL_DIR", directory)
    return directory


def compare_without_a_volume(tmp_path: Path, measured: Path, experiment: str, uri: str) -> Path:
    """env and compare as a cluster run without baseline_pvc; returns compare's results artifact."""
    setup = tmp_path / "capture-env" / "setup"
    env_task(parameters(experiment, uri), "", "", "", "", f"run-{uuid.uuid4().hex}", "", str(setup))
    empty = [tmp_path / name for name in ("bench-2", "evaluate", "trace")]  # N=1, eval and trace off
    for directory in empty:
        directory.mkdir()
    results = tmp_path / "compare" / "results"
    _, worlds, _ = compare_task(
        str(setup),
        [str(measured), *(str(d) for d in empty)],
        "",
        str(results),
        str(tmp_path / "compare" / "verdict"),
        Figures(),
    )
    assert worlds == ""  # the first run of the profile: no baseline, no A/B; compare publishes
    return results


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def sync_from(directory: Path, experiment: str, uri: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    settings = cwd / "sync.toml"
    # The user's own spool is elsewhere and empty: --from alone decides what is sent.
    settings.write_text(f'[tracking]\nexperiment = "{experiment}"\nspool_dir = "{cwd / "own-spool"}"\n')
    return benchgate(
        "sync", "--config", str(settings), "--tracking-uri", uri, "--from", str(directory), cwd=cwd
    )


def test_a_run_mlflow_could_not_take_is_kept_in_the_results_artifact_and_synced_from_it_once(
    mlflow_server: str, measured: Path, pod_local: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = f"artifact-{uuid.uuid4().hex[:8]}"
    down = f"http://127.0.0.1:{free_port()}"
    results = compare_without_a_volume(tmp_path, measured, experiment, down)

    published = read_json(results / "published.json")
    assert published["mlflow_run_id"] is None
    run_key = read_json(results / "run.json")["run_key"]
    # The pod-local spool holds the entry (it goes with the pod); the artifact keeps a copy.
    entry = pod_local / "spool" / run_key
    assert Path(published["spooled"]) == entry.resolve()
    assert published["kept"] == f"spool/{run_key}"
    kept = results / "spool" / run_key
    assert {p.name for p in spool.found(results)} == {run_key}
    assert (
        snapshot(kept).keys()
        == snapshot(entry).keys()
        >= {
            "record.json",
            "env.json",
            "config.json",
            "metrics-ws1.json",
            "compare.json",
            "compare.md",
            "report.html",
        }
    )
    assert read_json(kept / "record.json")["run_key"] == run_key
    # The gate says where the copy is.
    summary = tmp_path / "gate" / "summary"
    with contextlib.suppress(SystemExit):  # a FAIL or UNKNOWN verdict ends the gate task non-zero
        gate_task(str(results), str(summary))
    assert f"copy is kept in the results artifact under spool/{run_key}" in capsys.readouterr().out
    assert read_json(summary)["kept"] == f"spool/{run_key}"

    # The artifact as downloaded from the pipeline root's object store: sent once, left in place.
    downloaded = tmp_path / "downloaded"
    shutil.copytree(results, downloaded)
    before = snapshot(downloaded)
    first = sync_from(downloaded, experiment, mlflow_server, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"{run_key}: logged as run" in first.stdout
    client = MlflowClient(tracking_uri=mlflow_server)
    logged = runs_with_key(client, experiment, run_key)
    assert len(logged) == 1 and logged[0].info.status == "FINISHED"
    assert logged[0].data.tags["benchgate.verdict"] == read_json(results / "compare.json")["verdict"]

    again = sync_from(downloaded, experiment, mlflow_server, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{run_key}: already in MLflow as run {logged[0].info.run_id}" in again.stdout
    assert len(runs_with_key(client, experiment, run_key)) == 1
    assert snapshot(downloaded) == before
    # The whole tree (the pod-local spool and the artifact both hold the run): still one run, and
    # nothing removed from either.
    everything = sync_from(tmp_path, experiment, mlflow_server, tmp_path)
    assert everything.returncode == 0 and everything.stdout.count("already in MLflow") >= 2
    assert len(runs_with_key(client, experiment, run_key)) == 1
    assert entry.is_dir() and kept.is_dir()


def test_without_a_tracking_uri_or_a_volume_the_run_is_kept_not_logged_in_the_pod(
    mlflow_server: str, measured: Path, pod_local: Path, tmp_path: Path
) -> None:
    # The embedded store would be pod-local too: a run logged there would be lost with the pod.
    experiment = f"no-uri-{uuid.uuid4().hex[:8]}"
    results = compare_without_a_volume(tmp_path, measured, experiment, "")
    published = read_json(results / "published.json")
    run_key = read_json(results / "run.json")["run_key"]
    assert published["mlflow_run_id"] is None and published["kept"] == f"spool/{run_key}"
    synced = sync_from(results, experiment, mlflow_server, tmp_path)
    assert synced.returncode == 0 and f"{run_key}: logged as run" in synced.stdout, (
        synced.stdout + synced.stderr
    )
    assert len(runs_with_key(MlflowClient(tracking_uri=mlflow_server), experiment, run_key)) == 1


def test_sync_from_a_missing_directory_is_bad_input(tmp_path: Path) -> None:
    result = benchgate("sync", "--from", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert result.returncode == 2 and "--from: got" in result.stderr, result.stdout + result.stderr
