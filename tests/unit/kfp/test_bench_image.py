"""Static checks of images/bench/Dockerfile: no Docker engine here, so the Dockerfile is read as text.

What is checked: the torch it installs is constraints.txt's pin, from a CUDA wheel index verified to carry
that version; the CUDA version the build asserts and the driver requirement agree with that index; the
NVIDIA Container Toolkit's variables are set; the extras include `gpu`; a C compiler is there for Triton;
the image does not run as root.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCH_DOCKERFILE = ROOT / "images" / "bench" / "Dockerfile"
OPERATOR_DOCKERFILE = ROOT / "images" / "operator" / "Dockerfile"
CONSTRAINTS = ROOT / "constraints.txt"

# The CUDA wheel variants of each torch release, as checked, and each variant's CUDA version.
# Checked 2026-11-27. download.pytorch.org does not resolve from the development machine, so the index pages
# were not read. The variants are PyTorch's release CUDA arches at the 2.13 go-live (pytorch/test-infra,
# tools/scripts/generate_binary_build_matrix.py, CUDA_ARCHES_DICT["release"] = ["12.6", "13.0", "13.2"] at
# commit 6d36e31, "Release 2.13 go live", 2026-07-08; cu128 nightly builds were removed on 2026-04-07,
# commit c00a90b), matching RELEASE.md's matrix (2.13: stable CUDA 12.6 and 13.0, experimental 13.2).
# cu130 is also confirmed from PyPI: torch 2.13.0's cp311 manylinux_2_28 x86_64 and aarch64 wheels are
# '2.13.0+cu130' builds (torch/version.py, cuda '13.0'; METADATA requires cuda-toolkit==13.0.3), read by
# HTTP range requests from files.pythonhosted.org.
VERIFIED_CUDA_WHEELS: dict[str, dict[str, str]] = {
    "2.13.0": {"cu126": "12.6", "cu130": "13.0", "cu132": "13.2"},
}
PYTORCH_WHEEL_INDEX = "https://download.pytorch.org/whl/"


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, f"{path}: a continued instruction never ends"
    out = []
    for text in logical:
        keyword, _, rest = text.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _args(path: Path) -> dict[str, str]:
    args: dict[str, str] = {}
    for keyword, rest in _instructions(path):
        if keyword == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name.strip()] = value.strip().strip('"')
    return args


def _env(path: Path) -> dict[str, str]:
    """ENV values with ${ARG} references expanded from the ARG defaults (a build without --build-arg)."""
    args = _args(path)
    env: dict[str, str] = {}
    for keyword, rest in _instructions(path):
        if keyword != "ENV":
            continue
        for pair in shlex.split(rest):
            name, sep, value = pair.partition("=")
            assert sep, f"ENV {pair!r}: use the NAME=value form"
            env[name] = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)
    return env


def _runs(path: Path) -> list[str]:
    return [rest for keyword, rest in _instructions(path) if keyword == "RUN"]


def _constraint_pin(package: str) -> str:
    for line in CONSTRAINTS.read_text().splitlines():
        match = re.fullmatch(rf"{re.escape(package)}==(\S+)", line.strip())
        if match:
            return match.group(1)
    raise AssertionError(f"constraints.txt pins no {package}")


def test_instruction_reader_joins_continuations_and_skips_comments(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text('# c\nARG A=1\nENV X=1 \\\n    # inside\n    Y="a b"\nUSER 10001\n')
    assert _instructions(dockerfile) == [("ARG", "A=1"), ("ENV", 'X=1  Y="a b"'), ("USER", "10001")]
    assert _env(dockerfile) == {"X": "1", "Y": "a b"}


@pytest.mark.parametrize("dockerfile", [BENCH_DOCKERFILE, OPERATOR_DOCKERFILE], ids=["bench", "operator"])
def test_torch_version_is_the_constraints_pin(dockerfile: Path) -> None:
    assert _args(dockerfile)["TORCH_VERSION"] == _constraint_pin("torch")


def test_torch_is_installed_from_the_index_at_the_pinned_version() -> None:
    installs = [run for run in _runs(BENCH_DOCKERFILE) if '"torch==${TORCH_VERSION}"' in run]
    assert len(installs) == 1
    assert '--index-url "${TORCH_INDEX_URL}"' in installs[0]
    # The build fails unless the installed torch is the CUDA build it expects.
    assert "torch.version.cuda" in installs[0] and "${TORCH_CUDA}" in installs[0]


def test_cuda_index_is_a_verified_variant_of_the_pinned_torch() -> None:
    args = _args(BENCH_DOCKERFILE)
    version = args["TORCH_VERSION"]
    assert version in VERIFIED_CUDA_WHEELS, f"torch {version}: no CUDA wheel variants were verified"
    index = args["TORCH_INDEX_URL"].rstrip("/")
    assert index.startswith(PYTORCH_WHEEL_INDEX), index
    variant = index.removeprefix(PYTORCH_WHEEL_INDEX)
    verified = VERIFIED_CUDA_WHEELS[version]
    assert variant in verified, f"{variant} has no torch {version} wheels (verified: {sorted(verified)})"
    # The CUDA version the build asserts and the driver requirement follow the index.
    assert args["TORCH_CUDA"] == verified[variant]


def test_cu128_is_not_a_variant_of_torch_2_13() -> None:
    # The image used to name cu128, which PyTorch stopped building before 2.13: the build would have failed.
    assert "cu128" not in VERIFIED_CUDA_WHEELS["2.13.0"]


def test_nvidia_container_toolkit_variables() -> None:
    env = _env(BENCH_DOCKERFILE)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")) == {"compute", "utility"}
    # The toolkit's syntax: "cuda>=major.minor"; the driver must support the CUDA the wheel was built with.
    assert env["NVIDIA_REQUIRE_CUDA"] == f"cuda>={_args(BENCH_DOCKERFILE)['TORCH_CUDA']}"
    assert re.fullmatch(r"cuda>=\d+\.\d+", env["NVIDIA_REQUIRE_CUDA"])


def test_extras_include_gpu() -> None:
    installs = [run for run in _runs(BENCH_DOCKERFILE) if "-c constraints.txt" in run]
    assert len(installs) == 1
    match = re.search(r'"\.\[([^\]]*)\]"', installs[0])
    assert match, installs[0]
    extras = {extra.strip() for extra in match.group(1).split(",")}
    assert {"gpu", "trace", "multinode", "hf"} <= extras
    # nvidia-ml-py (the gpu extra) is what the NVML device module imports.
    assert "pynvml" in installs[0]


def test_a_c_compiler_is_installed_for_triton() -> None:
    apt = [run for run in _runs(BENCH_DOCKERFILE) if "apt-get install" in run]
    assert len(apt) == 1
    packages = set(shlex.split(apt[0]))
    assert {"gcc", "g++", "libc6-dev", "git", "openssh-client"} <= packages  # git@ repositories: ssh


@pytest.mark.parametrize("dockerfile", [BENCH_DOCKERFILE, OPERATOR_DOCKERFILE], ids=["bench", "operator"])
def test_image_does_not_run_as_root(dockerfile: Path) -> None:
    users = [rest for keyword, rest in _instructions(dockerfile) if keyword == "USER"]
    assert users, "no USER instruction: the image would run as root"
    final = users[-1].split(":")[0]
    assert final not in {"root", "0"}
    assert final.isdigit(), "a numeric UID, so runAsNonRoot can verify it without reading /etc/passwd"
    created = [run for run in _runs(dockerfile) if "useradd" in run]
    assert any(f"--uid {final}" in run for run in created), f"UID {final} is not the user the image creates"


def test_a_digest_pins_the_compiled_bench_image_and_a_bad_one_is_refused() -> None:
    """BENCHGATE_IMAGE_DIGEST at compile time (make compile, or the controller's environment): the
    components name the image by its bytes, not by a tag that can be pushed over."""
    from benchgate.errors import ConfigError
    from benchgate.kfp.components import bench_image

    digest = "sha256:" + "ab" * 32
    assert bench_image("registry.example.com/bench", digest) == f"registry.example.com/bench@{digest}"
    assert bench_image("registry.example.com/bench", "").startswith("registry.example.com/bench:")
    with pytest.raises(ConfigError, match=r"BENCHGATE_IMAGE_DIGEST: got 'latest'"):
        bench_image("registry.example.com/bench", "latest")
