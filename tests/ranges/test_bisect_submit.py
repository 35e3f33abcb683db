"""`benchgate bisect --submit`: the whole bisection as one run of the `benchgate-bisect` pipeline.

The CLI against the FAKE KFP server (tests/support/fake_kfp_server.py: a KFP cluster cannot run here): what it
sends, that a second identical submit attaches, that bad input is refused before anything is sent,
and `--wait` reading the result from the real MLflow server. Then the pipeline's one task for real,
through kfp.local, on a file:// repository: a full clone, the bisect under torchrun, bisect.json in the
task's output and the MLflow run tagged with the KFP run id; and the committed bisect.yaml's GPU settings."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fake_kfp_server import FakeKfp, Scenario, serve
from stack_repo import stack_history
from typer.testing import CliRunner, Result

from benchgate.cli.main import app
from benchgate.kit.files import read_json, write_json

REPO = Path(__file__).resolve().parents[2]
REPOSITORY = "https://github.com/example/trainer.git"
# As tests/ranges/test_bisect.py: small A/B rounds that decide a doubling of the layers in 2-3 rounds.
CONFIG = (
    "[gate.tolerances]\nthroughput_drop_pct = 30.0\n"
    "[gate.ab]\nsteps = 60\nwarmup = 2\nmin_rounds = 2\nmax_rounds = 3\nmin_measured_s = 0\n"
)


@pytest.fixture
def fake_kfp() -> Iterator[tuple[FakeKfp, str]]:
    state = FakeKfp(Scenario(polls_until_done=1))
    server, url = serve(state)
    yield state, url
    server.shutdown()


@pytest.fixture
def history(repo: Path) -> list[str]:
    """Three commits of the `repo` fixture, the last doubling the layers; bisect.toml beside them."""
    commits = stack_history(repo, [12, 12, 24])
    experiment = f"bisect-submit-{uuid.uuid4().hex[:8]}"
    (repo / "bisect.toml").write_text(f'{CONFIG}[tracking]\nexperiment = "{experiment}"\n')
    return commits


def bisect(repo: Path, url: str, *args: str, monkeypatch: pytest.MonkeyPatch) -> Result:
    """`benchgate bisect --submit` in this process (typer's CliRunner), from inside `repo`."""
    monkeypatch.chdir(repo)
    env: dict[str, str | None] = {"KFP_HOST": url, "KFP_TOKEN": "good-token", "COLUMNS": "500"}
    env["KF_PIPELINES_SA_TOKEN_PATH"] = "/nonexistent"
    env |= dict.fromkeys(("BENCHGATE_REPOSITORY", "KFP_EXPERIMENT", "MLFLOW_TRACKING_URI"))
    command = ["bisect", "--workload", "stackwork:make_workload", "--config", "bisect.toml", *args]
    return CliRunner().invoke(app, command, env=env)


def test_submit_sends_one_bisect_run_of_full_shas_and_a_second_submit_attaches(
    repo: Path, history: list[str], fake_kfp: tuple[FakeKfp, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = fake_kfp
    args = ["--good", "main~2", "--bad", "main", "--submit", "--repository", REPOSITORY]
    args += ["--workload-arg", "width=256", "--world-size", "2"]
    first = bisect(repo, url, *args, monkeypatch=monkeypatch)
    assert first.exit_code == 0, first.output
    (body,) = state.created_runs
    assert body["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "benchgate-bisect"
    parameters = body["runtime_config"]["parameters"]
    assert parameters == {
        "good": history[0],  # the refs resolved here, to the full SHAs the pod bisects
        "bad": history[2],
        "repository": REPOSITORY,
        "workload": "stackwork:make_workload",
        "workload_args": '{"width": 256}',
        "world_size": 2,
        "config": (repo / "bisect.toml").read_text(),
    }
    (run_id,) = state.runs
    assert f"submitted run benchgate-bisect-{history[0][:8]}-{history[2][:8]}-" in first.stdout
    assert f"{url}/#/runs/details/{run_id}" in first.stdout
    assert "bisect.json will be in its output" in first.stdout
    assert "the same command with --wait follows the run" in first.stdout
    assert f"a run of kind bisect tagged benchgate.kfp_run_id={run_id}" in first.stdout

    again = bisect(repo, url, *args, monkeypatch=monkeypatch)
    assert again.exit_code == 0, again.output
    assert state.calls("POST", "/runs") == 1
    assert f"attached to existing run {body['display_name']}" in again.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["--good", "main", "--bad", "main~2", "--repository", REPOSITORY],
            "--good: got 'main'",
            id="reversed",
        ),
        pytest.param(
            ["--good", "nope", "--bad", "main", "--repository", REPOSITORY],
            "--good: got 'nope', which names no commit",
            id="unknown-ref",
        ),
        pytest.param(
            ["--good", "main~2", "--bad", "main"], "--repository: required with --submit", id="no-url"
        ),
        pytest.param(
            [
                "--good",
                "main~2",
                "--bad",
                "main",
                "--repository",
                REPOSITORY,
                "--tracking-uri",
                "sqlite:///x.db",
            ],
            "tracking.uri: got 'sqlite:///x.db', a store on this machine's disk",
            id="local-store",
        ),
        pytest.param(
            ["--good", "main~2", "--bad", "main", "--repository", REPOSITORY, "--wait"],
            "--tracking-uri: none given, nor MLFLOW_TRACKING_URI",
            id="wait-without-server",
        ),
    ],
)
def test_bad_input_exits_2_before_anything_is_sent(
    repo: Path,
    history: list[str],
    fake_kfp: tuple[FakeKfp, str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    expected: str,
) -> None:
    state, url = fake_kfp
    result = bisect(repo, url, *args, "--submit", monkeypatch=monkeypatch)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert state.requests == []


@pytest.mark.slow
@pytest.mark.serial
# kfp.local runs the task in this environment, which is the point; it warns of the image and the GPUs.
@pytest.mark.filterwarnings(
    "ignore:.*non-Python base image.*", "ignore:.*no effect in the current local runner.*"
)
def test_the_pipeline_task_bisects_a_full_clone_and_wait_reads_its_mlflow_run(
    repo: Path,
    history: list[str],
    mlflow_server: str,
    tmp_path: Path,
    fake_kfp: tuple[FakeKfp, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kfp import local

    from benchgate.config import load_config
    from benchgate.kfp.bisect.pipeline import bisect_pipeline
    from benchgate.tracking.bisection import log_bisection, logged_bisection
    from benchgate.tracking.client import TAG_KFP_RUN_ID, TAG_KIND, connect

    root = tmp_path / "pipeline-root"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True)
    config = (repo / "bisect.toml").read_text()
    bisect_pipeline(
        good=history[1],
        bad=history[2],
        repository=repo.as_uri(),
        workload="stackwork:make_workload",
        config=config,
        mlflow_tracking_uri=mlflow_server,
    )
    (results,) = root.glob("*/bisect/results")
    record = read_json(results / "bisect.json")
    assert record["status"] == "CULPRIT" and record["culprit"]["sha"] == history[2]
    assert record["culprit"]["vs_good"]["status"] == "FAIL"
    assert (results / record["steps"][0]["ab_json"]).is_file()
    kfp_run_id = record["kfp_run_id"]
    assert kfp_run_id and not kfp_run_id.startswith("{{")

    tracker = connect(load_config(repo / "bisect.toml", {"tracking.uri": mlflow_server}))
    found = logged_bisection(tracker, kfp_run_id)
    assert found is not None
    run_id, logged = found
    # The artifact is bisect.json as the bisect task wrote it; the bisect task (user code, no MLflow
    # credential) did not log it, the `log bisection` task after it did.
    assert logged == record and "tracking" not in record
    (logged_by,) = root.glob("*/log-bisection/executor_output.json")
    assert run_id in logged_by.read_text()
    tags = tracker.client.get_run(run_id).data.tags
    assert tags[TAG_KIND] == "bisect" and tags[TAG_KFP_RUN_ID] == kfp_run_id

    # `--wait` against the (fake) cluster: the run it submits succeeds, and its bisection is this one, as
    # the task logs it, its KFP run id that of the fake's run (the only field changed).
    state, url = fake_kfp
    args = ["--good", history[1], "--bad", history[2], "--submit", "--repository", REPOSITORY]
    args += ["--tracking-uri", mlflow_server]
    submitted = bisect(repo, url, *args, monkeypatch=monkeypatch)
    assert submitted.exit_code == 0, submitted.output
    (fake_run_id,) = state.runs
    logged_json = tmp_path / "logged" / "bisect.json"
    write_json(logged_json, logged | {"kfp_run_id": fake_run_id})
    mlflow_run = log_bisection(tracker, logged | {"kfp_run_id": fake_run_id}, logged_json)
    waited = bisect(repo, url, *args, "--wait", "--poll-s", "0.01", monkeypatch=monkeypatch)
    assert waited.exit_code == 1, waited.output
    assert state.calls("POST", "/runs") == 1  # attached, then followed to SUCCEEDED
    culprit = record["culprit"]
    assert f"culprit: {history[2]}" in waited.stdout
    assert "subject: commit 2: 24 layers" in waited.stdout
    assert f"vs good {history[1][:12]}: FAIL {culprit['vs_good']['change_pct']:+.1f}%" in waited.stdout
    assert f"MLflow run {mlflow_run}" in waited.stdout
    # A run that failed on the cluster: exit 3, whatever MLflow holds.
    state.force(fake_run_id, "FAILED", "TASK_FAILED")
    failed = bisect(repo, url, *args, "--wait", "--poll-s", "0.01", monkeypatch=monkeypatch)
    assert failed.exit_code == 3, failed.output
    assert "FAILED" in failed.stderr


def test_the_committed_bisect_pipeline_runs_one_uncached_task_on_the_gpu_pool() -> None:
    from benchgate.kfp.bisect.pipeline import BISECT_PIPELINE_FILE

    spec, platform = yaml.safe_load_all((REPO / BISECT_PIPELINE_FILE).read_text(encoding="utf-8"))
    assert spec["pipelineInfo"]["name"] == "benchgate-bisect"
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"bisect", "log-bisection"}
    task = tasks["bisect"]
    assert task["taskInfo"]["name"] == "bisect" and not task["cachingOptions"].get("enableCache", False)
    assert task["inputs"]["parameters"]["kfp_run_id"]["runtimeValue"]["constant"] == "{{$.pipeline_job_uuid}}"
    executor = task["componentRef"]["name"].replace("comp-", "exec-")
    accelerator = spec["deploymentSpec"]["executors"][executor]["container"]["resources"]["accelerator"]
    # As the gate pipeline's GPU tasks: the count and type from parameters, the pool's selector and
    # tolerations; no MLflow credential (it runs the commits' code).
    assert "pipelinechannel--world_size" in accelerator["resourceCount"]
    assert "pipelinechannel--accelerator_type" in accelerator["resourceType"]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    k8s = executors[executor]
    assert k8s["nodeSelector"]["nodeSelectorJson"]["componentInputParameter"] == "gpu_node_selector"
    assert k8s["tolerations"][0]["tolerationJson"]["componentInputParameter"] == "gpu_tolerations"
    assert "secretAsEnv" not in k8s
    # The task that logs the bisection runs benchgate's code only, uncached, and holds the credential.
    logger = tasks["log-bisection"]
    assert not logger["cachingOptions"].get("enableCache", False)
    secret = executors["exec-log-bisection"]["secretAsEnv"][0]
    assert secret["optional"] is True
    assert secret["secretNameParameter"]["componentInputParameter"] == "mlflow_secret"
