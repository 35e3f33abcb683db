"""`benchgate submit` / `make submit` against a FAKE KFP API server (see tests/fake_kfp_server.py).

The fake is the one stand-in of the suite: a KFP API server cannot run here. It speaks the v2beta1 REST
endpoints kfp.Client calls, so everything on our side (kfp.Client, the compiled pipeline package,
the CLI, make) is real.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchgate.errors import ConfigError
from benchgate.kfp.submit import exit_code_for, load_package, run_name_for
from fake_kfp_server import FakeKfp, Scenario, serve

REPO = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "https://github.com/example/trainer.git"


@pytest.fixture
def fake() -> Iterator[tuple[FakeKfp, str]]:
    state = FakeKfp(Scenario())
    server, url = serve(state)
    yield state, url
    server.shutdown()


def submit_cli(
    url: str | None, *args: str, token: str | None = "good-token"
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KFP_", "KF_PIPELINES", "BENCHGATE_"))}
    env["KF_PIPELINES_SA_TOKEN_PATH"] = "/nonexistent"  # never pick up a real in-cluster token
    if url is not None:
        env["KFP_HOST"] = url
    if token is not None:
        env["KFP_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "benchgate", "submit", "--repository", REPOSITORY, "--poll-s", "0.05", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_submit_waits_for_a_passing_run_and_prints_its_url(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    result = submit_cli(url, "--commit", SHA, "--branch", "main", "--param", "world_size_n=4")
    assert result.returncode == 0, result.stdout + result.stderr
    (run_id,) = state.runs
    assert f"{url}/#/runs/details/{run_id}" in result.stdout
    assert "SUCCEEDED" in result.stdout
    # What reached the server is the compiled benchgate pipeline with our arguments.
    (body,) = state.created_runs
    parameters = body["runtime_config"]["parameters"]
    assert parameters["commit"] == SHA and parameters["branch"] == "main" and parameters["world_size_n"] == 4
    assert parameters["repository"] == REPOSITORY
    assert body["pipeline_spec"]["platform_spec"]["platforms"]["kubernetes"]
    assert body["display_name"].startswith(f"benchgate-{SHA[:12]}-")


@pytest.mark.parametrize(
    ("outcome", "code", "message"),
    [
        pytest.param("GATE_FAILED", 1, "regression", id="gate-fail"),
        pytest.param("TASK_FAILED", 3, "failed: bench ws=N", id="bench-crash"),
    ],
)
def test_submit_exit_code_follows_the_run(
    fake: tuple[FakeKfp, str], outcome: str, code: int, message: str
) -> None:
    state, url = fake
    state.scenario.outcome = outcome
    result = submit_cli(url, "--commit", SHA)
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stdout


def test_submit_retried_attaches_to_the_same_run(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    first = submit_cli(url, "--commit", SHA)
    second = submit_cli(url, "--commit", SHA)
    assert first.returncode == second.returncode == 0, second.stdout + second.stderr
    assert state.calls("POST", "/runs") == 1
    assert len(state.experiments) == 1
    assert "attached to existing run" in second.stdout
    # Another commit is another run.
    assert submit_cli(url, "--commit", "f" * 40).returncode == 0
    assert state.calls("POST", "/runs") == 2


def test_submit_wait_is_bounded(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    state.scenario.outcome = "RUNNING"
    result = submit_cli(url, "--commit", SHA, "--timeout-s", "0.5")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "still RUNNING after 0.5 s" in result.stdout


def test_submit_refused_token_exits_2_and_submits_nothing(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    result = submit_cli(url, "--commit", SHA, token="expired")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "refused the credentials: HTTP 401" in result.stderr
    assert "Traceback" not in result.stderr
    assert not state.runs


def test_submit_without_kfp_host_exits_2() -> None:
    result = submit_cli(None, "--commit", SHA)
    assert result.returncode == 2
    assert "KFP_HOST: not set" in result.stderr


def test_submit_to_an_unreachable_host_exits_3() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = submit_cli(f"http://127.0.0.1:{port}", "--commit", SHA)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"cannot reach http://127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_submit_rejects_an_unknown_pipeline_parameter(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    result = submit_cli(url, "--commit", SHA, "--param", "wrold_size_n=4")
    assert result.returncode == 2
    assert "--param: got 'wrold_size_n', not a parameter of the pipeline" in result.stderr
    assert not state.requests


BAD_COMMITS = [
    pytest.param("$(touch {pwned})", id="command-substitution"),
    pytest.param(";touch {pwned}", id="semicolon"),
    pytest.param("`touch {pwned}`", id="backticks"),
    pytest.param("main~1", id="ref-expression"),
    pytest.param("a" * 41, id="41-hex"),
    pytest.param("0123456", id="abbreviated"),
    pytest.param("", id="empty"),
]


@pytest.mark.parametrize("commit", BAD_COMMITS)
def test_bad_commit_is_rejected_before_anything_runs(
    fake: tuple[FakeKfp, str], tmp_path: Path, commit: str
) -> None:
    state, url = fake
    pwned = tmp_path / "pwned"
    result = submit_cli(url, "--commit", commit.format(pwned=pwned))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--commit: got" in result.stderr
    assert not pwned.exists()
    assert not state.requests  # not even a health check


@pytest.mark.parametrize("commit", BAD_COMMITS)
def test_make_submit_passes_commit_as_data_not_shell(
    fake: tuple[FakeKfp, str], tmp_path: Path, commit: str
) -> None:
    state, url = fake
    pwned = tmp_path / "pwned"
    # Under `make test ARGS=...` the outer make's variables would reach this make through MAKEFLAGS.
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS")
    env = {k: v for k, v in os.environ.items() if k not in outer}
    env.update(KFP_HOST=url, KFP_TOKEN="good-token", BENCHGATE_REPOSITORY=REPOSITORY)
    # VENV points make at this interpreter's environment, and -o keeps it from reinstalling it.
    venv = Path(sys.executable).parent.parent
    command = ["make", "-s", "-C", str(REPO), "-o", f"{venv}/.installed", "submit", f"VENV={venv}"]
    result = subprocess.run(
        [*command, f"COMMIT={commit.format(pwned=pwned)}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--commit: got" in result.stderr
    assert not pwned.exists()
    assert not state.requests


def test_run_name_is_stable_and_depends_on_every_argument() -> None:
    arguments = {"commit": SHA, "repository": REPOSITORY, "world_size_n": 8}
    assert run_name_for(arguments) == run_name_for(dict(reversed(list(arguments.items()))))
    assert run_name_for(arguments) != run_name_for({**arguments, "world_size_n": 4})


@pytest.mark.parametrize(
    ("state", "tasks", "code"),
    [
        pytest.param("SUCCEEDED", [("gate", "SUCCEEDED")], 0, id="pass"),
        pytest.param("FAILED", [("compare", "SUCCEEDED"), ("gate (A/B)", "FAILED")], 1, id="after-ab"),
        pytest.param("FAILED", [("bench ws=1", "FAILED"), ("gate", "SKIPPED")], 3, id="crash"),
        pytest.param("CANCELED", [], 3, id="canceled"),
    ],
)
def test_exit_code_for_run_states(state: str, tasks: list[tuple[str, str]], code: int) -> None:
    assert exit_code_for(state, tasks)[0] == code


def test_connection_needs_an_http_url() -> None:
    from benchgate.kfp.submit import connection_from_env

    with pytest.raises(ConfigError, match=r"KFP_HOST: got 'kfp\.example\.com'"):
        connection_from_env({"KFP_HOST": "kfp.example.com"})
    conn = connection_from_env({"KFP_HOST": "https://kfp.example.com/", "KFP_TOKEN": "t"})
    assert conn.host == "https://kfp.example.com" and conn.token == "t"


def test_connection_falls_back_to_the_in_cluster_service_account_token(tmp_path: Path) -> None:
    from benchgate.kfp.submit import connection_from_env

    token = tmp_path / "token"
    token.write_text("sa-token\n")
    env = {"KFP_HOST": "http://ml-pipeline.kubeflow:8888", "KF_PIPELINES_SA_TOKEN_PATH": str(token)}
    assert connection_from_env(env).token == "sa-token"
    assert connection_from_env({**env, "KFP_TOKEN": "explicit"}).token == "explicit"


def test_the_package_loads_as_kfp_itself_would_send_it() -> None:
    """Runs are created from the package loaded once (`load_package`), not re-parsed per run by
    kfp.Client: the body must be exactly what `create_run_from_pipeline_package` builds from it."""
    from kfp.client.client import _extract_pipeline_yaml

    package = REPO / "pipelines" / "benchgate.yaml"
    assert load_package(package) == _extract_pipeline_yaml(str(package)).to_dict()
