"""This machine's disk refusing a write (full, read-only) is exit 3 naming the path, never an MLflow outage.

The faults are real: small tmpfs mounts made by the test, filled to ENOSPC or remounted read-only
(the tests run as root, whom permission bits do not stop, so chmod would prove nothing). Where mounting
is not permitted (not root, no CAP_SYS_ADMIN), the tests that need a mount skip, saying why.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from harness import free_port, make_config
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from test_spool_and_baselines import benchgate, runs_with_key, tracking_section

from benchgate.errors import DiskError, RunFailedError
from benchgate.kfp.local_run import run_gate
from benchgate.kit.diskfaults import is_disk_error, local_fault
from benchgate.kit.files import read_json, write_json
from benchgate.publish.stage import RUN_FILE, stage_publish
from benchgate.results.bundle import load_bundle
from benchgate.store import spool
from benchgate.store.baseline import read_meta, save_baseline
from benchgate.tracking import client as tracking
from benchgate.tracking import record as tracking_record
from benchgate.tracking.refresh import refresh_baseline

Mount = Callable[..., Path]


def _mount(directory: Path, options: str) -> str | None:
    """Mount a tmpfs on `directory`; the reason it could not be, or None."""
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], capture_output=True, text=True
    )
    return None if result.returncode == 0 else (result.stderr.strip() or f"mount exit {result.returncode}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Mount]:
    """A factory of small tmpfs mounts under tmp_path (`tmpfs("name", size="256k")`), unmounted after."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine")
    mounted: list[Path] = []

    def make(name: str, size: str = "1m") -> Path:
        directory = tmp_path / name
        directory.mkdir()
        problem = _mount(directory, f"size={size},mode=0755")
        if problem is not None:
            pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {problem}")
        mounted.append(directory)
        return directory

    yield make
    for directory in reversed(mounted):
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True)  # still busy: detach


def read_only(directory: Path) -> None:
    """Remount a tmpfs read-only, with what the test put in it."""
    subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True, capture_output=True)


def fill(directory: Path) -> None:
    """Fill the filesystem of `directory` until a write gets ENOSPC: the disk is full."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (65536, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    finally:
        os.close(fd)


def said(result: subprocess.CompletedProcess[str]) -> str:
    """What the command said on stderr, with the terminal's line wrapping undone."""
    return " ".join(result.stderr.split())


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished gate run's result directory (tracking off), as `benchgate run` leaves it."""
    tmp = tmp_path_factory.mktemp("results")
    return run_gate(make_config(tmp, out=str(tmp / "out"))).out_dir


def copy_results(results: Path, where: Path) -> Path:
    shutil.copytree(results, where, ignore=shutil.ignore_patterns("pipeline", "logs", ".benchgate-out*"))
    return where


# ---------------------------------------------------------------- telling a disk from a network


def test_a_network_failure_is_an_outage_and_a_disk_fault_is_not() -> None:
    # requests' ConnectionError is an OSError too; only what the error says about the disk decides.
    refused = requests.ConnectionError("Max retries exceeded (Connection refused)")
    assert isinstance(refused, OSError) and isinstance(refused, tracking.send_errors())
    assert local_fault(refused) is None
    assert local_fault(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")) is None
    full = OSError(errno.ENOSPC, "No space left on device")
    assert local_fault(full) is full and not isinstance(full, tracking.send_errors())
    named = FileNotFoundError(errno.ENOENT, "No such file or directory", "/spool/k/env.json")
    assert is_disk_error(named) and local_fault(named) is named
    # MLflow's wrapping of SQLite (MlflowException around SQLAlchemy around sqlite3) is searched through.
    readonly = sqlite3.OperationalError("attempt to write a readonly database")
    readonly.sqlite_errorcode = 8
    try:
        try:
            raise readonly
        except sqlite3.OperationalError as e:
            raise MlflowException("(sqlite3.OperationalError) attempt to write a readonly database") from e
    except MlflowException as wrapped:
        assert local_fault(wrapped) is readonly
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5  # SQLITE_BUSY: a writer, not the disk
    assert local_fault(locked) is None


# ---------------------------------------------------------------- the baseline store


@pytest.mark.slow
def test_a_full_baseline_store_while_caching_mlflows_baseline_fails_the_run_not_the_server(
    mlflow_server: str, results: Path, tmp_path: Path, tmpfs: Mount
) -> None:
    """The issue: ENOSPC while caching was taken for an outage, the stale cache decided and the run was
    not logged. Now it is exit 3 naming the store, and the cached baseline stays as it was."""
    experiment = f"full-store-{uuid.uuid4().hex[:8]}"
    store = tmpfs("store", size="256k")
    bundle = load_bundle(results)
    save_baseline(bundle, store, "cached earlier", created_unix=time.time() - 3600)
    # MLflow holds a newer baseline of the same profile and workload.
    config = make_config(
        tmp_path,
        gate={"baseline_dir": str(store)},
        tracking=tracking_section(tmp_path, mlflow_server, experiment),
    )
    entry = spool.write_entry(
        tmp_path / "spool",
        results,
        {"run_key": uuid.uuid4().hex, "started_unix": time.time(), "baseline_since_unix": time.time()},
    )
    tracker = tracking.connect(config)
    newer, _ = tracking_record.log_entry(tracker, entry)
    fill(store)
    before = snapshot(store)
    run_dir = copy_results(results, tmp_path / "run")
    before_run = snapshot(run_dir)

    with pytest.raises(DiskError) as raised:
        refresh_baseline(config, run_dir)
    message = str(raised.value)
    assert raised.value.exit_code == 3
    assert f"cannot write the baseline store {store}" in message and "No space left on device" in message
    assert "unreachable" not in message
    assert snapshot(store) == before  # no staging left behind, the old version intact
    meta = read_meta(store, bundle.machine_profile, "sleepy")
    assert meta is not None and meta["reason"] == "cached earlier" and meta.get("mlflow_run_id") != newer
    assert snapshot(run_dir) == before_run  # no "MLflow unreachable" state recorded in tracking.json


@pytest.mark.slow
def test_a_read_only_baseline_store_fails_the_gate_run_with_exit_3_and_keeps_the_results(
    tmp_path: Path, tmpfs: Mount
) -> None:
    """`benchgate run`'s pipeline, promoting into a read-only store: the compare task fails with exit 3
    naming the store; its results and the spooled copy of the run are on disk."""
    store = tmpfs("store")
    read_only(store)
    down = f"http://127.0.0.1:{free_port()}"  # nothing answers there: the run is only spooled
    config = make_config(
        tmp_path,
        gate={"baseline_dir": str(store), "update_baseline": "always"},
        tracking=tracking_section(tmp_path, down, "never-reached", max_wait_s=1),
        out=str(tmp_path / "out"),
    )
    with pytest.raises(RunFailedError) as raised:
        run_gate(config)
    message = str(raised.value)
    assert raised.value.exit_code == 3
    assert f"cannot write the baseline store {store}" in message and "Read-only file system" in message
    compared = list((tmp_path / "out" / "pipeline").rglob("compare.json"))
    assert compared, "the compare task's results are on disk"
    results = compared[0].parent
    assert {"env.json", "metrics-ws1.json", "compare.md", "report.html"} <= {
        p.name for p in results.iterdir()
    }
    (entry,) = spool.pending(tmp_path / "spool")
    assert read_json(entry / "record.json")["run_key"] == read_json(results / RUN_FILE)["run_key"]
    assert read_json(entry / "compare.json") == read_json(results / "compare.json")


# ---------------------------------------------------------------- the results (out dir)


@pytest.mark.slow
def test_a_run_whose_out_directory_fills_up_is_exit_3_naming_the_file_and_the_complete_results(
    tmp_path: Path, tmpfs: Mount
) -> None:
    """--out on a disk that fills up during the run (kfp.local's pipeline root lives there too): exit 3
    naming the file that did not fit; no empty or half file in --out; the run's results are complete
    where the message says."""
    out = tmpfs("out", size="200k")
    config = make_config(tmp_path, out=str(out))
    with pytest.raises(RunFailedError) as raised:
        run_gate(config)
    message = str(raised.value)
    assert raised.value.exit_code == 3
    # Full during a task ("cannot write in OUT"), or while gathering the results ("cannot write OUT/file").
    assert message.startswith((f"out: cannot write {out}/", f"out: cannot write in {out}:")), message
    assert "No space left on device" in message
    assert all(p.stat().st_size > 0 for p in out.glob("*.json")), "no empty result file"
    assert not list(out.rglob("*.partial"))
    if "the run finished and its results are complete in " in message:
        complete = Path(message.rsplit(" in ", 1)[1])
        assert read_json(complete / "compare.json")["checks"]


@pytest.mark.slow
def test_compare_into_a_read_only_result_directory_is_exit_3_naming_the_file(
    results: Path, tmp_path: Path, tmpfs: Mount
) -> None:
    run_dir = tmpfs("run")
    copy_results(results, run_dir / "r")
    before = snapshot(run_dir)
    read_only(run_dir)
    compared = benchgate("compare", str(run_dir / "r"), "--baseline", str(results), cwd=tmp_path)
    assert compared.returncode == 3, compared.stdout + compared.stderr
    target = run_dir / "r" / "compare.json"
    assert f"cannot write the comparison {target}: Read-only file system" in said(compared)
    assert "Traceback" not in said(compared) + compared.stdout
    assert snapshot(run_dir) == before


# ---------------------------------------------------------------- the spool


@pytest.mark.slow
def test_a_full_spool_fails_publishing_with_exit_3_and_leaves_no_half_entry(
    mlflow_server: str, results: Path, tmp_path: Path, tmpfs: Mount
) -> None:
    spool_dir = tmpfs("spool", size="64k")
    fill(spool_dir)
    run_dir = copy_results(results, tmp_path / "run")
    write_json(run_dir / RUN_FILE, {"run_key": uuid.uuid4().hex, "started_unix": time.time()})
    before = snapshot(run_dir)
    config = make_config(
        tmp_path,
        tracking=tracking_section(tmp_path, mlflow_server, "never-sent") | {"spool_dir": str(spool_dir)},
    )
    with pytest.raises(DiskError) as raised:
        stage_publish(config, run_dir)
    message = str(raised.value)
    assert f"cannot write the spool entry {spool_dir}/" in message and "No space left on device" in message
    assert sorted(p.name for p in spool_dir.iterdir()) == ["filler"]  # the staging copy is gone
    assert snapshot(run_dir) == before  # the spool is written first: nothing else (report, published.json)


@pytest.mark.slow
def test_sync_into_a_read_only_spool_says_the_run_is_logged_and_exits_3(
    mlflow_server: str, results: Path, tmp_path: Path, tmpfs: Mount
) -> None:
    experiment = f"ro-spool-{uuid.uuid4().hex[:8]}"
    spool_dir = tmpfs("spool")
    run_key = uuid.uuid4().hex
    entry = spool.write_entry(spool_dir, results, {"run_key": run_key, "started_unix": time.time()})
    before = snapshot(spool_dir)
    read_only(spool_dir)
    settings = tmp_path / "sync.toml"
    settings.write_text(f'[tracking]\nexperiment = "{experiment}"\nspool_dir = "{spool_dir}"\n')
    for attempt in range(2):  # the second finds the run in MLflow, and still cannot remove the entry
        synced = benchgate("sync", "--config", str(settings), "--tracking-uri", mlflow_server, cwd=tmp_path)
        assert synced.returncode == 3, synced.stdout + synced.stderr
        assert f"{run_key} is logged to MLflow as run" in said(synced)
        assert f"cannot write the spool entry {entry}: Read-only file system" in said(synced), attempt
    assert len(runs_with_key(MlflowClient(tracking_uri=mlflow_server), experiment, run_key)) == 1
    assert snapshot(spool_dir) == before


# ---------------------------------------------------------------- MLflow's local store


def _sync_local(settings: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return benchgate("sync", "--config", str(settings), cwd=cwd)


@pytest.fixture
def local_store(results: Path, tmp_path: Path, tmpfs: Mount) -> dict[str, Any]:
    """An embedded MLflow store on its own tmpfs that already holds one synced run; one more run spooled."""
    local_dir = tmpfs("mlflow", size="16m")
    spool_dir = tmp_path / "spool"
    settings = tmp_path / "local.toml"
    settings.write_text(f'[tracking]\nlocal_dir = "{local_dir}"\nspool_dir = "{spool_dir}"\n')
    first = uuid.uuid4().hex
    spool.write_entry(spool_dir, results, {"run_key": first, "started_unix": time.time()})
    synced = _sync_local(settings, tmp_path)
    assert synced.returncode == 0 and f"{first}: logged as run" in synced.stdout, (
        synced.stdout + synced.stderr
    )
    second = uuid.uuid4().hex
    entry = spool.write_entry(spool_dir, results, {"run_key": second, "started_unix": time.time()})
    return {"dir": local_dir, "settings": settings, "entry": entry, "spool": spool_dir}


@pytest.mark.slow
@pytest.mark.serial
def test_sync_into_a_read_only_local_mlflow_store_is_exit_3_naming_it(
    local_store: dict[str, Any], tmp_path: Path
) -> None:
    local_dir: Path = local_store["dir"]
    before = snapshot(local_store["spool"])
    read_only(local_dir)
    started = time.monotonic()
    synced = _sync_local(local_store["settings"], tmp_path)
    assert synced.returncode == 3, synced.stdout + synced.stderr
    assert f"cannot write MLflow's local store {local_dir}" in said(synced)
    assert "Read-only file system" in said(synced) and "unreachable" not in said(synced)
    assert "Traceback" not in said(synced) + synced.stdout
    assert time.monotonic() - started < 60  # no minutes of MLflow retrying a store it cannot write
    assert snapshot(local_store["spool"]) == before  # the entry waits for the next sync


@pytest.mark.slow
def test_sync_into_a_full_local_mlflow_store_is_exit_3_and_a_later_sync_sends_the_run_once(
    local_store: dict[str, Any], tmp_path: Path
) -> None:
    local_dir: Path = local_store["dir"]
    fill(local_dir)
    synced = _sync_local(local_store["settings"], tmp_path)
    assert synced.returncode == 3, synced.stdout + synced.stderr
    assert f"cannot write MLflow's local store {local_dir}" in said(synced)
    assert "No space left on device" in said(synced) and "Traceback" not in said(synced)
    assert local_store["entry"].is_dir()
    (local_dir / "filler").unlink()  # space again: the run goes, once
    again = _sync_local(local_store["settings"], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{local_store['entry'].name}: logged as run" in again.stdout
    client = MlflowClient(tracking_uri=f"sqlite:///{local_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("benchgate")
    assert experiment is not None
    found = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{tracking.TAG_RUN_KEY}` = '{local_store['entry'].name}'",
    )
    assert [r.info.status for r in found] == ["FINISHED"]
    assert spool.pending(local_store["spool"]) == []


@pytest.mark.slow
@pytest.mark.serial
def test_a_local_store_that_cannot_be_created_fails_at_once_naming_it(
    results: Path, tmp_path: Path, tmpfs: Mount
) -> None:
    parent = tmpfs("ro")
    read_only(parent)
    settings = tmp_path / "local.toml"
    settings.write_text(
        f'[tracking]\nlocal_dir = "{parent / "mlflow"}"\nspool_dir = "{tmp_path / "spool"}"\n'
    )
    spool.write_entry(tmp_path / "spool", results, {"run_key": uuid.uuid4().hex, "started_unix": time.time()})
    started = time.monotonic()
    synced = _sync_local(settings, tmp_path)
    assert synced.returncode == 3, synced.stdout + synced.stderr
    assert f"cannot write MLflow's local store {parent / 'mlflow'}: Read-only file system" in said(synced)
    assert time.monotonic() - started < 30
