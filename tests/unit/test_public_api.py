"""The public API, `from benchgate import …`: one list of names (`_EXPORTS` in benchgate/__init__.py),
each mapped to the module that defines it, importable, and documented."""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import benchgate

INIT = Path(benchgate.__file__)

EXPECTED = {
    "BadInputError",
    "BaselineError",
    "BenchgateError",
    "Bundle",
    "Check",
    "Comparison",
    "ConfigError",
    "FlopsPerToken",
    "GateOutcome",
    "RunConfig",
    "RunFailedError",
    "Workload",
    "WorkloadError",
    "__version__",
    "capture_environment",
    "compare",
    "load_bundle",
    "load_config",
    "load_workload",
    "machine_profile",
    "run_gate",
}
NAMES = sorted(EXPECTED - {"__version__"})


def test_public_api_is_pinned() -> None:
    assert set(benchgate.__all__) == EXPECTED
    assert all(hasattr(benchgate, name) for name in benchgate.__all__)


def _source() -> ast.Module:
    return ast.parse(INIT.read_text(encoding="utf-8"))


def exports_as_written() -> dict[str, str]:
    """`_EXPORTS` as __init__.py writes it: name -> module."""
    for node in _source().body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            exports = ast.literal_eval(node.value)
            assert isinstance(exports, dict)
            return exports
    raise AssertionError(f"{INIT}: no `_EXPORTS = {{...}}` at the top level")


def type_checking_imports() -> dict[str, str]:
    """The names __init__.py imports under `if TYPE_CHECKING:`, name -> module; each must be imported as
    `from module import name as name`, the form a type checker reads as a re-export."""
    found: dict[str, str] = {}
    blocks = [
        node
        for node in _source().body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, f"{INIT}: expected one top-level `if TYPE_CHECKING:` block"
    for statement in blocks[0].body:
        assert isinstance(statement, ast.ImportFrom) and statement.module, (
            f"{INIT}:{statement.lineno}: only `from module import name as name` belongs in the block"
        )
        for alias in statement.names:
            assert alias.asname == alias.name, (
                f"{INIT}:{statement.lineno}: import {alias.name} as {alias.name} (an explicit re-export)"
            )
            assert alias.name not in found, f"{INIT}: {alias.name} is imported twice"
            found[alias.name] = statement.module
    return found


def test_the_type_checking_imports_and_exports_agree() -> None:
    exports, imports = exports_as_written(), type_checking_imports()
    disagree = {
        name: (exports.get(name, "absent"), imports.get(name, "absent"))
        for name in exports.keys() | imports.keys()
        if exports.get(name) != imports.get(name)
    }
    assert not disagree, f"name: (_EXPORTS's module, TYPE_CHECKING's module): {disagree}"


def test_all_and_dir_are_the_exports_and_the_version() -> None:
    assert len(benchgate.__all__) == len(set(benchgate.__all__))
    assert set(benchgate.__all__) == {*benchgate._EXPORTS, "__version__"}
    assert exports_as_written() == benchgate._EXPORTS
    assert dir(benchgate) == sorted(benchgate.__all__)
    with pytest.raises(AttributeError, match="no attribute 'not_public'"):
        benchgate.not_public  # noqa: B018


@pytest.mark.parametrize("name", NAMES)
def test_each_name_imports_from_the_module_that_defines_it(name: str) -> None:
    module = benchgate._EXPORTS[name]
    defined = getattr(importlib.import_module(module), name)
    assert defined.__module__ == module, f"{name} is defined in {defined.__module__}, _EXPORTS says {module}"
    assert getattr(benchgate, name) is defined
    namespace: dict[str, Any] = {}
    exec(f"from benchgate import {name}", namespace)
    assert namespace[name] is defined


def own_docstring(obj: Any) -> str | None:
    """The object's own docstring: a class's from its own body (not inherited, not the signature a
    dataclass writes where it has none)."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else obj.__doc__
    return doc if isinstance(doc, str) else None


def is_a_sentence(name: str, doc: str | None) -> bool:
    """The summary (first paragraph) of `doc` is a sentence: a capital or a code name first, words, a
    full stop at the end, and not a dataclass's generated `Name(field: type, ...)`."""
    if not doc or doc.startswith(f"{name}("):
        return False
    summary = " ".join(textwrap.dedent(doc).strip().split("\n\n")[0].split())
    return bool(re.match(r"[A-Z`'\"]", summary)) and len(summary.split()) >= 5 and summary.endswith(".")


@pytest.mark.parametrize("name", NAMES)
def test_each_name_has_a_docstring_of_its_own(name: str) -> None:
    doc = own_docstring(getattr(benchgate, name))
    assert is_a_sentence(name, doc), f"benchgate.{name}: its docstring should say what it is for: {doc!r}"


def test_a_generated_or_missing_docstring_is_not_a_sentence() -> None:
    assert not is_a_sentence("Check", "Check(name: str, unit: str)")
    assert not is_a_sentence("f", None)
    assert not is_a_sentence("f", "todo")
    assert is_a_sentence("f", "Run the gate as the local pipeline.\n\n    More.")


def test_the_workload_docstrings_example_is_a_workload_that_trains() -> None:
    from benchgate.workloads.contract import check_members
    from benchgate.workloads.training import check_training_step

    doc = own_docstring(benchgate.Workload) or ""
    example = textwrap.dedent(doc.split("::\n", 1)[1])
    namespace: dict[str, Any] = {}
    exec(compile(example, "Workload.__doc__", "exec"), namespace)
    workload = namespace["make_workload"]()
    assert isinstance(workload, benchgate.Workload)
    check_members(workload, "bench.workload: the docstring's example")
    loss = check_training_step(workload, "bench.workload: the docstring's example")
    assert loss > 0
