"""`make bench` and `make test` install the CPU build of torch on a machine without a GPU, and nothing
installed after it brings a CUDA torch back.

Each test runs the Makefile's own torch step (`make torch-install`) with pip turned into a
metadata-only resolution (`--dry-run --report`, `--no-deps`: wheels' metadata is read from the index,
PEP 658, and no wheel is downloaded), then reads what pip would install. The public indexes are asked
where they can be reached, and the test says so and is skipped where not: this machine reaches PyPI but
not download.pytorch.org, and its pip configuration finds a CPU wheel on local disk, which is what the
fallback then installs here.
"""

from __future__ import annotations

import json
import platform
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from doc_blocks import REPO, VENV_BIN

FALLBACK = "from the default index instead"
PYPI = "https://pypi.org/simple/torch/"


def make_variable(name: str) -> str:
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", "print-%: ; @echo $($*)", f"print-{name}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def unreachable(url: str) -> str | None:
    """Why `url` cannot be read from here, or None where it can."""
    try:
        with urllib.request.urlopen(url, timeout=20):
            return None
    except (urllib.error.URLError, OSError) as e:
        return f"{url} is unreachable from here ({e})"


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"  # nothing listens there once the socket is closed


def is_cuda_wheel(requirement: str) -> bool:
    """The CUDA build's own wheels (cuDNN, NCCL, ..., triton); nvidia-ml-py is the small NVML binding."""
    name = requirement.lower()
    return name.startswith(("nvidia-", "triton", "cuda-")) and not name.startswith("nvidia-ml-py")


def cuda_requirements(item: dict[str, Any]) -> list[str]:
    return [r for r in item["metadata"].get("requires_dist") or [] if is_cuda_wheel(r)]


def torch_step(
    tmp_path: Path, *pip_options: str, **variables: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`make torch-install` with pip resolving only; returns the run and what pip would install."""
    report = tmp_path / "report.json"
    pip = (
        f"{VENV_BIN / 'python'} -m pip install --quiet --disable-pip-version-check --dry-run "
        f"--ignore-installed --no-deps --report {report} -c constraints.txt {' '.join(pip_options)}"
    )
    done = subprocess.run(
        ["make", "--no-print-directory", "torch-install", f"TORCH_PIP={pip}"]
        + [f"{k}={v}" for k, v in variables.items()],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (item,) = json.loads(report.read_text(encoding="utf-8"))["install"]
    assert item["metadata"]["name"] == "torch"
    return done, item


def test_the_pins_agree() -> None:
    version = make_variable("TORCH_VERSION")
    assert f"torch=={version}\n" in (REPO / "constraints.txt").read_text(encoding="utf-8")


def test_without_a_gpu_make_installs_the_cpu_torch_as_this_machine_resolves_it(tmp_path: Path) -> None:
    """The step as `make` runs it here: the CPU index, or (unreachable) the fallback with this machine's
    pip configuration."""
    done, torch = torch_step(tmp_path, TORCH_BUILD="cpu")
    if cuda_requirements(torch):
        assert FALLBACK in done.stderr, done.stderr
        pytest.skip(
            "the CPU index is unreachable and the default index serves the CUDA build: the documented "
            "fallback (a CPU wheel needs the CPU index, a mirror of it, or one in pip's find-links)"
        )
    assert torch["metadata"]["version"] == make_variable("TORCH_VERSION") + "+cpu"


def test_the_cpu_index_serves_a_cpu_torch_without_cuda_requirements(tmp_path: Path) -> None:
    """Against the public CPU index alone (`--isolated`: no local wheels, no machine configuration)."""
    index = make_variable("TORCH_CPU_INDEX")
    reason = unreachable(f"{index}/torch/")
    if reason:
        pytest.skip(reason)
    done, torch = torch_step(tmp_path, "--isolated", TORCH_BUILD="cpu")
    assert FALLBACK not in done.stderr
    assert torch["metadata"]["version"] == make_variable("TORCH_VERSION") + "+cpu"
    assert cuda_requirements(torch) == []


def test_where_the_cpu_index_is_unreachable_the_default_index_is_the_fallback(tmp_path: Path) -> None:
    """Against public PyPI alone: the step says it falls back, and still installs torch 2.13.0. On Linux
    x86_64 that wheel is the CUDA build, which is why the CPU index comes first."""
    reason = unreachable(PYPI)
    if reason:
        pytest.skip(reason)
    done, torch = torch_step(tmp_path, "--isolated", TORCH_BUILD="cpu", TORCH_CPU_INDEX=closed_port_url())
    assert FALLBACK in done.stderr, done.stderr
    assert torch["metadata"]["version"] == make_variable("TORCH_VERSION")
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        assert any(r.startswith("nvidia-nccl") for r in cuda_requirements(torch)), torch["metadata"]


def test_a_gpu_machine_takes_the_default_indexs_build(tmp_path: Path) -> None:
    """TORCH_BUILD=cuda (a machine with an NVIDIA driver): torch==2.13.0 from the default index, and the
    CPU index is not asked."""
    done, torch = torch_step(tmp_path, TORCH_BUILD="cuda", TORCH_CPU_INDEX=closed_port_url())
    assert "no GPU here" not in done.stdout and FALLBACK not in done.stderr
    assert torch["metadata"]["version"].startswith(make_variable("TORCH_VERSION"))


def test_constraints_and_pyproject_keep_the_installed_cpu_torch() -> None:
    """After the torch step, `pip install -c constraints.txt -e '.[dev]'` (the next steps of the
    Makefile) into the checkout's .venv would install no other torch and no CUDA wheels."""
    version = subprocess.run(
        [str(VENV_BIN / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not version.endswith("+cpu"):
        pytest.skip(f"the checkout's .venv has torch {version}, not a CPU build")
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--dry-run", "--report", "-", "-c", "constraints.txt", "-e", ".[dev]"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = [i["metadata"]["name"].lower() for i in json.loads(done.stdout)["install"]]
    assert not [n for n in names if n == "torch" or is_cuda_wheel(n)], names
