"""`benchgate run --commit` of a repository, as every pipeline task fetches one: the workload is the
repository's own module or benchgate's; `os:system` with `command=...` is refused with exit 2 before
anything runs (workloads/origin.py), and the repository's own workload still runs, the A/B's base side
from its own checkout of the base commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from repo_workloads import TINY_WORKLOAD
from stack_repo import git


def run_commit(repo: Path, workload: str, *args: str) -> subprocess.CompletedProcess[str]:
    sha = git(repo, "rev-parse", "HEAD")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "benchgate",
            "run",
            "--commit",
            sha,
            "--repository",
            f"file://{repo}",
            "--workload",
            workload,
            *args,
            "--steps",
            "4",
            "--warmup",
            "1",
            "--world-sizes",
            "1",
            "--no-eval",
            "--no-trace",
            "--no-update-baseline",
            "--out",
            str(repo.parent / "out"),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.serial  # an A/B: its rounds time both sides
def test_a_checked_out_run_refuses_os_system_and_runs_the_repositorys_workload(repo: Path) -> None:
    (repo / "tinymodel.py").write_text(TINY_WORKLOAD)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a workload")
    (repo / "tinymodel.py").write_text(TINY_WORKLOAD + "# the candidate\n")
    git(repo, "commit", "-q", "-am", "the candidate")
    marker = repo.parent / "ran"
    refused = run_commit(repo, "os:system", "--workload-arg", f"command=touch {marker}")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "bench.workload: got 'os:system'" in refused.stderr
    assert "not code of the repository" in refused.stderr
    assert not marker.exists()
    # A/B against the base commit (bench.toml: small rounds): each side loads from its own checkout.
    own = run_commit(repo, "tinymodel:make_workload", "--base", "HEAD~1")
    assert own.returncode in (0, 4), own.stdout + own.stderr  # PASS, or UNKNOWN on a very loaded host
    assert "rule: A/B" in own.stdout and "not code of the repository" not in own.stdout + own.stderr
