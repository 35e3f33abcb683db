"""`benchgate` as a user runs it: a real subprocess, real torchrun, exit codes and messages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchgate.kit.files import read_json

FAST = ["--steps", "15", "--warmup", "2", "--no-eval", "--no-trace"]


def benchgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchgate", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def benchgate_piped(*args: str, cwd: Path) -> tuple[int, list[tuple[float, str]]]:
    """`benchgate` with its output piped, as CI runs it: the exit code and each line with the seconds
    after the start at which it arrived."""
    started = time.monotonic()
    with subprocess.Popen(
        [sys.executable, "-m", "benchgate", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        lines = [(time.monotonic() - started, line.rstrip("\n")) for line in process.stdout]
        return process.wait(timeout=600), lines


# "[00:19] bench ws=1 started (0/15)", "[00:39] bench ws=1 done 15/15 (19.8 s)" (cli/progress_lines.py)
STAGE_LINE = re.compile(r"\[(\d\d):(\d\d)\] (.+?) (started|done)(?: \d+/\d+)?(?: \(.*\))?")


@pytest.mark.slow
def test_a_whole_gate_run_writes_every_result_and_the_cli_the_browse_hint(
    logged_gate_run: dict[str, Any], tmp_path: Path
) -> None:
    # The session's whole run (conftest.logged_gate_run: the pipeline `run` drives, ws=1 and 2, eval
    # and trace on, promoted): every result file, and the baseline store holding its eval.
    out = logged_gate_run["outcome"].out_dir
    for name in (
        "env.json",
        "config.json",
        "metrics-ws1.json",
        "metrics-ws2.json",
        "eval.json",
        "trace.json",
        "compare.json",
        "compare.md",
    ):
        assert (out / name).is_file(), name
    assert list((out / "trace").glob("*.pt.trace.json.gz"))
    compare = read_json(out / "compare.json")
    names = {c["name"] for c in compare["checks"]}
    assert {"scaling efficiency (1->2)", "perplexity (held-out)", "probe facts accuracy"} <= names
    stored = list((logged_gate_run["tmp"] / "baselines").glob("*/gpt-tiny/eval.json"))
    assert len(stored) == 1
    assert read_json(stored[0])["perplexity"] == read_json(out / "eval.json")["perplexity"]
    # The eval counted its training steps as it went (its stage's markers, relayed into the log).
    log = (out / "logs" / "pipeline.log").read_text()
    eval_markers = log[log.index('"name": "eval"') :]
    assert '"event": "progress", "done": 1, "total": 20' in eval_markers
    assert '"event": "progress", "done": 20, "total": 20' in eval_markers

    # The command itself, piped as in CI, outside any checkout: exit 0, and the hint that serves its
    # local MLflow store (`make ui` serves nothing there).
    returncode, lines = benchgate_piped(
        "run",
        "--workload-arg",
        "size=tiny",
        *FAST,
        "--world-sizes",
        "1",
        "--out",
        str(tmp_path / "out"),
        "--baseline-dir",
        str(tmp_path / "b"),
        cwd=tmp_path,
    )
    stdout = "\n".join(line for _, line in lines)
    assert returncode == 0, stdout
    # Progress came as it happened, not all at once at the end: a stamped line as each stage started and
    # ended, each arriving when its stamp says (lines written and flushed at once), over the whole run.
    stages = [(at, m) for at, line in lines if (m := STAGE_LINE.fullmatch(line))]
    said = [(m[3], m[4]) for _, m in stages]
    for stage in ("env", "bench ws=1", "compare", "publish", "gate"):
        assert said.count((stage, "started")) == said.count((stage, "done")) == 1, stdout
    stamped = [int(m[1]) * 60 + int(m[2]) for _, m in stages]
    arrived = [at for at, _ in stages]
    assert stamped == sorted(stamped), stdout
    assert all(abs((a - arrived[0]) - (s - stamped[0])) <= 2.5 for a, s in zip(arrived, stamped, strict=True))
    bench = [at for at, m in stages if m[3] == "bench ws=1"]
    assert bench[1] - bench[0] >= 2.0, stdout  # a torchrun launch and 17 steps: seconds, not an instant
    assert lines[-1][0] - arrived[0] >= 5.0, stdout
    store = f"sqlite:///{tmp_path / '.benchgate' / 'mlflow' / 'mlflow.db'}"
    browse = next(line for line in stdout.splitlines() if line.startswith("browse: "))
    assert "make ui" not in browse
    assert f"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false {Path(sys.executable).with_name('mlflow')} ui" in browse
    assert f"--backend-store-uri {store} --host 127.0.0.1 --port 5000" in browse
    assert re.search(r"then open http://127\.0\.0\.1:5000/#/experiments/\d+/runs", browse), browse


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["--steps", "0"], 2, "bench.steps: got 0", id="zero-steps"),
        # Too few samples for the loss-slope check: refused at the edge, not after the run.
        pytest.param(["--steps", "2"], 2, "bench.steps: got 2", id="two-steps"),
        # The pipeline runs ws=1 and one ws=N: any other list is refused before anything runs.
        pytest.param(
            ["--world-sizes", "2"], 2, "bench.world_sizes: got [2] (Value error, expected [1]", id="ws-2"
        ),
        pytest.param(["--world-sizes", "1,2,4"], 2, "bench.world_sizes: got [1, 2, 4]", id="ws-three"),
        pytest.param(["--world-sizes", "1,64"], 2, "bench.world_sizes: got 64", id="world-size"),
        pytest.param(["--world-sizes", "one"], 2, "--world-sizes: got 'one'", id="world-size-text"),
        pytest.param(
            ["--workload", "nowhere_mod:make"], 2, "cannot import module 'nowhere_mod'", id="import"
        ),
        pytest.param(
            ["--workload", "bg_test_workloads:raising_factory"], 2, "the factory is broken", id="fac"
        ),
        pytest.param(["--workload-arg", "novalue"], 2, "--workload-arg: got 'novalue'", id="workload-arg"),
        pytest.param(
            ["--workload", "bg_test_workloads:failing", "--world-sizes", "1,2"], 3, "rank 1 failed", id="rank"
        ),
    ],
)
def test_cli_bad_input_and_failures_exit_with_documented_codes(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    result = benchgate(
        "run",
        "--workload",
        "bg_test_workloads:sleepy",
        *FAST,
        "--out",
        str(tmp_path / "out"),
        "--baseline-dir",
        str(tmp_path / "b"),
        *args,
        cwd=tmp_path,
    )
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_cli_config_file_with_bad_tolerance_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "bench.toml"
    config.write_text("[gate.tolerances]\nthroughput_drop_pct = -3\n")
    result = benchgate("run", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 2
    assert "gate.tolerances.throughput_drop_pct: got -3" in result.stderr


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param("[gate.ab]\nsteps = 2\n", "gate.ab.steps: got 2", id="ab-steps"),
        pytest.param("[bench]\nworld_sizes = [2, 4]\n", "bench.world_sizes: got [2, 4]", id="world-sizes"),
        pytest.param("[bench]\ntimeout_s = inf\n", "bench.timeout_s: got inf", id="inf"),
        pytest.param("bench = 3\n", "bench: got 3", id="not-a-table"),
    ],
)
def test_cli_config_file_the_runner_cannot_run_exits_2(tmp_path: Path, document: str, message: str) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(document)
    result = benchgate(
        "run", "--config", str(config), "--steps", "15", "--out", str(tmp_path / "o"), cwd=tmp_path
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "o").exists()


def test_cli_submit_refuses_a_param_the_runner_cannot_run_before_contacting_kfp(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchgate",
            "submit",
            "--commit",
            "a" * 40,
            "--repository",
            "https://example.com/x.git",
            "--param",
            "steps=2",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("KFP_")},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "bench.steps: got 2" in result.stderr
    # Refused before the connection is even read from the environment (KFP_HOST is unset here).
    assert "KFP_HOST" not in result.stderr


def _fake_run(directory: Path, profile: str) -> Path:
    metrics = {
        "schema_version": 1,
        "machine_profile": profile,
        "workload": "w",
        "world_size": 1,
        "precision": "fp32",
        "tokens_per_step_global": 64,
        "memory": {"peak_bytes": 1},
        "samples": {
            "step_time_s": [0.1, 0.11, 0.1],
            "tokens_per_s": [640.0, 581.8, 640.0],
            "loss": [3, 2, 1],
        },
    }
    directory.mkdir(parents=True)
    (directory / "env.json").write_text(json.dumps({"machine_profile": profile}))
    (directory / "metrics-ws1.json").write_text(json.dumps(metrics))
    return directory


def test_cli_compare_refuses_a_baseline_of_another_profile(tmp_path: Path) -> None:
    base = _fake_run(tmp_path / "base", "H100-80GB-HBM3x8_drv550_cu12.4_torch2.4.0_nccl2.21")
    current = _fake_run(tmp_path / "cur", "cpu-X-x2_torch2.13.0")
    result = benchgate("compare", str(current), "--baseline", str(base), cwd=tmp_path)
    assert result.returncode == 2
    assert "never compared" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_compare_reports_a_truncated_baseline_file(tmp_path: Path) -> None:
    base = _fake_run(tmp_path / "base", "cpu-X-x2_torch2.13.0")
    (base / "metrics-ws1.json").write_text('{"schema_version": 1, "samples": [0.1,')
    current = _fake_run(tmp_path / "cur", "cpu-X-x2_torch2.13.0")
    result = benchgate("compare", str(current), "--baseline", str(base), cwd=tmp_path)
    assert result.returncode == 2
    assert "metrics-ws1.json: not valid JSON" in result.stderr


def test_cli_compare_of_identical_runs_without_noise_history_is_unknown_exit_4(tmp_path: Path) -> None:
    base = _fake_run(tmp_path / "base", "cpu-X-x2_torch2.13.0")
    result = benchgate("compare", str(base), "--baseline", str(base), cwd=tmp_path)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "verdict: UNKNOWN (exit 4)" in result.stdout
    assert "run-to-run noise unknown (0 of 3 earlier baseline runs)" in result.stdout
    # Last, what decides it: no A/B ran, so an A/B against a base.
    last = result.stdout.rstrip().splitlines()[-1]
    assert last.startswith("next: the run-to-run noise is not known yet (ws=1)"), last
    assert "`benchgate run --base origin/main`" in last


def test_cli_compare_of_identical_runs_with_quiet_history_passes(tmp_path: Path) -> None:
    base = _fake_run(tmp_path / "base", "cpu-X-x2_torch2.13.0")
    runs = [{"p50": {"1": {"step_time_s": s, "mean_step_time_s": s}}} for s in (0.0995, 0.1, 0.1005)]
    (base / "history.json").write_text(json.dumps({"runs": runs}))
    result = benchgate("compare", str(base), "--baseline", str(base), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verdict: PASS" in result.stdout


def test_cli_env_prints_the_machine_profile(tmp_path: Path) -> None:
    result = benchgate("env", "--out", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0
    profile = read_json(tmp_path / "env.json")["machine_profile"]
    assert f"machine profile: {profile}" in result.stdout


def test_mlflow_ui_hint_is_make_ui_only_in_a_checkout_that_serves_this_store(tmp_path: Path) -> None:
    from benchgate.cli.mlflow_access import mlflow_ui_command
    from benchgate.tracking.view import ui_url

    checkout = Path(__file__).resolve().parents[2]
    recipe = (checkout / "Makefile").read_text().split("\nui:")[1].split("\n\n")[0]
    store = f"sqlite:///{(checkout / '.benchgate' / 'mlflow' / 'mlflow.db').resolve()}"
    runs = f"then open {ui_url('http://127.0.0.1:5000', '7')}"
    assert runs.startswith("then open http://127.0.0.1:5000/#/experiments/7/runs")
    assert mlflow_ui_command(store, "7", checkout) == f"make ui  {runs}"
    # Elsewhere, or another store: the command the Makefile's `ui` target runs, with this store.
    for uri, cwd in ((store, tmp_path), (f"sqlite:///{tmp_path / 'other.db'}", checkout)):
        command = mlflow_ui_command(uri, "7", cwd)
        assert command.endswith(runs) and "make ui" not in command
        for part in (
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false",
            " ui --backend-store-uri",
            "--host 127.0.0.1",
        ):
            assert part in recipe and part in command
        assert f"--backend-store-uri {uri} " in command
    assert mlflow_ui_command(store, None, tmp_path).endswith("--port 5000 --workers 1")
    # A tracking server is browsed where it is served.
    assert mlflow_ui_command("http://mlflow:5000/", "3", tmp_path) == ui_url("http://mlflow:5000/", "3")
