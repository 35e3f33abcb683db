"""The README's install lines work as printed from where it says to run them: in the user's project's
directory, with a clone of this repository beside it (`../benchgate`).

Each `pip install` line of the README and of docs/hugging-face.md (the `hf` extra's, which moved there
with the README's Hugging Face section), in a shell block or in the text, is run in such a project
directory with pip's dry run added (`--dry-run --report`): the constraints file must open, the path to
benchgate with its extra must be a project pip can build, and the whole must resolve. The clone is a
copy of this checkout's working tree (what pip builds from); the environment is the checkout's .venv,
which has what the lines install, so nothing is downloaded. The virtualenv line itself is not run.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from doc_blocks import HF_DOC, README, REPO, VENV_BIN, code_blocks, user_env

PIP_INSTALL = re.compile(r"\bpython -m pip install\b|(?<![\w-])pip install\b")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
# The documents whose install lines are resolved.
INSTALL_DOCS = (README, HF_DOC)
# What a clone of this repository holds that `pip install ./benchgate` reads.
BUILT_FROM = ("pyproject.toml", "constraints.txt", "README.md", "src/benchgate")


def install_lines(readme: Path = README) -> list[str]:
    """Every pip install command of the README: the lines of its shell blocks and its inline code."""
    text = readme.read_text(encoding="utf-8")
    found = [
        line.strip()
        for block in code_blocks(readme)
        if block.lang in {"bash", "sh", "shell", "console"}
        for line in block.text.splitlines()
        if PIP_INSTALL.search(line)
    ]
    outside_blocks = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found += [m for m in INLINE_CODE.findall(outside_blocks) if PIP_INSTALL.match(m)]
    return found


def a_project_beside_a_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "benchgate"
    for name in BUILT_FROM:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, clone / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            clone.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    project = tmp_path / "my-project"
    project.mkdir()
    return project


def dry_run(line: str, project: Path, report: Path) -> subprocess.CompletedProcess[str]:
    args = shlex.split(line)
    at = args.index("install") + 1
    args[at:at] = ["--dry-run", "--quiet", "--disable-pip-version-check", "--report", str(report)]
    args[0] = str(VENV_BIN / args[0]) if args[0] in ("python", "pip") else args[0]
    return subprocess.run(
        args, cwd=project, env=user_env(), capture_output=True, text=True, timeout=600, check=False
    )


def documented_install_lines() -> list[str]:
    return [line for doc in INSTALL_DOCS for line in install_lines(doc)]


def test_the_readme_has_its_install_lines() -> None:
    lines = install_lines()
    assert any("--index-url https://download.pytorch.org/whl/cpu" in line for line in lines), lines
    assert any("[trace]" in line for line in lines), lines
    assert any("[hf]" in line for line in install_lines(HF_DOC)), install_lines(HF_DOC)


@pytest.mark.parametrize("line", documented_install_lines())
def test_an_install_line_resolves_from_the_project_directory(line: str, tmp_path: Path) -> None:
    project = a_project_beside_a_clone(tmp_path)
    report = tmp_path / "report.json"
    done = dry_run(line, project, report)
    assert done.returncode == 0, f"{line}\n{done.stderr}"
    installs = json.loads(report.read_text(encoding="utf-8"))["install"]
    names = [i["metadata"]["name"].lower() for i in installs]
    # No torch and no CUDA wheels (cuDNN, NCCL, ..., triton; nvidia-ml-py is the small NVML binding).
    cuda = [n for n in names if n.startswith(("nvidia-", "triton")) and n != "nvidia-ml-py"]
    assert "torch" not in names and not cuda, names
    if "benchgate" in line:  # built from the clone beside the project, not from any index
        (built,) = [i for i in installs if i["metadata"]["name"] == "benchgate"]
        assert built["download_info"]["url"] == (tmp_path / "benchgate").as_uri()
