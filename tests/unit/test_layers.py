"""The layer rules of `make lint` (import-linter, `[tool.importlinter]` in pyproject.toml) hold on this
tree, and refuse a violation: each case copies the package, adds one forbidden import, and runs the real
`lint-imports` on the copy."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_lint import PACKAGE, REPO, copy_with, lint_imports


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = lint_imports(REPO / "src", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "after", "line", "contract", "chain"),
    [
        (
            "results/figures.py",
            "from benchgate.kit import stats",
            "import torch",
            "torch only in measure/ and workloads/",
            "benchgate.results.figures -> torch",
        ),
        (
            "checks/compare.py",
            "from benchgate.kit import stats",
            "from benchgate.publish import record",
            "Stages import only earlier stages",
            "benchgate.checks is not allowed to import benchgate.publish",
        ),
        (
            "kit/files.py",
            "import json",
            "from benchgate.results import bundle",
            "Stages import only earlier stages",
            "benchgate.kit is not allowed to import benchgate.results",
        ),
        (
            "publish/policy.py",
            "from pathlib import Path",
            "def _later() -> None:\n    import mlflow  # deferred, and still seen",
            "MLflow only in tracking/",
            "benchgate.publish.policy -> mlflow",
        ),
        (
            "tracking/view.py",
            "from typing import TYPE_CHECKING, Any",
            "from benchgate.tracking import record",
            "No import cycles",
            "benchgate.tracking",
        ),
    ],
    ids=["torch-outside-measure", "later-stage", "kit-imports-results", "mlflow-deferred", "cycle"],
)
def test_a_violation_fails_lint(
    tmp_path: Path, module: str, after: str, line: str, contract: str, chain: str
) -> None:
    src = copy_with(tmp_path, module, after, line)
    result = lint_imports(src, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = result.stdout.split("Broken contracts", 1)[1]
    assert contract in broken and chain in broken, broken


def test_the_bundled_data_is_read_by_the_workloads_layer_only() -> None:
    """benchgate.data sits in the workloads layer of the import contract (its __init__ imports nothing);
    files are read through importlib.resources, which no contract sees, so: only workloads/shard.py
    opens them."""
    marks = ('/ "data"', "data/shard", "probes.json")
    readers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.parent.name != "data" and any(mark in path.read_text() for mark in marks)
    )
    assert readers == ["workloads/shard.py"]
