"""The layer rules of `make lint` run on a copy of the package: the real `lint-imports` with the
repository's `[tool.importlinter]` contracts, and the package copied with one forbidden import added
(tests/unit/test_layers.py, and the Trainer API's contract in tests/unit/kfp/test_multinode.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "benchgate"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(src_root: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The copy goes first on the path, before the installed (editable) benchgate.
    env = {**os.environ, "PYTHONPATH": str(src_root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_with(tmp_path: Path, module: str, after: str, line: str) -> Path:
    """The package copied under tmp_path/src, with `line` added after the line `after` of `module`."""
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "benchgate", ignore=shutil.ignore_patterns("__pycache__"))
    path = src / "benchgate" / module
    text = path.read_text()
    assert after in text, f"{module} no longer has {after!r}"
    path.write_text(text.replace(after, f"{after}\n{line}", 1))
    return src
