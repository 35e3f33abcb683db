"""The documentation's code blocks, and the git repositories its commands are run in.

The README, docs/workloads.md and docs/ci.md are executed by tests/docs/: every shell block is run as
printed, unless the line before it says why not with `<!-- not run by tests: REASON -->`. This module
finds the blocks and that marker, and builds the repositories a user (or a CI runner) would run them
in: a bare `origin` and a clone of it, with the README's own workload module (`my_bench.py`) committed
on main.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CI_DOC = REPO / "docs" / "ci.md"
# The pages the README's longer sections moved to, whose blocks the tests still check: the workload
# protocol (the FSDP2 example, run after the quickstart), the config file (every default, loaded) and
# the Hugging Face models (the `hf` extra's install line, resolved).
WORKLOADS_DOC = REPO / "docs" / "workloads.md"
CONFIG_DOC = REPO / "docs" / "configuration.md"
HF_DOC = REPO / "docs" / "hugging-face.md"
VENV_BIN = REPO / ".venv" / "bin"
SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "console"})
NOT_RUN = re.compile(r"<!--\s*not run by tests:\s*(?P<reason>.*?)\s*-->")
FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason given by a `not run by tests` marker right before the block

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def code_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order, with the marker on the nearest non-blank line
    above it (a marker further up belongs to nothing, which `stray_markers` reports)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise AssertionError(f"{path.relative_to(REPO)}:{i + 1}: a code block is never closed")
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.fullmatch(above.strip())
        blocks.append(
            Block(
                path=path,
                line=i + 1,
                lang=opening["lang"],
                text="\n".join(lines[i + 1 : end]) + "\n",
                not_run=marker["reason"] if marker else None,
            )
        )
        i = end + 1
    return blocks


def shell_blocks(path: Path) -> list[Block]:
    return [b for b in code_blocks(path) if b.lang in SHELL_LANGUAGES]


def stray_markers(path: Path) -> list[int]:
    """Lines of `not run by tests` markers that do not sit right above a shell block."""
    marked = {b.line for b in shell_blocks(path) if b.not_run is not None}
    lines = path.read_text(encoding="utf-8").splitlines()
    stray = []
    for number, line in enumerate(lines, start=1):
        if NOT_RUN.search(line):
            following = next((n for n in range(number + 1, len(lines) + 1) if lines[n - 1].strip()), None)
            if following not in marked:
                stray.append(number)
    return stray


def workload_example() -> str:
    """The README's workload module, the block after `<!-- workload-example -->` (my_bench.py)."""
    match = re.search(
        r"<!-- workload-example -->\s*```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S
    )
    assert match, "README.md must carry the workload example after <!-- workload-example -->"
    return match.group(1)


def parallel_example() -> str:
    """The FSDP2 workload of docs/workloads.md, the block after `<!-- parallel-example -->`
    (my_fsdp_bench.py)."""
    match = re.search(
        r"<!-- parallel-example -->\s*```python\n(.*?)```", WORKLOADS_DOC.read_text(encoding="utf-8"), re.S
    )
    assert match, "docs/workloads.md must carry the parallelism example after <!-- parallel-example -->"
    return match.group(1)


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: the checkout's venv first on PATH (it has benchgate installed), none of the test
    session's own PYTHONPATH, and no CI or MLflow variables unless a test sets them."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH"
        and not k.startswith(("GITHUB_", "GITLAB_", "CI_", "MLFLOW_", "BENCHGATE_"))
        and k not in ("CI", "RUNNER_TEMP")
    }
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "dev@example.com")
    git(path, "config", "user.name", "Dev")
    return path


def commit_files(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).write_text(text, encoding="utf-8")
    git(repo, "add", *files)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def deeper_model(source: str) -> str:
    """The README's workload with a second hidden layer: real extra compute in every step, the change a
    gate must call slower (about -50% tokens/s or more at any width)."""
    last = "nn.Linear(self.hidden, 1)"
    assert source.count(last) == 1, f"the README's workload example no longer has one {last}"
    return source.replace(last, "nn.Linear(self.hidden, self.hidden), nn.ReLU(), " + last)


def run_shell(
    script: str, cwd: Path, env: dict[str, str], timeout_s: float = 840
) -> subprocess.CompletedProcess[str]:
    """`script` as a CI runner's bash runs it: stop at the first failing command."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
