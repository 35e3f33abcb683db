"""`benchgate submit --suite` / `make submit SUITE=` against the FAKE KFP API server
(tests/support/fake_kfp_server.py), with a real `mlflow server` where the suite's exit code is read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_kfp_server import FakeKfp, Scenario, serve

from benchgate.config import parse_config
from benchgate.tracking import client as tracking
from benchgate.tracking.suite_record import log_suite
from benchgate.tracking.suite_runs import mark_suite_run

REPO = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "https://github.com/example/trainer.git"
MLFLOW = "http://mlflow.example:5000"

SUITE = """\
[suite]
name = "models"
config = "bench.toml"

[[entries]]
name = "gpt-tiny-fp32"
workload = "benchgate.workloads.gpt:make_workload"
args = {{ size = "tiny" }}
variant = {{ precision = "fp32", batch_size = 8 }}
config = {{ eval = {{ enabled = false }} }}

[[entries]]
name = "gpt-tiny-bf16"
workload = "benchgate.workloads.gpt:make_workload"
args = {{ size = "tiny", hidden = 512 }}
variant = {{ precision = "bf16", compile = true }}
{extra}"""
BENCH_TOML = """\
[bench]
steps = 20
warmup = 3
[tracking]
{uri}experiment = "suites"
"""


def write_suite(tmp_path: Path, extra: str = "", uri: str = MLFLOW) -> Path:
    (tmp_path / "bench.toml").write_text(BENCH_TOML.format(uri=f'uri = "{uri}"\n' if uri else ""))
    path = tmp_path / "suite.toml"
    path.write_text(SUITE.format(extra=extra))
    return path


@pytest.fixture
def fake() -> Iterator[tuple[FakeKfp, str]]:
    state = FakeKfp(Scenario())
    server, url = serve(state)
    yield state, url
    server.shutdown()


def submit_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KFP_", "KF_PIPELINES", "BENCHGATE_"))}
    env.update(KF_PIPELINES_SA_TOKEN_PATH="/nonexistent", KFP_HOST=url, KFP_TOKEN="good-token")
    return subprocess.run(
        [sys.executable, "-m", "benchgate", "submit", "--repository", REPOSITORY, "--poll-s", "0.05", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_submit_suite_sends_one_run_of_the_suite_pipeline_with_the_entries(
    fake: tuple[FakeKfp, str], tmp_path: Path
) -> None:
    state, url = fake
    suite = write_suite(tmp_path)
    result = submit_cli(url, "--commit", SHA, "--suite", str(suite))
    assert result.returncode == 0, result.stdout + result.stderr
    (body,) = state.created_runs
    spec = body["pipeline_spec"].get("pipeline_spec", body["pipeline_spec"])
    assert spec["pipelineInfo"]["name"] == "benchgate-suite"
    assert body["display_name"].startswith("benchgate-suite-models-0123456789ab-")
    parameters = body["runtime_config"]["parameters"]
    assert parameters["suite_name"] == "models" and parameters["commit"] == SHA
    # The suite's config file: its steps and warmup as the named parameters, its tracking URI too.
    assert (parameters["steps"], parameters["warmup"], parameters["mlflow_tracking_uri"]) == (20, 3, MLFLOW)
    assert parameters["config"]["tracking"]["experiment"] == "suites"
    # Each entry one JSON string, its variant expanded as a local suite's: the ints stay ints.
    first, second = (json.loads(text) for text in parameters["entries"])
    assert first == {
        "name": "gpt-tiny-fp32",
        "workload": "benchgate.workloads.gpt:make_workload",
        "workload_args": {"size": "tiny", "batch_size": 8},
        "variant": {"precision": "fp32", "batch_size": 8},
        "config": {"eval": {"enabled": False, "batch_size": 8}, "bench": {"precision": "fp32"}},
    }
    assert second["workload_args"] == {"size": "tiny", "hidden": 512}
    assert second["config"] == {"bench": {"precision": "bf16", "compile": True}}
    # A retry attaches to the same run.
    again = submit_cli(url, "--commit", SHA, "--suite", str(suite))
    assert again.returncode == 0 and "attached to existing run" in again.stdout
    assert state.calls("POST", "/runs") == 1


@pytest.mark.parametrize(
    ("extra", "args", "uri", "named"),
    [
        # An entry a local suite would report as an error: the cluster run is not started for it.
        (
            '\n[[entries]]\nname = "odd"\nworkload = "m:f"\nvariant = { flash = true }\n',
            (),
            MLFLOW,
            "entries[2] 'odd': variant.flash: got True (unknown key; expected one of: precision, compile, "
            "batch_size)",
        ),
        # An entry whose config the env task would refuse, named with its field.
        (
            '\n[[entries]]\nname = "lazy"\nworkload = "m:f"\nconfig = { eval = { enabled = "maybe" } }\n',
            (),
            MLFLOW,
            "entry 'lazy': eval.enabled: got 'maybe'",
        ),
        (
            "",
            ("--param", "gpus_per_node=4"),
            MLFLOW,
            "gpus_per_node: got 4 (a suite runs each entry on one node",
        ),
        ("", (), "", "mlflow_tracking_uri: got '' (a suite on a cluster needs an MLflow server"),
        ("", ("--param", "entries=[]"), MLFLOW, "--param: 'entries' comes from the suite file"),
    ],
)
def test_submit_suite_refuses_what_the_cluster_would_before_anything_is_sent(
    fake: tuple[FakeKfp, str], tmp_path: Path, extra: str, args: tuple[str, ...], uri: str, named: str
) -> None:
    state, url = fake
    result = submit_cli(url, "--commit", SHA, "--suite", str(write_suite(tmp_path, extra, uri)), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert named in " ".join(result.stderr.split()), result.stderr
    assert "Traceback" not in result.stderr
    assert not state.requests


def test_a_failed_suite_gate_exits_with_the_suite_code_logged_in_mlflow(
    fake: tuple[FakeKfp, str], tmp_path: Path, mlflow_server: str
) -> None:
    state, url = fake
    suite = write_suite(tmp_path, uri=mlflow_server)
    started = submit_cli(url, "--commit", SHA, "--suite", str(suite), "--no-wait")
    assert started.returncode == 0, started.stdout + started.stderr
    (run_id,) = state.runs
    # What the suite gate of that KFP run logs: an UNKNOWN entry and a PASS one, exit 4.
    tracker = tracking.connect(
        parse_config({"tracking": {"uri": mlflow_server, "experiment": "suites", "local_dir": str(tmp_path)}})
    )
    entries = [
        {"name": "gpt-tiny-fp32", "workload": "w:f", "args": {}, "variant": {}, "out": "gpt-tiny-fp32",
         "state": "done", "verdict": "UNKNOWN", "exit_code": 4, "error": None, "seconds": 30.0},
        {"name": "gpt-tiny-bf16", "workload": "w:f", "args": {}, "variant": {}, "out": "gpt-tiny-bf16",
         "state": "done", "verdict": "PASS", "exit_code": 0, "error": None, "seconds": 31.0},
    ]  # fmt: skip
    record = {"suite": "models", "suite_file": "KFP run x", "started": "", "entries": entries, "exit_code": 4}
    suite_run = log_suite(tracker, tmp_path, record, 61.0)
    mark_suite_run(tracker, suite_run, run_id, "x", "UNKNOWN")
    state.force(run_id, "FAILED", "GATE_FAILED")
    result = submit_cli(url, "--commit", SHA, "--suite", str(suite))
    assert result.returncode == 4, result.stdout + result.stderr
    assert "the suite ended with exit 4" in result.stdout
    assert state.calls("POST", "/runs") == 1


def test_make_submit_passes_the_suite_file(fake: tuple[FakeKfp, str], tmp_path: Path) -> None:
    state, url = fake
    suite = write_suite(tmp_path)
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS")
    env = {k: v for k, v in os.environ.items() if k not in outer and not k.startswith("BENCHGATE_")}
    env.update(KFP_HOST=url, KFP_TOKEN="good-token", BENCHGATE_REPOSITORY=REPOSITORY)
    venv = Path(sys.executable).parent.parent
    command = ["make", "-s", "-C", str(REPO), "-o", f"{venv}/.installed-run", "submit", f"VENV={venv}"]
    result = subprocess.run(
        [*command, f"COMMIT={SHA}", f"SUITE={suite}", "ARGS=--poll-s 0.05"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (body,) = state.created_runs
    assert body["runtime_config"]["parameters"]["suite_name"] == "models"
