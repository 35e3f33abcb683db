"""The workload contract is checked by the pipeline's first task (env), before any bench: a breach fails
the run with exit 2 within seconds, naming the member and the value.

The workloads are real ones that break one rule each (tests/support/bg_test_workloads.py). One case goes
through `benchgate run` as a user runs it; the others call the env task's function itself, as its component
does.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchgate.config import parse_config
from benchgate.errors import BadInputError
from benchgate.kfp.params import parameters_from_config
from benchgate.kfp.task_harness import ERROR_FILE
from benchgate.kfp.tasks import env_task
from benchgate.kit.files import read_json
from benchgate.measure.launch import stage_bench

FAST = ["--steps", "15", "--warmup", "2", "--world-sizes", "1", "--no-eval", "--no-trace", "--no-tracking"]


def test_cli_refuses_a_loss_of_shape_1_in_the_env_task_before_any_bench(tmp_path: Path) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchgate",
            "run",
            "--workload",
            "bg_test_workloads:loss_shape_one",
            *FAST,
            "--out",
            str(out),
            "--baseline-dir",
            str(tmp_path / "baselines"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "bench.workload: bg_test_workloads:loss_shape_one: workload member `loss` has shape [1]; "
        "expected a scalar (shape [])" in result.stderr
    )
    assert "Traceback" not in result.stdout + result.stderr
    # The env task failed, so no bench task ran: no metrics anywhere, and no bench task's directory in
    # the pipeline run (kfp.local makes one per task it starts).
    assert not list(tmp_path.rglob("metrics-ws*.json"))
    (run_dir,) = (out / "pipeline").iterdir()
    tasks = sorted(p.name for p in run_dir.iterdir() if p.is_dir())
    assert tasks == ["capture-env"], tasks
    assert "workload member `loss`" in read_json(run_dir / "capture-env" / ERROR_FILE)["message"]
    # Seconds: the interpreter, kfp.local and one task process importing torch for one tiny step (5-9 s
    # on the shared 2-core test host, where the same run with a good workload takes ~30 s, and this
    # one used to fail only after its bench, with exit 3). The bound leaves room for a loaded host.
    assert elapsed < 60, elapsed


def _env_task(tmp_path: Path, workload: str, workload_args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Run the env task's function as its component does; returns its exit code and error.json."""
    config = parse_config(
        {
            "bench": {"workload": workload, "workload_args": workload_args, "world_sizes": [1]},
            "eval": {"enabled": False},
            "gate": {"baseline_dir": str(tmp_path / "baselines")},
            "tracking": {
                "enabled": False,
                "local_dir": str(tmp_path / "m"),
                "spool_dir": str(tmp_path / "s"),
            },
        }
    )
    setup = tmp_path / "capture-env" / "setup"
    with pytest.raises(SystemExit) as exited:
        env_task(parameters_from_config(config, [1]), "", "", "", "", "{{id}}", "{{name}}", str(setup))
    return int(str(exited.value.code)), read_json(setup.parent / ERROR_FILE)


@pytest.mark.parametrize(
    ("workload", "args", "expected"),
    [
        pytest.param(
            "bg_test_workloads:loss_shape_one",
            {},
            "workload member `loss` has shape [1]; expected a scalar (shape [])",
            id="loss-shape-1",
        ),
        pytest.param(
            "bg_test_workloads:flops_as_text",
            {},
            "workload member `flops_per_token()` returned '6N' (str)",
            id="flops-per-token-str",
        ),
        pytest.param(
            "bg_test_workloads:tokens_per_step_bool",
            {},
            "workload member `tokens_per_step` is True (bool); expected an int > 0",
            id="tokens-per-step-true",
        ),
        pytest.param(
            "bg_test_workloads:named",
            {"name": 'gpt"tiny'},
            "workload member `name` is 'gpt\"tiny'",
            id="quote",
        ),
        pytest.param(
            "bg_test_workloads:named", {"name": "../gpt"}, "workload member `name` is '../gpt'", id="slash"
        ),
    ],
)
def test_env_task_refuses_a_contract_breach_with_exit_2(
    tmp_path: Path, workload: str, args: dict[str, Any], expected: str
) -> None:
    started = time.monotonic()
    code, error = _env_task(tmp_path, workload, args)
    assert code == 2
    assert error["type"] == "WorkloadError" and error["exit_code"] == 2
    assert error["message"].startswith(f"bench.workload: {workload}: ")
    assert expected in error["message"]
    assert time.monotonic() - started < 30


def test_env_task_passes_a_good_workload_after_one_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = parse_config(
        {
            "bench": {"workload": "bg_test_workloads:sleepy", "world_sizes": [1]},
            "eval": {"enabled": False},
            "tracking": {
                "enabled": False,
                "local_dir": str(tmp_path / "m"),
                "spool_dir": str(tmp_path / "s"),
            },
        }
    )
    setup = tmp_path / "capture-env" / "setup"
    env_task(parameters_from_config(config, [1]), "", "", "", "", "{{id}}", "{{name}}", str(setup))
    assert (setup / "config.json").is_file() and (setup / "env.json").is_file()
    assert not (setup.parent / ERROR_FILE).exists()
    assert "benchgate env: workload sleepy: contract checked, one training step" in capsys.readouterr().out


@pytest.mark.slow
def test_the_bench_itself_refuses_a_loss_of_shape_1_as_bad_input(config_factory: Any, tmp_path: Path) -> None:
    # The bench keeps its own check: an A/B round's base side imports its workload from another
    # checkout, which no env task has seen. It reads no value and runs after the timed steps.
    config = config_factory(bench={"workload": "bg_test_workloads:loss_shape_one", "warmup": 1})
    with pytest.raises(BadInputError) as info:
        stage_bench(config, 1, tmp_path / "out")
    assert (
        "rank 0 failed: WorkloadError: bench.workload: loss-shape-one: workload member `loss` has shape [1]"
        in (str(info.value))
    )
    assert info.value.exit_code == 2
    assert not (tmp_path / "out" / "metrics-ws1.json").exists()
