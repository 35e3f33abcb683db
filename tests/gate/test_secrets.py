"""No secret reaches anything benchgate writes or sends: tokens planted in the environment and in a CI
checkout's origin URL, then every file of a real run, a real MLflow server's store, the compiled
pipeline, what the (fake) KFP server received and every line printed are searched for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_kfp_server import FakeKfp, Scenario, serve
from harness import MLFLOW_SERVER_ROOTS

pytestmark = pytest.mark.slow

SECRET_VARIABLES = (
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "KFP_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "HF_TOKEN",
    "BENCHGATE_TEST_SECRET",
)


@pytest.fixture
def planted() -> dict[str, str]:
    """One distinct, greppable token per variable, plus the CI job token in the checkout's origin."""
    values = {name: f"planted{name.lower().replace('_', '')}{uuid.uuid4().hex}" for name in SECRET_VARIABLES}
    values["git"] = f"glcbt-planted{uuid.uuid4().hex}"
    return values


@pytest.fixture
def checkout(tmp_path: Path, planted: dict[str, str]) -> Path:
    """A CI checkout as GitLab leaves it: origin carries the job token."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    origin = f"https://gitlab-ci-token:{planted['git']}@gitlab.example.com/team/model.git"
    for args in (
        ["init", "--quiet", "--initial-branch=main"],
        ["remote", "add", "origin", origin],
        [
            "-c",
            "user.email=ci@example.com",
            "-c",
            "user.name=ci",
            "commit",
            "--quiet",
            "--allow-empty",
            "-m",
            "x",
        ],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def _env(planted: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KFP_", "BENCHGATE_", "MLFLOW_"))}
    env.update({name: planted[name] for name in SECRET_VARIABLES})
    env["MLFLOW_TRACKING_USERNAME"] = "ci-bot"
    env["KF_PIPELINES_SA_TOKEN_PATH"] = "/nonexistent"
    env.update(extra)
    return env


def _benchgate(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchgate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _files(*roots: Path, skip: tuple[Path, ...] = ()) -> Iterator[Path]:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not any(path.is_relative_to(s) for s in skip):
                yield path


def _leaks(planted: dict[str, str], texts: dict[str, bytes]) -> list[str]:
    return [
        f"{name} in {where}"
        for where, data in texts.items()
        for name, value in planted.items()
        if value.encode() in data
    ]


@pytest.fixture
def mlflow_store(mlflow_server: str) -> Path:
    return MLFLOW_SERVER_ROOTS[mlflow_server]


def test_planted_secrets_reach_no_file_run_server_or_output(
    checkout: Path, planted: dict[str, str], mlflow_server: str, mlflow_store: Path, tmp_path: Path
) -> None:
    env = _env(planted)
    outputs: dict[str, bytes] = {}

    # A whole gate run, logging to a real MLflow server (it receives the MLflow credentials as headers,
    # which is what they are for, and must store none of them).
    run = _benchgate(
        checkout, env, "run", "--workload", "bg_test_workloads:sleepy", "--steps", "6", "--warmup", "1",
        "--world-sizes", "1", "--no-eval", "--tracking-uri", mlflow_server, "--out", str(tmp_path / "out"),
        "--baseline-dir", str(tmp_path / "baselines"), "--update-baseline",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "out" / "published.json").read_text()).get("mlflow_run_id")
    outputs["run output"] = (run.stdout + run.stderr).encode()

    # The compiled pipeline and components.
    compiled = _benchgate(checkout, env, "compile", "--root", str(tmp_path / "compiled"))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    outputs["compile output"] = (compiled.stdout + compiled.stderr).encode()

    # A submission from the checkout: the repository comes from origin, without the job token.
    fake = FakeKfp(Scenario(token=planted["KFP_TOKEN"]))
    server, url = serve(fake)
    try:
        submitted = _benchgate(
            checkout, _env(planted, KFP_HOST=url), "submit", "--commit", "a" * 40, "--no-wait"
        )
    finally:
        server.shutdown()
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    outputs["submit output"] = (submitted.stdout + submitted.stderr).encode()
    (body,) = fake.created_runs
    assert body["runtime_config"]["parameters"]["repository"] == (
        "https://gitlab-ci-token@gitlab.example.com/team/model.git"
    )
    outputs["KFP request body"] = json.dumps(body).encode()

    # Everything written: the run's directory, the baseline store, the spool and embedded store
    # (.benchgate/ in the checkout), the compiled YAML, and the MLflow server's database and artifacts.
    files = list(_files(tmp_path, mlflow_store, skip=(checkout / ".git",)))
    assert any(p.name == "mlflow.db" for p in files) and any(p.name == "report.html" for p in files)
    assert any(p.suffix == ".yaml" for p in files)
    texts = {str(p): p.read_bytes() for p in files}
    assert not _leaks(planted, {**texts, **outputs})
    # The search would have found one: the checkout's own git config holds the token, and is skipped.
    assert _leaks(planted, {"config": (checkout / ".git" / "config").read_bytes()}) == ["git in config"]


def test_a_tracking_uri_with_credentials_is_refused_before_anything_runs(
    checkout: Path, planted: dict[str, str], tmp_path: Path
) -> None:
    secret = planted["MLFLOW_TRACKING_PASSWORD"]
    for args, env in (
        (["--tracking-uri", f"https://bot:{secret}@mlflow.example.com"], _env(planted)),
        ([], _env(planted, MLFLOW_TRACKING_URI=f"https://bot:{secret}@mlflow.example.com")),
    ):
        result = _benchgate(checkout, env, "run", "--out", str(tmp_path / "out"), *args)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "https://bot:***@mlflow.example.com" in result.stdout + result.stderr
        assert secret not in result.stdout + result.stderr
        assert not (tmp_path / "out").exists()
