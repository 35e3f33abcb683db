"""`benchgate doctor`: its figures agree with the planner on what it measured, its exit code with the
plan's reachability, and a GPU asked for but not seen is refused. The CLI runs end to end on CPU
(slow: a bench launch and A/A rounds of the reference workload); its pure parts are checked here fast."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats
from typer.testing import CliRunner

from benchgate.ab import power
from benchgate.cli.doctor import device_lines, plan_lines, sd_range
from benchgate.cli.main import app
from benchgate.errors import EXIT_BAD_INPUT, EXIT_TOO_NOISY
from benchgate.measure.probe import load_figure, matmul_figure

# Short A/A rounds of the reference workload (tiny on CPU): a few steps per side, no minimum duration.
FAST_AB = "[gate.ab]\nsteps = 6\nwarmup = 1\nmin_measured_s = 0.0\n"


def doctor(tmp_path: Path, config: str, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    (tmp_path / "doctor.toml").write_text(config)
    report = tmp_path / "doctor.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchgate",
            "doctor",
            "--config",
            "doctor.toml",
            "--rounds",
            "3",
            "--device",
            "cpu",
            "--json",
            str(report),
            *args,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in (0, EXIT_TOO_NOISY), result.stdout + result.stderr
    return result, json.loads(report.read_text())


def replanned(report: dict) -> power.Plan:
    """The planner over the doctor's own measurement and the gate settings it reports."""
    gate, aa = report["gate"], report["aa"]
    ab = gate["ab"]
    return power.plan(
        aa["sd_log"],
        aa["seconds_per_round"],
        gate["throughput_drop_pct"],
        gate["confidence"],
        ab["min_rounds"],
        ab["max_rounds"],
        ab["max_seconds"],
    )


@pytest.mark.slow
@pytest.mark.serial
def test_doctor_on_cpu_reports_figures_the_planner_agrees_with_and_a_too_fine_tolerance_exits_5(
    tmp_path: Path,
) -> None:
    # One real run (the probe, a bench launch, 3 A/A rounds). A tolerance of 0.01% is beyond any host,
    # so the finding is known beforehand; the figures must be the planner's over what was measured.
    result, report = doctor(tmp_path, FAST_AB + "[gate.tolerances]\nthroughput_drop_pct = 0.01\n")
    aa = report["aa"]
    assert aa["rounds"] == 3 and len(aa["round_changes_pct"]) == 3
    assert aa["sd_log"] > 0 and aa["seconds_per_round"] > 0
    assert aa["workload"] == "benchgate.workloads.gpt:make_workload"
    assert aa["layout"]["name"] == "interleaved"
    assert report["device"]["type"] == "cpu" and report["device"]["usable_cores"] >= 1
    expected = replanned(report)
    assert [look["resolution_pct"] for look in report["plan"]["looks"]] == pytest.approx(
        [look.resolution_pct for look in expected.looks]
    )
    assert report["plan"]["reachable"] == expected.reachable is False
    assert result.returncode == EXIT_TOO_NOISY == report["exit_code"]
    assert report["finding"] == "too noisy"
    assert expected.sentence() in result.stdout
    assert "too noisy for 0.01%: the smallest change it can see here in" in result.stdout
    assert "machine profile: cpu-" in result.stdout and "load average:" in result.stdout


def test_a_gpu_asked_for_but_not_seen_is_bad_input(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    result = CliRunner().invoke(app, ["doctor", "--device", "cuda", "--out", str(tmp_path)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "bench.device: got 'cuda'" in result.output and "sees no CUDA device" in result.output


def test_too_few_rounds_is_bad_input() -> None:
    result = CliRunner().invoke(app, ["doctor", "--rounds", "2"])
    assert result.exit_code == EXIT_BAD_INPUT


@pytest.mark.parametrize("n", [3, 4, 6, 12])
def test_sd_range_is_the_chi_square_interval(n: int) -> None:
    k = n - 1
    low, high = sd_range(1.0, n, 0.9)
    assert low == pytest.approx(math.sqrt(k / stats.chi2.ppf(0.95, k)), rel=0.01)
    assert high == pytest.approx(math.sqrt(k / stats.chi2.ppf(0.05, k)), rel=0.04)


def test_matmul_and_load_figures() -> None:
    figure = matmul_figure(8192, [1.6e-3, 1.4e-3, 1.5e-3], 989e12)
    assert figure["best_tflops"] == pytest.approx(2 * 8192**3 / 1.4e-3 / 1e12)
    assert figure["share_of_peak"] == pytest.approx(figure["best_tflops"] / 989)
    assert matmul_figure(1024, [0.02], None)["share_of_peak"] is None
    with pytest.raises(ValueError, match="matmul seconds: got"):
        matmul_figure(1024, [], None)
    assert load_figure((2.5, 1.0, 0.5), 2)["busy"] and not load_figure((0.4, 1.0, 0.5), 2)["busy"]


def _cuda_probe(nvml: dict) -> dict:
    matmul = matmul_figure(8192, [1.4e-3], 989e12)
    return {
        "type": "cuda",
        "name": "NVIDIA H100 80GB HBM3",
        "compute_capability": "9.0",
        "device_count": 1,
        "torch_cuda": "13.0",
        "nccl": "2.27.5",
        "nvml": nvml,
        "matmul_bf16": matmul,
    }


def test_cuda_lines_name_nvml_or_why_it_is_absent() -> None:
    absent = device_lines(_cuda_probe({"available": False, "why": "nvidia-ml-py is not installed"}))
    assert "NVML absent: nvidia-ml-py is not installed" in absent
    assert absent[-1].startswith("bf16 matmul 8192³: 785 TFLOP/s best = 79% of the datasheet's 989")
    gpu = {
        "name": "H100",
        "uuid": "GPU-1",
        "compute_mode": "Default",
        "power_limit_w": 700.0,
        "max_sm_clock_mhz": 1980,
    }
    state = {
        "sm_clock_mhz": 1755,
        "power_w": 690.0,
        "temperature_c": 71,
        "throttle_reasons": ["sw_power_cap"],
    }
    present = device_lines(_cuda_probe({"available": True, "driver": "580.1", "gpu": gpu, "state": state}))
    assert any("SM 1755 of 1980 MHz" in line and "sw_power_cap" in line for line in present)


def test_the_table_marks_the_first_look_that_passes_unchanged_code() -> None:
    figure = power.plan(0.02, 10.0, 5.0, 0.95, 4, 27, 600.0)
    lines = plan_lines(figure)
    marked = [line for line in lines if "first PASS of unchanged code" in line]
    assert len(marked) == 1 and figure.first_resolving is not None
    assert marked[0].split()[1] == str(figure.first_resolving.rounds)
    assert lines[-1] == figure.sentence()
