"""`benchgate submit` / `make submit` against a FAKE KFP API server (see tests/support/fake_kfp_server.py).

The fake is the one stand-in of the suite: a KFP API server cannot run here. It speaks the v2beta1 REST
endpoints kfp.Client calls, so everything on our side (kfp.Client, the compiled pipeline package,
the CLI, make) is real.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_kfp_server import FakeKfp, Scenario, serve

from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.api import Connection, KfpApi, KfpRunGone, attempt_number, connection_from_env
from benchgate.kfp.params import MULTI_NODE_PARAMETERS
from benchgate.kfp.run_request import (
    attempt_name,
    build_arguments,
    exit_code_for,
    pipeline_parameter_names,
    run_name_for,
)
from benchgate.kfp.submit import SubmitOutcome, load_package, submit

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
    url: str | None, *args: str, token: str | None = "good-token", namespace: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KFP_", "KF_PIPELINES", "BENCHGATE_"))}
    env["KF_PIPELINES_SA_TOKEN_PATH"] = "/nonexistent"  # never pick up a real in-cluster token
    if url is not None:
        env["KFP_HOST"] = url
    if token is not None:
        env["KFP_TOKEN"] = token
    if namespace is not None:
        env["KFP_NAMESPACE"] = namespace
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


def test_submit_sends_the_gpu_pod_requests_as_quantity_strings(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    result = submit_cli(
        url, "--commit", SHA, "--param", "gpu_cpu_request=16", "--param", "gpu_memory_request=64Gi"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (body,) = state.created_runs
    parameters = body["runtime_config"]["parameters"]
    # 16 reads as a number on the command line; the pipeline's parameter, and KFP's driver, want text.
    assert (parameters["gpu_cpu_request"], parameters["gpu_memory_request"]) == ("16", "64Gi")


def test_submit_refuses_a_request_kfp_could_not_use_before_anything_is_sent(
    fake: tuple[FakeKfp, str],
) -> None:
    state, url = fake
    result = submit_cli(url, "--commit", SHA, "--param", "gpu_memory_request=32GB")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gpu_memory_request: got '32GB' (expected a Kubernetes quantity above zero" in result.stderr
    assert not state.requests


def test_submit_runs_a_world_size_beyond_gpus_per_node_across_nodes(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    result = submit_cli(url, "--commit", SHA, "--param", "world_size_n=16", "--param", "gpus_per_node=8")
    assert result.returncode == 0, result.stdout + result.stderr
    (body,) = state.created_runs
    parameters = body["runtime_config"]["parameters"]
    # The pipeline's condition compares multi_node with a constant: submit computes it.
    assert (parameters["world_size_n"], parameters["gpus_per_node"], parameters["multi_node"]) == (
        16,
        8,
        True,
    )


def test_submit_refuses_a_multi_node_world_size_of_part_nodes_before_anything_is_sent(
    fake: tuple[FakeKfp, str],
) -> None:
    state, url = fake
    result = submit_cli(url, "--commit", SHA, "--param", "world_size_n=12", "--param", "gpus_per_node=8")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "world_size_n: got 12, not a multiple of gpus_per_node=8" in result.stderr
    assert not state.requests


def multi_node_arguments_of(**parameters: Any) -> dict[str, Any]:
    """What `benchgate submit --param` makes of `parameters` (only the multi-node ones and ws)."""
    arguments = build_arguments(SHA, REPOSITORY, "", parameters, pipeline_parameter_names())
    return {k: v for k, v in arguments.items() if k in ("world_size_n", *MULTI_NODE_PARAMETERS)}


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        # Without gpus_per_node nothing changes (nor does the run's name): one node, as always.
        ({"world_size_n": 16}, {"world_size_n": 16}),
        (
            {"world_size_n": 16, "gpus_per_node": 8},
            {"world_size_n": 16, "gpus_per_node": 8, "multi_node": True},
        ),
        (
            {"world_size_n": 8, "gpus_per_node": 8},
            {"world_size_n": 8, "gpus_per_node": 8, "multi_node": False},
        ),
        # An explicit multi_node wins; false keeps a large world size on one (large) node.
        ({"world_size_n": 16, "multi_node": False}, {"world_size_n": 16, "multi_node": False}),
        ({"world_size_n": 16, "multi_node": True}, {"world_size_n": 16, "multi_node": True}),
        (
            {"world_size_n": 32, "gpus_per_node": 4, "trainer_runtime": "torch-rdma"},
            {"world_size_n": 32, "gpus_per_node": 4, "trainer_runtime": "torch-rdma", "multi_node": True},
        ),
    ],
)
def test_multi_node_is_set_where_the_world_size_exceeds_gpus_per_node(
    parameters: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert multi_node_arguments_of(**parameters) == expected


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"gpus_per_node": 0}, "gpus_per_node: got 0 (expected an integer >= 1"),
        ({"gpus_per_node": "8"}, "gpus_per_node: got '8' (expected an integer >= 1"),
        ({"gpus_per_node": True}, "gpus_per_node: got True (expected an integer >= 1"),
        ({"multi_node": "yes"}, "multi_node: got 'yes' (expected true or false)"),
        ({"multi_node": 1}, "multi_node: got 1 (expected true or false)"),
        ({"trainer_runtime": ""}, "trainer_runtime: got '' (expected the name of a ClusterTrainingRuntime"),
        # The default world size, 8, fits the default node of 8 GPUs.
        ({"multi_node": True}, "multi_node: got true with world_size_n 8 (a run across nodes needs a world"),
        (
            {"multi_node": True, "world_size_n": 4, "gpus_per_node": 8},
            "multi_node: got true with world_size_n 4",
        ),
        ({"world_size_n": 12, "gpus_per_node": 8}, "world_size_n: got 12, not a multiple of gpus_per_node=8"),
    ],
)
def test_bad_multi_node_parameters_are_refused_naming_the_parameter_and_value(
    parameters: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        multi_node_arguments_of(**parameters)
    assert str(raised.value).startswith(message), str(raised.value)


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
    command = ["make", "-s", "-C", str(REPO), "-o", f"{venv}/.installed-run", "submit", f"VENV={venv}"]
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
    from benchgate.kfp.api import connection_from_env

    with pytest.raises(ConfigError, match=r"KFP_HOST: got 'kfp\.example\.com'"):
        connection_from_env({"KFP_HOST": "kfp.example.com"})
    conn = connection_from_env({"KFP_HOST": "https://kfp.example.com/", "KFP_TOKEN": "t"})
    assert conn.host == "https://kfp.example.com" and conn.token == "t"


def test_connection_falls_back_to_the_in_cluster_service_account_token_read_at_each_use(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    env = {"KFP_HOST": "http://ml-pipeline.kubeflow:8888", "KF_PIPELINES_SA_TOKEN_PATH": str(token)}
    conn = connection_from_env(env)
    assert conn.bearer() == "sa-token"
    token.write_text("rotated\n")  # the kubelet rotates a projected token: the next use reads the new one
    assert conn.bearer() == "rotated"
    explicit = connection_from_env({**env, "KFP_TOKEN": "explicit"})
    assert explicit.bearer() == "explicit" and explicit.token_file is None


def test_a_token_file_rotated_under_a_client_is_read_again(fake: tuple[FakeKfp, str], tmp_path: Path) -> None:
    state, url = fake
    token = tmp_path / "token"
    token.write_text("good-token\n")
    api = KfpApi(Connection(url, None, url, token_file=token))
    experiment_id = api.experiment_id("benchgate")
    # KFP starts refusing the old token; the new one is in the file when its refusal arrives.
    state.scenario.token = "next-token"
    state.scenario.on_unauthorized = lambda: token.write_text("next-token\n")
    assert api.find_run(experiment_id, "no-such-run") is None  # one 401, then the call with the new token
    assert state.scenario.on_unauthorized is None


def test_a_kfp_that_accepts_and_never_answers_times_out(fake: tuple[FakeKfp, str]) -> None:
    # Without a read bound the call would wait as long as the server does (here 20 s; forever on a
    # wedged proxy), holding a thread of the controller's executor.
    state, url = fake
    api = KfpApi(Connection(url, "good-token", url), read_timeout_s=0.5)
    state.scenario.get_delay_s = 20.0
    started = time.monotonic()
    with pytest.raises(RunFailedError, match=r"lost connection|timed out"):
        api.run_state("some-run")
    assert time.monotonic() - started < 10  # one read timeout; a timed-out read is not retried
    assert state.calls("GET", "/runs/some-run") == 1


def test_a_run_kfp_does_not_have_is_gone_not_unavailable(fake: tuple[FakeKfp, str]) -> None:
    # KFP's 404 for the run itself: waiting cannot bring it back (the controller fails the run once
    # it stays gone, and a delete has nothing to terminate).
    _, url = fake
    api = KfpApi(Connection(url, "good-token", url))
    with pytest.raises(KfpRunGone, match="has no run no-such-run"):
        api.run_state("no-such-run")
    assert api.terminate_run("no-such-run") is False


@pytest.mark.parametrize("namespace", [None, "team-a"])
def test_an_experiment_created_meanwhile_by_another_client_is_used(
    fake: tuple[FakeKfp, str], namespace: str | None
) -> None:
    state, url = fake
    state.scenario.multi_user = namespace is not None
    state.scenario.experiment_races = 1  # another client creates it between this one's look and create
    api = KfpApi(Connection(url, "good-token", url))
    experiment_id = api.experiment_id("benchgate", namespace)
    (experiment,) = state.experiments.values()  # the other client's, and no second one
    assert experiment_id == experiment["experiment_id"] and state.scenario.experiment_races == 0
    assert experiment.get("namespace") == namespace
    assert api.experiment_id("benchgate", namespace) == experiment_id  # found by the look from now on


def test_submit_on_a_multi_user_kfp_files_the_run_in_kfp_namespace(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    state.scenario.multi_user = True
    refused = submit_cli(url, "--commit", SHA, "--no-wait")
    assert refused.returncode == 2 and "KFP_NAMESPACE: not set" in refused.stderr, refused.stderr
    assert state.calls("POST", "/runs") == 0
    done = submit_cli(url, "--commit", SHA, "--no-wait", namespace="team-a")
    assert done.returncode == 0, done.stdout + done.stderr
    (experiment,) = state.experiments.values()
    (run,) = state.runs.values()
    assert experiment["namespace"] == "team-a" and run["experiment_id"] == experiment["experiment_id"]


def test_the_package_loads_as_kfp_itself_would_send_it() -> None:
    """Runs are created from the package loaded once (`load_package`), not re-parsed per run by
    kfp.Client: the body must be exactly what `create_run_from_pipeline_package` builds from it."""
    from kfp.client.client import _extract_pipeline_yaml

    package = REPO / "pipelines" / "benchgate.yaml"
    assert load_package(package) == _extract_pipeline_yaml(str(package)).to_dict()


# --- attempts: a failed run is reported, `--rerun` starts the next attempt ---------------------------


def _connection(url: str) -> Connection:
    return connection_from_env({"KFP_HOST": url, "KFP_TOKEN": "good-token"})


def _submit_here(url: str, rerun: bool = False, wait: bool = True, **arguments: Any) -> SubmitOutcome:
    """The same `submit` the CLI calls, in this process (a CLI process costs seconds of imports)."""
    return submit(
        {"commit": SHA, "repository": REPOSITORY, **arguments},
        _connection(url),
        wait=wait,
        poll_s=0.01,
        timeout_s=30,
        say=lambda _: None,
        rerun=rerun,
    )


def _names(fake: FakeKfp) -> list[str]:
    return [body["display_name"] for body in fake.created_runs]


def test_a_retry_after_a_failed_run_reports_it_and_exits_3(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    state.scenario.outcome = "TASK_FAILED"
    first = _submit_here(url)
    assert (first.state, first.exit_code) == ("FAILED", 3)
    polls = state.polls[first.run_id]
    result = submit_cli(url, "--commit", SHA)
    assert result.returncode == 3, result.stdout + result.stderr
    out = " ".join(result.stdout.split())  # rich wraps long lines
    assert f"found run {first.run_name}: {first.url}" in out
    assert f"run {first.run_name}: FAILED: attempt 1 (run id {first.run_id}):" in out
    assert "the run ended FAILED (failed: bench ws=N) before this call; not waited on again" in out
    assert f"Pass --rerun (make submit ARGS=--rerun) to start attempt 2: {first.run_name}-attempt-2" in out
    assert "Traceback" not in result.stderr
    # Without --wait the same: nothing will come of that run.
    no_wait = _submit_here(url, wait=False)
    assert (no_wait.run_id, no_wait.state, no_wait.exit_code) == (first.run_id, "FAILED", 3)
    assert _names(state) == [first.run_name]  # nothing new submitted
    assert state.polls[first.run_id] == polls + 2  # one look each (its failed task), no waiting


def test_rerun_starts_attempt_2_and_a_retried_rerun_attaches_to_it(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    state.scenario.outcome = "TASK_FAILED"
    first = _submit_here(url)
    base = first.run_name
    state.force(first.run_id, "FAILED", "TASK_FAILED")  # it stays failed; the runs after it never end
    state.scenario.outcome = "RUNNING"
    started = submit_cli(url, "--commit", SHA, "--rerun", "--no-wait")
    assert started.returncode == 0, started.stdout + started.stderr
    assert _names(state) == [base, f"{base}-attempt-2"]
    assert f"submitted run {base}-attempt-2" in started.stdout
    # The same --rerun again, in another process, while attempt 2 runs: attached, not attempt 3.
    retried = submit_cli(url, "--commit", SHA, "--rerun", "--no-wait")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    out = " ".join(retried.stdout.split())
    assert f"attached to existing run {base}-attempt-2" in out
    assert "--rerun starts a new attempt only after one that failed" in out
    assert _names(state) == [base, f"{base}-attempt-2"]
    # A plain retry follows the latest attempt too (not the failed first one).
    state.force(_run_id(state, f"{base}-attempt-2"), "SUCCEEDED")
    plain = _submit_here(url)
    assert (plain.run_name, plain.state, plain.exit_code) == (f"{base}-attempt-2", "SUCCEEDED", 0)


def _run_id(fake: FakeKfp, name: str) -> str:
    (run_id,) = [run_id for run_id, run in fake.runs.items() if run["display_name"] == name]
    return run_id


def test_rerun_counts_on_from_the_highest_attempt(fake: tuple[FakeKfp, str]) -> None:
    state, url = fake
    state.scenario.outcome = "TASK_FAILED"
    base = _submit_here(url).run_name
    second = _submit_here(url, rerun=True)
    assert (second.run_name, second.state, second.reused) == (f"{base}-attempt-2", "FAILED", False)
    third = _submit_here(url, rerun=True, wait=False)
    assert (third.run_name, third.reused) == (f"{base}-attempt-3", False)
    # Attempt 3 is still running: --rerun attaches to it.
    state.force(third.run_id, "RUNNING")
    again = _submit_here(url, rerun=True, wait=False)
    assert (again.run_id, again.reused) == (third.run_id, True)
    # Attempt 3 fails too; attempt 2 is gone from the listing (deleted): the next is still 4.
    state.force(third.run_id, "CANCELED", "CANCELED")
    del state.runs[second.run_id]
    fourth = _submit_here(url, rerun=True, wait=False)
    assert fourth.run_name == f"{base}-attempt-4"
    assert _names(state) == [base, *(f"{base}-attempt-{n}" for n in (2, 3, 4))]


@pytest.mark.parametrize(
    ("kfp_state", "outcome", "new_attempt"),
    [
        pytest.param("FAILED", "TASK_FAILED", True, id="failed"),
        pytest.param("FAILED", "GATE_FAILED", True, id="regression"),
        pytest.param("CANCELED", "CANCELED", True, id="canceled"),
        pytest.param("CANCELING", "CANCELED", True, id="canceling"),
        pytest.param("SKIPPED", "SKIPPED", True, id="skipped"),
        pytest.param("SUCCEEDED", "SUCCEEDED", False, id="succeeded"),
        pytest.param("RUNNING", "RUNNING", False, id="running"),
        pytest.param("PAUSED", "RUNNING", False, id="paused"),
    ],
)
def test_rerun_starts_a_new_attempt_only_after_one_that_ended_without_passing(
    fake: tuple[FakeKfp, str], kfp_state: str, outcome: str, new_attempt: bool
) -> None:
    state, url = fake
    first = _submit_here(url, wait=False)
    state.force(first.run_id, kfp_state, outcome)
    rerun = _submit_here(url, rerun=True, wait=False)
    assert rerun.reused is not new_attempt
    assert rerun.run_name == (f"{first.run_name}-attempt-2" if new_attempt else first.run_name)


def test_a_retry_after_a_regression_reports_the_verdict_again(fake: tuple[FakeKfp, str]) -> None:
    # A FAILED gate is the gate's answer (FAIL or UNKNOWN), not a failed attempt: the retry says exit 1
    # as the first call did; measuring again takes --rerun.
    state, url = fake
    state.scenario.outcome = "GATE_FAILED"
    first = _submit_here(url)
    assert first.exit_code == 1
    result = submit_cli(url, "--commit", SHA)
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert f"attached to existing run {first.run_name}" in out and "--rerun measures again" in out
    assert _names(state) == [first.run_name]


def test_the_attempt_names_are_the_same_in_every_process() -> None:
    arguments = {
        "commit": SHA,
        "repository": REPOSITORY,
        "tolerances": {"throughput_drop_pct": 3, "memory_increase_pct": 20},
        "config": {"gate": {"ab": {"max_rounds": 9, "min_rounds": 4}}, "bench": {"timeout_s": 90}},
        "gpu_tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
    }
    here = [attempt_name(run_name_for(arguments), n) for n in (1, 2, 3)]
    code = (
        "import json, sys; from benchgate.kfp.run_request import attempt_name, run_name_for; "
        "a = json.loads(sys.argv[1]); a = dict(reversed(list(a.items()))); "
        "print(json.dumps([attempt_name(run_name_for(a), n) for n in (1, 2, 3)]))"
    )
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(arguments)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == here
    assert here[1] == f"{here[0]}-attempt-2" and here[2] == f"{here[0]}-attempt-3"


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("B", 1),
        ("B-attempt-2", 2),
        ("B-attempt-10", 10),
        ("B-attempt-1", None),
        ("B-attempt-02", None),
        ("B-attempt-2-x", None),
        ("xB-attempt-2", None),
        ("B-attempt-", None),
    ],
)
def test_attempt_number_reads_only_our_names(name: str, number: int | None) -> None:
    base = "benchgate-0123456789ab-1a2b3c4d5e"
    assert attempt_number(base, name.replace("B", base)) == number


def test_the_latest_attempt_is_found_across_pages(fake: tuple[FakeKfp, str]) -> None:
    # KFP pages its listings; the highest attempt may be on any page. 105 runs, 100 to a page.
    state, url = fake
    api = KfpApi(_connection(url))
    experiment_id = api.experiment_id("benchgate")
    spec = load_package(REPO / "pipelines" / "benchgate.yaml")
    base = run_name_for({"commit": SHA, "repository": REPOSITORY})
    for number in range(1, 106):
        api.create_run(spec, {"commit": SHA}, attempt_name(base, number), experiment_id)
    api.create_run(spec, {"commit": SHA}, f"{base}-attempt-999-copy", experiment_id)  # not an attempt
    latest = api.latest_attempt(experiment_id, base)
    assert latest is not None and (latest.number, latest.name) == (105, f"{base}-attempt-105")
    assert latest.state == "PENDING"
    assert state.calls("GET", "/runs") == 2
