"""The README's `.gitignore` lines cover every path the CLI writes into the user's project by default.

The defaults are read from the CLI and the config themselves (every option whose default is a path,
and the config's directories), so a new output path with a default fails here until the README's
lines ignore it. The lines are run as printed in a fresh git repository, and git says what it ignores.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from doc_blocks import README, code_blocks, init_repo, run_shell, user_env

from benchgate.cli.main import app
from benchgate.config import parse_config

# `benchgate compile --root .` writes this repository's own committed files (pipelines/, components/,
# the chart's CRDs); `comment --out` reads benchgate-out/, which `run` writes; `suite plan --file` writes
# the suite file the user keeps and commits, as a config file.
NOT_OUTPUTS = {("compile", "root"), ("suite plan", "suite_file")}


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))
    yield path, command


def default_output_paths() -> dict[str, Path]:
    """What writes where by default: the CLI's path options, and the config's directories."""
    found: dict[str, Path] = {}
    for path, command in _commands(typer.main.get_command(app)):
        for param in command.params:
            if isinstance(param.default, Path) and (" ".join(path), param.name) not in NOT_OUTPUTS:
                found[f"benchgate {' '.join(path)} --{param.name}"] = param.default
    config = parse_config({})
    found["config out"] = config.out
    found["config gate.baseline_dir"] = config.gate.baseline_dir
    found["config tracking.local_dir"] = config.tracking.local_dir
    found["config tracking.spool_dir"] = config.tracking.spool_dir
    return found


def gitignore_block() -> str:
    (block,) = [b for b in code_blocks(README) if b.lang == "bash" and ">> .gitignore" in b.text]
    return block.text


def test_the_cli_writes_where_the_readme_says() -> None:
    """A sanity check of the introspection: the outputs the README names are among those found."""
    found = {str(p) for p in default_output_paths().values()}
    assert {"benchgate-out", "benchgate-suite-out", "benchgate-bisect", "benchgate-history.png"} <= found
    assert all(not p.is_absolute() and str(p) != "." for p in default_output_paths().values())


def test_the_readme_gitignore_lines_ignore_every_default_output(tmp_path: Path) -> None:
    project = init_repo(tmp_path / "project")
    done = run_shell(gitignore_block(), project, user_env(), timeout_s=60)
    assert done.returncode == 0, done.stderr
    missed = []
    for what, path in default_output_paths().items():
        # A directory's files, as they land there; a file (a PNG) itself.
        probe = path if path.suffix else path / "result.json"
        (project / probe).parent.mkdir(parents=True, exist_ok=True)
        (project / probe).touch()
        ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=project, check=False)
        if ignored.returncode != 0:
            missed.append(f"{what}: {path}")
    assert not missed, f"not ignored by the README's .gitignore lines: {missed}"
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=project, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip
    assert status.split() == ["??", ".gitignore"], status
