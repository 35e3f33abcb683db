"""`benchgate backfill A..B` as a user runs it, in a real git repository: every commit of the range gated
through the local pipeline (real torchrun, real compute) into the real `mlflow server`, then `benchgate
history` finding the slower commit among them; a second backfill that has nothing left to run; `--submit`
against the FAKE KFP server (tests/support/fake_kfp_server.py: a KFP cluster cannot run here); and bad input
refused before anything runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_kfp_server import FakeKfp, Scenario, serve
from mlflow import MlflowClient
from stack_repo import commit, stack_history

from benchgate.kit.files import read_json
from benchgate.tracking import client as tracking

REPOSITORY = "https://github.com/example/trainer.git"
# Fast gate runs: one rank, 20 steps, no eval or trace. The culprit doubles the stack: every step slower.
FAST = (
    "[bench]\nsteps = 20\nwarmup = 3\nworld_sizes = [1]\n[eval]\nenabled = false\n[trace]\nenabled = false\n"
)
LAYERS = [12] * 7 + [24] * 5  # the commit at index 7 and later are the slower ones
CULPRIT = 7


def benchgate(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchgate", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


def write_config(repo: Path, experiment: str) -> str:
    (repo / "backfill.toml").write_text(f'{FAST}[tracking]\nexperiment = "{experiment}"\n')
    return "backfill.toml"


def kfp_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KFP_", "KF_PIPELINES", "BENCHGATE_"))}
    env |= {"KFP_HOST": url, "KFP_TOKEN": "good-token", "KF_PIPELINES_SA_TOKEN_PATH": "/nonexistent"}
    return env


@pytest.fixture
def fake_kfp() -> Iterator[tuple[FakeKfp, str]]:
    state = FakeKfp(Scenario())
    server, url = serve(state)
    yield state, url
    server.shutdown()


def gate_runs(client: MlflowClient, experiment: str) -> list[Any]:
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    return list(
        client.search_runs([found.experiment_id], filter_string=f"tags.`{tracking.TAG_KIND}` = 'gate'")
    )


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(900)
def test_backfill_gates_each_commit_once_and_history_finds_the_slower_one(
    repo: Path, mlflow_server: str, fake_kfp: tuple[FakeKfp, str]
) -> None:
    commits = stack_history(repo, LAYERS)
    experiment = f"backfill-{uuid.uuid4().hex[:8]}"
    config = write_config(repo, experiment)
    common = ["--config", config, "--tracking-uri", mlflow_server]
    backfill = ["backfill", f"{commits[0]}..main", "--workload", "stackwork:make_workload", *common]
    gated = commits[1:]  # A itself is not in A..B

    first = benchgate(repo, *backfill)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"{len(gated)} to run, 0 already in MLflow" in first.stdout
    client = MlflowClient(tracking_uri=mlflow_server)
    runs = gate_runs(client, experiment)
    assert sorted(r.data.tags[tracking.TAG_COMMIT] for r in runs) == sorted(gated)
    assert not any(r.data.tags.get(tracking.TAG_BASELINE) for r in runs)
    # Each commit's own code was timed, not the working tree's: the model's depth is that commit's.
    for sha, layers in zip(gated, LAYERS[1:], strict=True):
        metrics = read_json(repo / "benchgate-backfill" / sha[:12] / "metrics-ws1.json")
        assert metrics["mfu"]["flops_per_token"]["dense_6n"] == 6 * layers * 256 * 256, sha
    summary = (repo / "benchgate-backfill" / "summary.md").read_text()
    assert all(sha[:12] in summary for sha in gated) and f"{len(gated)} commits: {len(gated)} ran" in summary
    png = repo / "benchgate-backfill.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png.unlink()

    again = benchgate(repo, *backfill)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 to run" in again.stdout and "nothing to run" in again.stdout
    assert len(gate_runs(client, experiment)) == len(gated)
    assert f"{len(gated)} commits: {len(gated)} skipped" in again.stdout
    assert png.is_file()  # the range's history, drawn again from MLflow

    # On a cluster of the same profile the same commits are done as well: nothing is submitted.
    state, url = fake_kfp
    profile = runs[0].data.tags[tracking.TAG_PROFILE]
    cluster = [*backfill, "--submit", "--profile", profile, "--repository", REPOSITORY]
    submitted = benchgate(repo, *cluster, "--out", "out-cluster", env=kfp_env(url))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "0 to submit" in submitted.stdout and state.calls("POST", "/runs") == 0

    # `history` reads the same runs in the branch's order and places the slowdown at the culprit.
    history = ["history", "--workload", "stack", "--png", "history.png", *common]
    shown = benchgate(repo, *history, "--changes")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    changes = shown.stdout.split("change points", 1)[1]
    # Either tokens/s series: as the gate judges it, or with the host's drift divided out.
    rows = [line for line in changes.splitlines() if re.search(r"│ tokens/s ws=1(, corrected)?\s*│", line)]
    near = {sha[:12] for sha in commits[CULPRIT - 1 : CULPRIT + 2]}
    assert any(row.split("│")[2].strip() in near and "regression" in row for row in rows), changes
    # The backfill added every run at once: all of them are new to this check (`--new`, else only a
    # point found with the newest run alarms, as after a nightly run).
    new = ("--new", str(len(commits)))
    checked = benchgate(repo, *history, "--check", *new)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    for run_id in set(re.findall(r"benchgate history ack (\w+) --reason", checked.stdout)):
        acked = benchgate(repo, "history", "ack", run_id, "--reason", "twice the layers, on purpose", *common)
        assert acked.returncode == 0, acked.stdout + acked.stderr
    assert benchgate(repo, *history, "--check", *new).returncode == 0


def test_backfill_submit_starts_one_pipeline_run_per_commit_and_attaches_on_retry(
    repo: Path, fake_kfp: tuple[FakeKfp, str]
) -> None:
    state, url = fake_kfp
    commits = stack_history(repo, [12, 12, 12, 24])
    config = write_config(repo, "cluster")
    args = ["backfill", f"{commits[0]}..main", "--every", "2", "--submit", "--repository", REPOSITORY]
    args += ["--workload", "stackwork:make_workload", "--workload-arg", "width=256", "--config", config]

    first = benchgate(repo, *args, env=kfp_env(url))
    assert first.returncode == 0, first.stdout + first.stderr
    # --every 2 over commits 1..3 keeps the 1st and B.
    created = [body["runtime_config"]["parameters"] for body in state.created_runs]
    assert [p["commit"] for p in created] == [commits[1], commits[3]]
    for parameters in created:
        assert parameters["update_baseline"] == "never" and parameters["repository"] == REPOSITORY
        assert parameters["branch"] == "main" and parameters["world_size_n"] == 1
        assert parameters["workload"] == "stackwork:make_workload"
        assert parameters["workload_args"] == '{"width": 256}' and parameters["steps"] == 20
        assert parameters["config"]["eval"]["enabled"] is False
        assert "baseline_dir" not in parameters["config"]["gate"]  # this machine's paths stay here
    for run_id in state.runs:
        assert f"{url}/#/runs/details/{run_id}" in first.stdout
    assert "2 commits: 2 submitted" in first.stdout
    assert (repo / "benchgate-backfill" / "summary.md").is_file()

    again = benchgate(repo, *args, env=kfp_env(url))
    assert again.returncode == 0, again.stdout + again.stderr
    assert state.calls("POST", "/runs") == 2
    assert "2 commits: 2 attached" in again.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["HEAD"], "RANGE: got 'HEAD' (expected A..B", id="syntax"),
        pytest.param(["nope..HEAD"], "A: got 'nope', which names no commit", id="unknown-ref"),
        pytest.param(["HEAD..HEAD~2"], "is not an ancestor of B", id="backwards"),
        pytest.param(["HEAD..main"], "whose ends are the same commit", id="empty"),
        pytest.param(["HEAD~1..HEAD", "--profile", "p"], "--profile: only with --submit", id="profile-alone"),
        pytest.param(["HEAD~1..HEAD", "--every", "0"], "--every", id="every-0"),
    ],
)
def test_bad_input_exits_2_before_anything_runs(repo: Path, args: list[str], message: str) -> None:
    stack_history(repo, [12, 12, 12])
    result = benchgate(repo, "backfill", *args, "--workload", "stackwork:make_workload")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    for left in ("benchgate-backfill", "benchgate-backfill.png", ".benchgate"):
        assert not (repo / left).exists(), left


@pytest.mark.slow
def test_a_commit_whose_workload_cannot_load_stops_the_backfill_with_exit_2(
    repo: Path, mlflow_server: str
) -> None:
    commits = stack_history(repo, [12])
    commit(repo, "broken", body="raise ValueError('the factory is broken')")
    commit(repo, "fixed")
    experiment = f"broken-{uuid.uuid4().hex[:8]}"
    config = write_config(repo, experiment)
    args = ["backfill", f"{commits[0]}..main", "--workload", "stackwork:make_workload", "--config", config]
    args += ["--tracking-uri", mlflow_server]
    result = benchgate(repo, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the factory is broken" in result.stderr
    summary = (repo / "benchgate-backfill" / "summary.md").read_text()
    assert "1 commit: 1 failed" in summary  # the fixed commit after it was never reached
