"""`benchgate sync` against damage and a dying server: damaged entries are named and the rest sent; a
server killed halfway leaves nothing a later sync would duplicate.

Real parts: result bundles of a real gate run, `benchgate sync` as a subprocess, and `mlflow server`
processes on 127.0.0.1 (one killed with SIGKILL mid-sync and restarted on the same backend store).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from harness import MLFLOW, free_port, make_config
from mlflow import MlflowClient
from mlflow.entities import ViewType
from test_spool_and_baselines import benchgate, runs_with_key

from benchgate.errors import BaselineError
from benchgate.kfp.local_run import run_gate
from benchgate.results.bundle import load_bundle
from benchgate.store import spool
from benchgate.store.baseline import save_baseline
from benchgate.tracking import client as tracking

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished gate run's result directory (tracking off), as `benchgate run` leaves it."""
    tmp = tmp_path_factory.mktemp("results")
    return run_gate(make_config(tmp, out=str(tmp / "out"))).out_dir


def spooled(results: Path, spool_dir: Path) -> Path:
    """A spool entry of the run under a fresh run key, as publishing writes it."""
    return spool.write_entry(spool_dir, results, {"run_key": uuid.uuid4().hex, "started_unix": time.time()})


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def said(result: subprocess.CompletedProcess[str]) -> str:
    """What the command said on stderr, with the terminal's line wrapping undone."""
    return " ".join(result.stderr.split())


def settings_file(tmp_path: Path, experiment: str, spool_dir: Path) -> Path:
    path = tmp_path / f"sync-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(f'[tracking]\nexperiment = "{experiment}"\nspool_dir = "{spool_dir}"\nmax_wait_s = 10\n')
    return path


# ---------------------------------------------------------------- damaged entries


def test_damaged_entries_are_named_and_left_while_the_others_are_sent_exit_2(
    mlflow_server: str, results: Path, tmp_path: Path
) -> None:
    experiment = f"damaged-{uuid.uuid4().hex[:8]}"
    spool_dir = tmp_path / "spool"
    good = [spooled(results, spool_dir) for _ in range(2)]
    truncated, not_json, missing = (spooled(results, spool_dir) for _ in range(3))
    record = (truncated / "record.json").read_text()
    (truncated / "record.json").write_text(record[: len(record) // 2])  # cut as a crash or full disk would
    (not_json / "compare.json").write_text("<html>502 Bad Gateway</html>")
    (missing / "env.json").unlink()
    stray = spool_dir / "copied-by-hand"  # a run's files without its record.json
    shutil.copytree(results, stray, ignore=shutil.ignore_patterns("pipeline", "logs", ".*", "run.json"))
    damaged = {entry: snapshot(entry) for entry in (truncated, not_json, missing, stray)}
    settings = settings_file(tmp_path, experiment, spool_dir)

    synced = benchgate("sync", "--config", str(settings), "--tracking-uri", mlflow_server, cwd=tmp_path)
    assert synced.returncode == 2, synced.stdout + synced.stderr
    for entry in good:
        assert f"{entry.name}: logged as run" in synced.stdout
        assert not entry.exists()  # sent: removed from the spool
    text = said(synced)
    assert f"damaged spool entry {truncated}: {truncated / 'record.json'}: not valid JSON" in text
    assert f"damaged spool entry {not_json}: {not_json / 'compare.json'}: not valid JSON" in text
    assert f"damaged spool entry {missing}: {missing / 'env.json'}: file not found" in text
    assert f"damaged spool entry {stray}: not a spool entry (no record.json)" in text
    assert "4 damaged spool entries not sent, left in place to be repaired or removed (2 sent)" in text
    assert "Traceback" not in synced.stderr + synced.stdout
    for entry, before in damaged.items():
        assert snapshot(entry) == before, entry  # neither deleted nor moved nor touched
    client = MlflowClient(tracking_uri=mlflow_server)
    for entry in good:
        (run,) = runs_with_key(client, experiment, entry.name)
        assert run.info.status == "FINISHED"
    for entry in (not_json, missing):
        assert runs_with_key(client, experiment, entry.name) == []

    # Again: the damaged ones are still named (exit 2), and nothing is sent twice.
    again = benchgate("sync", "--config", str(settings), "--tracking-uri", mlflow_server, cwd=tmp_path)
    assert again.returncode == 2 and "(0 sent)" in said(again), again.stdout + again.stderr
    assert "logged as run" not in again.stdout
    # Repaired by hand, it goes: exit 0.
    (not_json / "compare.json").write_bytes((results / "compare.json").read_bytes())
    for entry in (truncated, missing, stray):
        shutil.rmtree(entry)
    repaired = benchgate("sync", "--config", str(settings), "--tracking-uri", mlflow_server, cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert f"{not_json.name}: logged as run" in repaired.stdout
    assert spool.pending(spool_dir) == [] and spool.strays(spool_dir) == []


def test_a_damaged_entry_found_with_from_is_named_and_left_in_place(
    mlflow_server: str, results: Path, tmp_path: Path
) -> None:
    experiment = f"damaged-from-{uuid.uuid4().hex[:8]}"
    artifact = tmp_path / "downloaded" / "spool"  # a results artifact's spool/, as downloaded
    sound, damaged = spooled(results, artifact), spooled(results, artifact)
    (damaged / "metrics-ws1.json").write_text('{"schema_version": 1, "samples": {"step_time_s": [0.1,')
    before = snapshot(artifact)
    settings = settings_file(tmp_path, experiment, tmp_path / "own-spool")
    synced = benchgate(
        "sync", "--config", str(settings), "--tracking-uri", mlflow_server, "--from", str(artifact.parent),
        cwd=tmp_path,
    )  # fmt: skip
    assert synced.returncode == 2, synced.stdout + synced.stderr
    assert f"{sound}: logged as run" in synced.stdout
    assert f"damaged spool entry {damaged}: {damaged / 'metrics-ws1.json'}: not valid JSON" in said(synced)
    assert snapshot(artifact) == before  # --from directories are read only


def test_a_truncated_history_file_is_named_exit_2_never_an_empty_history(
    results: Path, tmp_path: Path
) -> None:
    """The directory store's history.json (the run-to-run noise the screen judges by)."""
    bundle = load_bundle(results)
    location = save_baseline(bundle, tmp_path / "store", "first")
    save_baseline(bundle, tmp_path / "store", "second")  # two runs of history
    history = location.resolve() / "history.json"
    history.write_text(history.read_text()[:40])  # cut mid-row, as a crash or a full disk would
    run_dir = tmp_path / "run"
    shutil.copytree(results, run_dir, ignore=shutil.ignore_patterns("pipeline", "logs", ".*"))
    compared = benchgate("compare", str(run_dir), "--baseline-dir", str(tmp_path / "store"), cwd=tmp_path)
    assert compared.returncode == 2, compared.stdout + compared.stderr
    assert f"{history}: " in said(compared) and "not valid JSON" in said(compared)
    assert "Traceback" not in compared.stderr + compared.stdout
    # A promotion on top of it refuses too, rather than starting the history afresh.
    with pytest.raises(BaselineError) as raised:
        save_baseline(bundle, tmp_path / "store", "third")
    assert raised.value.exit_code == 2 and str(history) in str(raised.value)


# ---------------------------------------------------------------- the server killed mid-sync


def start_server(root: Path, port: int) -> subprocess.Popen[bytes]:
    """`mlflow server` on 127.0.0.1:port over root's backend store and artifacts, in its own process
    group (it runs its workers as children: the whole group is what a crash takes down)."""
    log = open(root / f"server-{time.monotonic_ns()}.log", "w")  # noqa: SIM115 - the server's, closed with it
    process = subprocess.Popen(
        [
            str(MLFLOW), "server",
            "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination", str(root / "artifacts"),
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        ],
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + 120
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except requests.RequestException:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            kill(process)
            raise RuntimeError(f"mlflow server did not start; logs in {root}")
        time.sleep(0.3)


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the server and its workers: no shutdown, no flush, as a crash or an OOM kill."""
    if process.poll() is None:  # the group is this test's own: started with start_new_session
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def parents_in_db(db: Path) -> dict[str, list[tuple[str, str]]]:
    """Run key -> [(status, lifecycle stage)] of the parents, read from the backend store itself."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as connection:
        rows = connection.execute(
            "SELECT t.value, r.status, r.lifecycle_stage FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE t.key = ?",
            (tracking.TAG_RUN_KEY,),
        ).fetchall()
    found: dict[str, list[tuple[str, str]]] = {}
    for key, status, stage in rows:
        found.setdefault(key, []).append((status, stage))
    return found


def test_a_server_killed_mid_sync_leaves_nothing_a_later_sync_duplicates(
    results: Path, tmp_path: Path
) -> None:
    root = tmp_path / "server"
    root.mkdir()
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    experiment = f"killed-{uuid.uuid4().hex[:8]}"
    spool_dir = tmp_path / "spool"
    keys = [spooled(results, spool_dir).name for _ in range(4)]
    settings = settings_file(tmp_path, experiment, spool_dir)
    command = [sys.executable, "-m", "benchgate", "sync", "--config", str(settings), "--tracking-uri", uri]

    server = start_server(root, port)
    try:
        first = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        # The first run's first artifact on the server's disk: its parent exists, RUNNING, and the rest
        # of its upload (more artifacts, the children, FINISHED) is still to come. Kill the server now.
        deadline = time.monotonic() + 120
        while not any(p.is_file() for p in (root / "artifacts").rglob("*")):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "sync sent no artifact within 2 minutes"
            time.sleep(0.005)
        kill(server)
        out, err = first.communicate(timeout=120)
    finally:
        kill(server)
    assert first.returncode == 3, out + err
    assert f"MLflow at {uri}" in " ".join(err.split()) and "Traceback" not in out + err
    after_kill = parents_in_db(root / "mlflow.db")
    half_created = [key for key, runs in after_kill.items() if ("RUNNING", "active") in runs]
    assert half_created, f"the kill left no half-created run to test with: {after_kill}"
    # The spool lost exactly the runs that are complete in MLflow, and kept the others.
    finished = {key for key, runs in after_kill.items() if ("FINISHED", "active") in runs}
    assert {p.name for p in spool.pending(spool_dir)} == set(keys) - finished

    server = start_server(root, port)  # the same backend store and artifacts, as a restarted service
    try:
        second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stdout + second.stderr
        for key in set(keys) - finished:
            assert f"{key}: logged as run" in second.stdout
        assert spool.pending(spool_dir) == []
        client = MlflowClient(tracking_uri=uri)
        experiment_id = client.get_experiment_by_name(experiment).experiment_id  # type: ignore[union-attr]
        expected_artifacts = {p.name for p in results.iterdir() if p.is_file() and not p.name.startswith(".")}
        for key in keys:
            check_complete(client, experiment_id, key, expected_artifacts)
        # The half-created parents were replaced, not kept beside the complete run: deleted (MLflow's
        # trash, purged by `mlflow gc`), with any children they had.
        final = parents_in_db(root / "mlflow.db")
        for key in half_created:
            assert sorted(final[key]) == [("FINISHED", "active"), ("RUNNING", "deleted")], final[key]
    finally:
        kill(server)


def check_complete(client: MlflowClient, experiment_id: str, key: str, artifacts: set[str]) -> None:
    """Exactly one active parent with this run key, FINISHED, with its figures, artifacts and child."""
    (parent,) = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{tracking.TAG_RUN_KEY}` = '{key}'",
        run_view_type=ViewType.ACTIVE_ONLY,
    )
    assert parent.info.status == "FINISHED", key
    assert {"ws1/tokens_per_s_p50", "ws1/step_time_ms_p50", "gate/exit_code"} <= set(parent.data.metrics)
    assert len(client.get_metric_history(parent.info.run_id, "ws1/step_time_ms")) == 12
    logged = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert artifacts | {"record.json"} <= logged, key
    children = client.search_runs(
        [experiment_id], filter_string=f"tags.`{tracking.TAG_PARENT}` = '{parent.info.run_id}'"
    )
    assert [(c.info.run_name, c.info.status) for c in children] == [("bench ws=1", "FINISHED")], key
