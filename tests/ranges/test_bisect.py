"""`benchgate bisect` as a user runs it: a real repository of 12 commits of real compute (commit 7
doubles the layers, the later ones keep them), the CLI in a subprocess, every step a real A/B of two
worktrees under torchrun, the bisection logged to the real MLflow server."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import free_port
from stack_repo import git, stack_history
from typer.testing import CliRunner

from benchgate.cli.main import app
from benchgate.kit.files import read_json
from benchgate.ranges.worktrees import Worktrees, holds_module

# Small A/B rounds that decide a doubling of the work in 2-3 rounds: 60 steps a side (12 steps of a
# few ms measured a bias of several % between identical commits on a busy host, 60 did not), and a
# 30% tolerance, which leaves that doubling (about -50% tokens/s) far beyond it and unchanged code far
# within it. min_measured_s = 0: rounds of exactly gate.ab.steps steps, no probe of the step time.
AB = "steps = 60\nwarmup = 2\nmin_rounds = 2\nmax_rounds = 3\n"
CONFIG = f"[gate.tolerances]\nthroughput_drop_pct = 30.0\n[gate.ab]\n{AB}min_measured_s = 0\n"
# The same rounds, their steps set by a probe of good's step time: at least 0.4 s measured a side.
PROBED = CONFIG.replace("steps = 60", "steps = 12").replace("min_measured_s = 0", "min_measured_s = 0.4")
TRACKING = "[tracking]\nmax_wait_s = 1.0\n"
CULPRIT = 7
GOOD = 3  # the culprit bisect searches for starts from this commit
LAYERS = [12] * CULPRIT + [24] * (12 - CULPRIT)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The repository (its tree clean, on main) and its 12 commits, oldest first."""
    repo = tmp_path_factory.mktemp("bisect") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "CI")
    (repo / ".gitignore").write_text("out*/\n.benchgate/\n*.toml\n")
    (repo / "bisect.toml").write_text(CONFIG + TRACKING)
    (repo / "probed.toml").write_text(PROBED + TRACKING)
    return repo, stack_history(repo, LAYERS)


def bisect(repo: Path, out: str, *args: str, config: str = "bisect.toml") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchgate", "bisect", *bisect_args(out, *args, config=config)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )


def bisect_args(out: str, *args: str, config: str = "bisect.toml") -> list[str]:
    return ["--workload", "stackwork:make_workload", "--config", config, "--out", out, *args]


def state(repo: Path) -> tuple[str, str, str]:
    """What must not change: the working tree and index (porcelain status), HEAD, the worktrees."""
    return git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"), git(repo, "worktree", "list")


@pytest.mark.slow
@pytest.mark.serial
def test_bisect_names_the_culprit_within_the_decision_bound(
    history: tuple[Path, list[str]], mlflow_server: str
) -> None:
    repo, commits = history
    before = state(repo)
    # From commit 3: 8 commits in the range (the history keeps 12), 3 of them before the culprit.
    good = commits[GOOD]
    result = bisect(repo, "out-culprit", "--good", good, "--bad", "main", "--tracking-uri", mlflow_server)
    assert result.returncode == 1, result.stdout + result.stderr
    culprit = commits[CULPRIT]
    assert f"culprit: {culprit}" in result.stdout
    assert f"subject: commit {CULPRIT}: 24 layers" in result.stdout
    assert "author:  CI <ci@example.com>" in result.stdout
    assert f"its own change, vs its parent {commits[CULPRIT - 1][:12]}: FAIL" in result.stdout
    assert state(repo) == before  # tree, index and HEAD as they were; no worktree left
    assert not (repo / "out-culprit" / "worktrees").exists()

    record = read_json(repo / "out-culprit" / "bisect.json")
    decisions = len(record["steps"])
    assert decisions <= math.ceil(math.log2(len(commits) - 1 - GOOD)) + 2 == record["max_decisions"]
    assert record["status"] == "CULPRIT" and record["exit_code"] == 1
    assert record["culprit"]["sha"] == culprit and record["culprit"]["vs_good"]["status"] == "FAIL"
    assert record["culprit"]["own"]["change_pct"] < -30
    # The culprit's own FAIL is explained as a gate run's is: profiled rounds name what its extra layers
    # cost (their matmuls and GELUs), with the traces kept in its step's directory.
    attribution = record["culprit"]["attribution"]
    assert attribution["decision"] == "FAIL" and attribution["entries"], attribution
    assert attribution["entries"][0]["change_ms_per_step"] > 0
    own = next(
        s for s in record["steps"] if s["base"] == record["culprit"]["parent"] and s["candidate"] == culprit
    )
    step_dir = repo / "out-culprit" / Path(own["ab_json"]).parts[0]
    assert attribution["traces"] and all((step_dir / trace).is_file() for trace in attribution["traces"])
    assert "  Why ws=1 is slower: 1 profiled round(s) per side" in result.stdout
    for number, step in enumerate(record["steps"], start=1):
        assert step["step"] == number
        ab = read_json(repo / "out-culprit" / step["ab_json"])
        assert ab["decision"] == step["decision"]
        assert ab["candidate"]["commit"] == step["candidate"] and ab["base"]["commit"] == step["base"]
        # Printed as decided: the commit, its subject, the status and the commits left.
        status, left = step["decision"]["status"], step["commits_left"]
        assert f"step {number}  {step['candidate'][:12]} 'commit " in result.stdout
        assert f"vs {'its parent' if step['role'] == 'culprit' else 'good'}: {status} " in result.stdout
        assert f"; {left} commit{'s' if left != 1 else ''} left" in result.stdout

    from mlflow import MlflowClient

    from benchgate.tracking.bisection import KIND_BISECT

    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(record["tracking"]["run_id"])
    assert run.data.tags["benchgate.kind"] == KIND_BISECT and run.info.status == "FINISHED"
    assert run.data.params["culprit"] == culprit and run.data.params["good"] == good
    assert run.data.params["steps"] == str(decisions)
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["bisect.json"]
    # Never taken for a gate run: not by history's and the baselines' search, not by promotion.
    from benchgate.config import parse_config
    from benchgate.errors import BadInputError
    from benchgate.tracking.client import connect
    from benchgate.tracking.read import gate_runs, get_gate_run

    profile = record["machine_profile"]
    assert run.data.tags["benchgate.machine_profile"] == profile
    tracker = connect(parse_config({"tracking": {"uri": mlflow_server}}))
    assert all(r.info.run_id != run.info.run_id for r in gate_runs(tracker, profile, limit=1000))
    with pytest.raises(BadInputError, match="not a benchgate gate run"):
        get_gate_run(tracker, run.info.run_id)


@pytest.mark.slow
@pytest.mark.serial
def test_a_range_without_regression_exits_0_and_an_unreachable_mlflow_only_warns(
    history: tuple[Path, list[str]],
) -> None:
    repo, commits = history
    before = state(repo)
    down = f"http://127.0.0.1:{free_port()}"
    result = bisect(
        repo,
        "out-none",
        "--good",
        commits[0],
        "--bad",
        commits[5],
        "--tracking-uri",
        down,
        config="probed.toml",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no regression beyond tolerance in the range" in result.stdout
    assert "warning: not logged to MLflow" in result.stderr
    record = read_json(repo / "out-none" / "bisect.json")
    assert record["status"] == "NO_REGRESSION" and record["exit_code"] == 0 and len(record["steps"]) == 1
    assert record["tracking"]["error"]
    # The probe of good's step time made the rounds longer than gate.ab.steps, as min_measured_s asks.
    ab = read_json(repo / "out-none" / record["steps"][0]["ab_json"])
    assert record["round_steps"] > 12 and ab["rounds"][0]["pairs"] == record["round_steps"]
    assert (repo / "out-none" / "probe" / "metrics-ws1.json").is_file()
    assert state(repo) == before


@pytest.mark.slow
def test_ctrl_c_removes_the_worktrees_and_keeps_what_was_written(history: tuple[Path, list[str]]) -> None:
    repo, commits = history
    before = state(repo)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchgate",
            "bisect",
            *bisect_args("out-int", "--good", commits[0], "--bad", "main"),
        ],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        # The first A/B has started once its round directory exists: both worktrees are checked out.
        while not (repo / "out-int" / "step1" / "ab" / "ws1" / "round1").exists():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        assert len(git(repo, "worktree", "list").splitlines()) == 3
        time.sleep(0.5)  # into the round: its turn coordinator waits for the workers
        os.kill(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 3, stderr
    assert "interrupted" in stderr and "the steps decided so far" in stderr
    assert read_json(repo / "out-int" / "bisect.json")["status"] == "INTERRUPTED"
    assert state(repo) == before
    assert not (repo / "out-int" / "worktrees").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--good", "0" * 40, "--bad", "main"], "--good: got '0000000000", id="unknown-sha"),
        pytest.param(
            ["--good", "main", "--bad", "main~11"], "which is not an ancestor of --bad", id="reversed"
        ),
        pytest.param(["--good", "main~1", "--bad", "main~1"], "the same commit as --good", id="same"),
        pytest.param(
            ["--good", "main~3", "--bad", "nope"], "--bad: got 'nope', which names no commit", id="bad-ref"
        ),
        pytest.param(
            ["--good", "main~3", "--bad", "main", "--world-size", "64"],
            "--world-size: got 64",
            id="world-size",
        ),
    ],
)
def test_bad_range_exits_2_naming_the_flag_before_anything_runs(
    history: tuple[Path, list[str]], args: list[str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = history
    before = state(repo)
    monkeypatch.chdir(repo)
    # In this process (typer's CliRunner): nothing here may start torchrun, and none does.
    result = CliRunner().invoke(app, ["bisect", *bisect_args("out-bad", *args)], env={"COLUMNS": "500"})
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert not (repo / "out-bad").exists()
    assert state(repo) == before


def test_an_out_dir_benchgate_did_not_write_is_refused(
    history: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = history
    mine = repo / "out-mine"
    mine.mkdir(exist_ok=True)
    (mine / "notes.txt").write_text("keep me")
    monkeypatch.chdir(repo)
    args = bisect_args("out-mine", "--good", "main~2", "--bad", "main")
    result = CliRunner().invoke(app, ["bisect", *args], env={"COLUMNS": "500"})
    assert result.exit_code == 2, result.output
    assert "was not created by benchgate" in result.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_worktrees_hold_each_commit_and_leave_nothing_registered(
    history: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, commits = history
    before = state(repo)
    # A worktree a killed bisect left registered, its directory gone with its out dir: pruned on entry.
    git(repo, "worktree", "add", "--detach", "--quiet", str(tmp_path / "stale"), commits[1])
    shutil.rmtree(tmp_path / "stale")
    with Worktrees(repo, tmp_path / "trees") as trees:
        assert "stale" not in git(repo, "worktree", "list")
        path = trees.checkout(commits[CULPRIT])
        assert trees.checkout(commits[CULPRIT]) == path  # one checkout per commit
        assert "LAYERS = 24" in (path / "stackwork.py").read_text()
        assert trees.import_paths(commits[CULPRIT]) == (path,)
        assert holds_module(path, "stackwork") and not holds_module(path, "benchgate")
        (path / "__pycache__").mkdir()  # what the workers leave: removed all the same
        assert len(git(repo, "worktree", "list").splitlines()) == 2
    assert state(repo) == before
    assert not (tmp_path / "trees").exists()
