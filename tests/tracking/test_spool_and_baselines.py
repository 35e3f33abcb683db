"""MLflow down, sync, baselines per machine profile, promotion and history, against a real server."""

from __future__ import annotations

import http.server
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness import free_port, make_config
from mlflow import MlflowClient

from benchgate.config import parse_config
from benchgate.kfp.local_run import run_gate
from benchgate.kit.files import read_json, write_json
from benchgate.results.bundle import load_bundle
from benchgate.results.comparison import load_comparison
from benchgate.results.figures import run_rate
from benchgate.store import spool
from benchgate.store.baseline import read_meta, save_baseline
from benchgate.tracking import client as tracking
from benchgate.tracking import read as tracking_read
from benchgate.tracking.record import log_entry
from benchgate.tracking.refresh import refresh_baseline

pytestmark = pytest.mark.slow


def tracking_section(tmp_path: Path, uri: str, experiment: str, **extra: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "uri": uri,
        "experiment": experiment,
        "local_dir": str(tmp_path / "mlflow"),
        "spool_dir": str(tmp_path / "spool"),
        **extra,
    }


def benchgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchgate", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def runs_with_key(client: MlflowClient, experiment: str, run_key: str) -> list[Any]:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return list(
        client.search_runs(
            [found.experiment_id], filter_string=f"tags.`{tracking.TAG_RUN_KEY}` = '{run_key}'"
        )
    )


def test_server_down_run_completes_on_the_cached_baseline_and_sync_logs_it_once(
    mlflow_server: str, results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment = f"down-{uuid.uuid4().hex[:8]}"
    # The directory store already holds a baseline, cached by an earlier run of the same settings.
    save_baseline(load_bundle(results), tmp_path / "baselines", "cached by an earlier run")
    # Outside any git repository: no baseline commit to A/B against, the cached baseline alone judges.
    monkeypatch.chdir(tmp_path)
    down = f"http://127.0.0.1:{free_port()}"
    config = make_config(
        tmp_path,
        tracking=tracking_section(tmp_path, down, experiment, max_wait_s=4),
        out=str(tmp_path / "down"),
    )
    outcome = run_gate(config)

    assert outcome.tracking["reachable"] is False
    assert outcome.tracking["waited_s"] <= 4.5  # the whole run's wait on the dead server
    assert "unreachable" in outcome.tracking["error"]
    statuses = {c.name: c.status for c in outcome.comparison.checks}
    # Judged against the cached baseline (one run: the screen cannot know the noise yet).
    assert statuses["tokens/s (ws=1)"] in ("PASS", "UNKNOWN")
    entry = Path(outcome.published["spooled"])
    assert outcome.published["mlflow_run_id"] is None
    assert {"record.json", "env.json", "metrics-ws1.json", "compare.json", "report.html"} <= {
        p.name for p in entry.iterdir()
    }
    run_key = read_json(entry / "record.json")["run_key"]
    kept = tmp_path / "kept-entry"
    shutil.copytree(entry, kept)

    settings = tmp_path / "tracking.toml"
    settings.write_text(f'[tracking]\nexperiment = "{experiment}"\nspool_dir = "{tmp_path / "spool"}"\n')
    synced = benchgate("sync", "--config", str(settings), "--tracking-uri", mlflow_server, cwd=tmp_path)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert f"{run_key}: logged as run" in synced.stdout
    client = MlflowClient(tracking_uri=mlflow_server)
    logged = runs_with_key(client, experiment, run_key)
    assert len(logged) == 1 and logged[0].info.status == "FINISHED"
    assert logged[0].data.tags["benchgate.verdict"] == outcome.comparison.verdict

    again = benchgate("sync", "--config", str(settings), "--tracking-uri", mlflow_server, cwd=tmp_path)
    assert again.returncode == 0 and "nothing to sync" in again.stdout
    # The same entry spooled twice (say, a copy restored from a backup): still one run.
    shutil.copytree(kept, tmp_path / "spool" / run_key)
    third = benchgate("sync", "--config", str(settings), "--tracking-uri", mlflow_server, cwd=tmp_path)
    assert third.returncode == 0 and "already in MLflow" in third.stdout
    assert len(runs_with_key(client, experiment, run_key)) == 1


def test_server_down_and_no_cached_baseline_is_unknown_not_new(tmp_path: Path) -> None:
    """A pod without a volume (or a fresh laptop) cannot tell a first run from a run whose baseline
    is in an MLflow it cannot reach: nothing may pass as NEW then."""
    down = f"http://127.0.0.1:{free_port()}"
    config = make_config(
        tmp_path,
        tracking=tracking_section(tmp_path, down, f"down-{uuid.uuid4().hex[:8]}", max_wait_s=2),
        out=str(tmp_path / "down"),
    )
    outcome = run_gate(config)
    assert outcome.tracking["reachable"] is False
    statuses = {c.name: c.status for c in outcome.comparison.checks}
    assert statuses["tokens/s (ws=1)"] == "UNKNOWN" and "NEW" not in statuses.values()
    assert outcome.comparison.verdict == "UNKNOWN" and outcome.comparison.exit_code == 4
    assert any("MLflow is unreachable" in note for note in outcome.comparison.notes)


@pytest.mark.serial
def test_sync_to_a_dead_server_fails_with_exit_3_and_keeps_the_spool(tmp_path: Path) -> None:
    entry = tmp_path / "spool" / "k1"
    entry.mkdir(parents=True)
    write_json(entry / "record.json", {"run_key": "k1"})
    settings = tmp_path / "t.toml"
    settings.write_text(f'[tracking]\nmax_wait_s = 1.5\nspool_dir = "{tmp_path / "spool"}"\n')
    started = time.monotonic()
    result = benchgate(
        "sync", "--config", str(settings), "--tracking-uri", f"http://127.0.0.1:{free_port()}", cwd=tmp_path
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "unreachable" in result.stderr
    assert time.monotonic() - started < 30
    assert (entry / "record.json").is_file()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished gate run's result directory (tracking off), to make spool entries from."""
    tmp = tmp_path_factory.mktemp("results")
    return run_gate(make_config(tmp, out=str(tmp / "out"))).out_dir


def entry_for(
    results: Path, spool_dir: Path, profile: str, commit: str, baseline: bool, branch: str = "main"
) -> Path:
    """A spool entry of `results` as if measured on machine `profile` at `commit` on `branch`."""
    staging = spool_dir.parent / f"staging-{uuid.uuid4().hex[:8]}"
    shutil.copytree(results, staging, ignore=shutil.ignore_patterns("pipeline", "logs"))
    env = read_json(staging / "env.json")
    env["machine_profile"], env["git"] = profile, {"commit": commit, "branch": branch}
    write_json(staging / "env.json", env)
    for path in staging.glob("metrics-ws*.json"):
        write_json(path, {**read_json(path), "machine_profile": profile})
    record: dict[str, Any] = {"run_key": uuid.uuid4().hex, "started_unix": time.time()}
    if baseline:
        record |= {"baseline_since_unix": time.time(), "baseline_reason": "test"}
    return spool.write_entry(spool_dir, staging, record)


def connect(uri: str, experiment: str, tmp_path: Path) -> tracking.Tracker:
    return tracking.connect(parse_config({"tracking": tracking_section(tmp_path, uri, experiment)}))


def test_two_machine_profiles_in_one_experiment_never_see_each_others_baseline(
    mlflow_server: str, results: Path, tmp_path: Path
) -> None:
    experiment = f"profiles-{uuid.uuid4().hex[:8]}"
    tracker = connect(mlflow_server, experiment, tmp_path)
    a_id, _ = log_entry(tracker, entry_for(results, tmp_path / "spool", "h100-x8", "a" * 40, True))
    b_id, _ = log_entry(tracker, entry_for(results, tmp_path / "spool", "a100-x8", "b" * 40, True))

    assert [r.info.run_id for r in tracking_read.gate_runs(tracker, "h100-x8", baselines_only=True)] == [a_id]
    for profile, expected in (("h100-x8", a_id), ("a100-x8", b_id), ("l4-x1", None)):
        run_dir = tmp_path / f"run-{profile}"
        shutil.copytree(entry_for(results, tmp_path / "scratch", profile, "c" * 40, False), run_dir)
        config = make_config(
            tmp_path,
            tracking=tracking_section(tmp_path, mlflow_server, experiment),
            gate={"baseline_dir": str(tmp_path / f"cache-{profile}")},
        )
        state = refresh_baseline(config, run_dir)
        assert state.get("baseline_run_id") == expected, profile
        meta = read_meta(tmp_path / f"cache-{profile}", profile, "sleepy")
        assert (meta or {}).get("mlflow_run_id") == expected
        assert {p["run_id"] for p in state["history"]} == ({expected} if expected else set())


def test_promote_show_and_history(mlflow_server: str, results: Path, tmp_path: Path) -> None:
    experiment = f"promote-{uuid.uuid4().hex[:8]}"
    tracker = connect(mlflow_server, experiment, tmp_path)
    first, _ = log_entry(tracker, entry_for(results, tmp_path / "spool", "p1", "1" * 40, True))
    second, _ = log_entry(tracker, entry_for(results, tmp_path / "spool", "p1", "2" * 40, False))
    runs = tracking_read.gate_runs(tracker, "p1")
    assert tracking_read.newest_baseline(runs).info.run_id == first  # type: ignore[union-attr]

    settings = tmp_path / "t.toml"
    settings.write_text(f'[tracking]\nexperiment = "{experiment}"\n')
    common = ["--config", str(settings), "--tracking-uri", mlflow_server]
    promoted = benchgate("baseline", "promote", second, *common, cwd=tmp_path)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert tracking_read.newest_baseline(tracking_read.gate_runs(tracker, "p1")).info.run_id == second  # type: ignore[union-attr]
    shown = benchgate("baseline", "show", "--profile", "p1", *common, cwd=tmp_path)
    assert shown.returncode == 0 and second in shown.stdout and first not in shown.stdout
    # One tokens/s per run: the verdict table's, in `baseline show`, MLflow and `history` alike.
    rate = load_comparison(results / "compare.json").timing(1).current  # type: ignore[union-attr]
    assert rate == pytest.approx(run_rate(read_json(results / "metrics-ws1.json")))
    assert tracker.client.get_run(second).data.metrics["ws1/tokens_per_s_mean"] == pytest.approx(rate)
    assert f"ws1: {rate:,.0f}" in shown.stdout, shown.stdout

    child = tracker.client.search_runs(
        [tracker.experiment_id], filter_string=f"tags.`{tracking.TAG_PARENT}` = '{second}'"
    )[0]
    refused = benchgate("baseline", "promote", child.info.run_id, *common, cwd=tmp_path)
    assert refused.returncode == 2 and "not a benchgate gate run" in refused.stderr
    unknown = benchgate("baseline", "promote", "0" * 32, *common, cwd=tmp_path)
    assert unknown.returncode == 2 and "no such run" in unknown.stderr

    png = tmp_path / "history.png"
    shown = benchgate("history", "--profile", "p1", "--png", str(png), *common, cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "111111111111" in shown.stdout and "222222222222" in shown.stdout
    assert png.read_bytes().startswith(b"\x89PNG")
    assert f"{rate:,.0f}" in next(line for line in shown.stdout.splitlines() if "222222222222" in line)
    # A feature branch's run is a series of its own: said, drawn as its own line; --branch picks one.
    log_entry(tracker, entry_for(results, tmp_path / "spool", "p1", "3" * 40, False, branch="wider"))
    mixed = benchgate("history", "--profile", "p1", "--png", str(png), *common, cwd=tmp_path)
    assert mixed.returncode == 0, mixed.stdout + mixed.stderr
    note = " ".join(mixed.stdout.split("note:", 1)[1].split())
    assert note.startswith("these runs are 2 series (workload @ branch): sleepy @ main, sleepy @ wider")
    assert "--workload NAME and --branch NAME pick one" in note
    main = benchgate(
        "history", "--profile", "p1", "--branch", "main", "--png", str(png), *common, cwd=tmp_path
    )
    assert main.returncode == 0 and "333333333333" not in main.stdout and "note:" not in main.stdout


def test_an_interrupted_upload_is_redone_not_duplicated(
    mlflow_server: str, results: Path, tmp_path: Path
) -> None:
    experiment = f"broken-{uuid.uuid4().hex[:8]}"
    tracker = connect(mlflow_server, experiment, tmp_path)
    entry = entry_for(results, tmp_path / "spool", "p2", "3" * 40, False)
    run_key = read_json(entry / "record.json")["run_key"]
    # What a crash halfway through an upload leaves: a parent with the key that never finished.
    broken = tracker.client.create_run(tracker.experiment_id, tags={tracking.TAG_RUN_KEY: run_key})
    run_id, logged = log_entry(tracker, entry)
    assert logged and run_id != broken.info.run_id
    found = runs_with_key(tracker.client, experiment, run_key)
    assert [(r.info.run_id, r.info.status) for r in found] == [(run_id, "FINISHED")]
    assert log_entry(tracker, entry) == (run_id, False)


class RefusingProxy(http.server.BaseHTTPRequestHandler):
    """FAKE: an auth proxy in front of MLflow that is up (/health) but refuses every API call (401)."""

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 401)
        self.end_headers()
        self.wfile.write(b"OK" if self.path == "/health" else b'{"error_code": "UNAUTHENTICATED"}')

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


def test_a_server_that_refuses_us_falls_back_to_the_cache_like_a_dead_one(
    results: Path, tmp_path: Path
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RefusingProxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run_dir = tmp_path / "run"
        shutil.copytree(results, run_dir, ignore=shutil.ignore_patterns("pipeline", "logs"))
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        config = make_config(tmp_path, tracking=tracking_section(tmp_path, uri, "x", max_wait_s=5))
        state = refresh_baseline(config, run_dir)
    finally:
        server.shutdown()
    assert state["reachable"] is False
    assert state["waited_s"] < 5
    assert state["error"]  # MLflow's own message, e.g. the 401


@pytest.mark.serial
def test_history_changes_finds_the_commit_that_slowed_every_step(
    mlflow_server: str, results: Path, tmp_path: Path
) -> None:
    """12 runs of 12 commits, the last 6 with every step 25% slower, logged in shuffled order: read in the
    branch's commit order, `history --changes` places the change at the 7th commit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"], ["config", "user.name", "T"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    for i in range(12):
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", f"c{i}"], cwd=repo, check=True)
    commits = subprocess.run(
        ["git", "rev-list", "--reverse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split()
    experiment = f"changes-{uuid.uuid4().hex[:8]}"
    tracker = connect(mlflow_server, experiment, tmp_path)
    for i in (5, 0, 11, 3, 8, 1, 10, 6, 2, 9, 4, 7):  # start times out of commit order
        slower = 1.25 if i >= 6 else 1.0
        jitter = 1 + 0.01 * ((i * 7) % 5 - 2) / 2  # +-1%: runs of one level are not identical
        staging = tmp_path / f"scaled-{i}"
        shutil.copytree(results, staging, ignore=shutil.ignore_patterns("pipeline", "logs"))
        for path in staging.glob("metrics-ws*.json"):
            metrics = read_json(path)
            samples = metrics["samples"]
            samples["step_time_s"] = [t * slower * jitter for t in samples["step_time_s"]]
            samples["tokens_per_s"] = [r / (slower * jitter) for r in samples["tokens_per_s"]]
            write_json(path, metrics)
        log_entry(tracker, entry_for(staging, tmp_path / "spool", "p-changes", commits[i], False))

    settings = tmp_path / "t.toml"
    settings.write_text(f'[tracking]\nexperiment = "{experiment}"\n')
    common = ["--config", str(settings), "--tracking-uri", mlflow_server, "--png", str(tmp_path / "h.png")]
    shown = benchgate("history", "--profile", "p-changes", "--changes", *common, cwd=repo)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    changes = shown.stdout.split("change points", 1)[1]
    rows = [line for line in changes.splitlines() if "tokens/s ws=1 " in line or "tokens/s ws=1│" in line]
    assert rows and commits[6][:12] in rows[0] and "regression" in rows[0], changes
    change = float(re.search(r"│ ([+-][0-9.]+)% │", rows[0])[1])  # type: ignore[index]
    assert change == pytest.approx(-20.0, abs=1.0), rows[0]  # 1/1.25 - 1, give or take the jitter
    # The nightly check fails on it, names the run, and passes once the change is acknowledged.
    # Every run was logged just now: all 12 are new to this first check (`--new`).
    checked = benchgate("history", "--profile", "p-changes", "--check", "--new", "12", *common, cwd=repo)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    run_id = re.search(r"benchgate history ack (\w+) --reason", checked.stdout)[1]  # type: ignore[index]
    config = ["--config", str(settings), "--tracking-uri", mlflow_server]
    empty = benchgate("history", "ack", run_id, "--reason", " ", *config, cwd=repo)
    assert empty.returncode == 2 and "--reason" in empty.stderr, empty.stdout + empty.stderr
    acked = benchgate("history", "ack", run_id, "--reason", "bigger model, on purpose", *config, cwd=repo)
    assert acked.returncode == 0, acked.stdout + acked.stderr
    assert tracker.client.get_run(run_id).data.tags[tracking.TAG_ACK_REASON] == "bigger model, on purpose"
    again = benchgate("history", "--profile", "p-changes", "--check", "--new", "12", *common, cwd=repo)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(acknowledged:" in again.stdout.split("change points", 1)[1]  # the table marks it
    # Outside the repository the runs are read by start time: the same slowdown is no longer one step.
    elsewhere = benchgate("history", "--profile", "p-changes", "--changes", *common, cwd=tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr
    assert commits[6][:12] not in elsewhere.stdout.split("change points", 1)[-1]
