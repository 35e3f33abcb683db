"""No silent CPU: where a GPU was asked for or given and torch sees none, the run stops with exit 2 at
its first task, naming what was expected, what torch sees and the likely cause (measure/gpu_required.py).

This host's torch is a CPU build: exactly what a GPU pod with the wrong wheel has."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchgate.errors import ConfigError
from benchgate.measure.gpu_required import gpu_expected, likely_cause, require_visible_gpu

BENCHGATE = [sys.executable, "-m", "benchgate"]


@pytest.mark.parametrize(
    ("device", "environ", "expected"),
    [
        ("cuda", {}, "bench.device is 'cuda'"),
        ("auto", {"NVIDIA_VISIBLE_DEVICES": "0"}, "NVIDIA_VISIBLE_DEVICES='0'"),
        ("auto", {"NVIDIA_VISIBLE_DEVICES": "GPU-5c1a2b9e-1d3f-4e8a-9b0c-7d6e5f4a3b2c"}, "GPU-5c1a2b9e"),
        # An image's default ("all") names no device; "none" and "void" give the container none.
        ("auto", {"NVIDIA_VISIBLE_DEVICES": "all"}, None),
        ("auto", {"NVIDIA_VISIBLE_DEVICES": "void"}, None),
        ("auto", {}, None),
        # Asking for the CPU is never refused, whatever the container was given.
        ("cpu", {"NVIDIA_VISIBLE_DEVICES": "0"}, None),
    ],
)
def test_where_a_gpu_is_expected(
    device: str, environ: dict[str, str], expected: str | None, tmp_path: Path
) -> None:
    why = gpu_expected(device, environ, dev=tmp_path)
    assert why is None if expected is None else expected in why


def test_a_mounted_gpu_device_node_means_a_gpu_was_given(tmp_path: Path) -> None:
    (tmp_path / "nvidia0").touch()
    assert "nvidia0 exists" in (gpu_expected("auto", {}, dev=tmp_path) or "")


def test_the_likely_cause_is_named(tmp_path: Path) -> None:
    assert "CPU build" in likely_cause(None, None, {})
    assert "CUDA_VISIBLE_DEVICES=''" in likely_cause("12.8", None, {"CUDA_VISIBLE_DEVICES": ""})
    no_driver = likely_cause("12.8", None, {}, driver_path=tmp_path / "version")
    assert "no NVIDIA driver" in no_driver and "RuntimeClass" in no_driver
    (tmp_path / "version").write_text("NVRM version: 535.54.03\n")
    old = likely_cause(
        "12.8", "The NVIDIA driver on your system is too old", {}, driver_path=tmp_path / "version"
    )
    assert "too old" in old and "12.8" in old


def test_require_refuses_here_naming_what_torch_sees() -> None:
    with pytest.raises(ConfigError) as refused:
        require_visible_gpu("auto", {"NVIDIA_VISIBLE_DEVICES": "0,1"})
    message = str(refused.value)
    assert "NVIDIA_VISIBLE_DEVICES='0,1'" in message
    assert "sees no CUDA device" in message and "CPU build" in message and "--device cpu" in message
    require_visible_gpu("cpu", {"NVIDIA_VISIBLE_DEVICES": "0,1"})  # the CPU on purpose: no refusal


@pytest.mark.parametrize(
    ("args", "environ", "named"),
    [
        (["--device", "cuda"], {}, "bench.device is 'cuda'"),
        ([], {"NVIDIA_VISIBLE_DEVICES": "0"}, "NVIDIA_VISIBLE_DEVICES='0'"),
    ],
    ids=["--device cuda", "NVIDIA_VISIBLE_DEVICES=0"],
)
def test_benchgate_run_stops_within_seconds_with_exit_2(
    args: list[str], environ: dict[str, str], named: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [
            *BENCHGATE,
            "run",
            *args,
            "--no-tracking",
            "--no-eval",
            "--no-trace",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **environ},
        timeout=120,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    output = " ".join((done.stdout + done.stderr).split())  # the terminal wraps long lines
    assert named in output and "sees no CUDA device" in output
    assert not list((tmp_path / "out").glob("metrics-ws*.json"))  # nothing was benchmarked
    assert seconds < 60, f"took {seconds:.0f} s"
