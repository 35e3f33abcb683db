"""docs/architecture.md and the package docstring match the tree: every module is listed in its folder's
row, every folder has a row, and the layer order they state is the one `make lint` enforces."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import benchgate

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "benchgate"
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")


def folder_rows() -> dict[str, str]:
    """The rows of "The folders" table, by their first cell: "(top)", "`kit/`", "`kfp/suite/`", ..."""
    rows = {}
    for line in DOC.splitlines():
        match = re.match(r"\| (\(top\)|`[a-z_/]+/`) \|", line)
        if match:
            rows[match.group(1)] = line
    return rows


def modules() -> list[tuple[str, str]]:
    """(the folder's first cell, module name) for every module of the package; a folder's __init__ is
    its row itself, and a subfolder (`kfp/suite/`) has its own row."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) > 1 and path.name == "__init__.py":
            continue
        found.append(("(top)" if len(parts) == 1 else f"`{'/'.join(parts[:-1])}/`", path.stem))
    return found


def test_every_module_is_listed_in_its_folders_row() -> None:
    rows = folder_rows()
    missing = [f"{folder} {name}" for folder, name in modules() if f"`{name}`" not in rows.get(folder, "")]
    assert not missing, f"docs/architecture.md, 'The folders': modules not listed: {missing}"


def listed_names(cell: str) -> list[str]:
    """The module names a row's last cell lists: "`a`, `b` (what b does, `not_a_module`), `c`": the
    backquoted name that starts each item at parenthesis depth 0."""
    items, depth, current = [], 0, ""
    for char in cell:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [m.group(1) for item in items if (m := re.match(r"\s*`([a-z_]+)`", item))]


def test_every_listed_module_exists() -> None:
    rows, present = folder_rows(), set(modules())
    listed = [(folder, name) for folder, row in rows.items() for name in listed_names(row.split("|")[3])]
    stale = [f"{folder} {name}" for folder, name in listed if (folder, name) not in present]
    assert not stale, f"docs/architecture.md lists modules that are gone: {stale}"


def layers() -> list[list[str]]:
    """The layer contract of pyproject.toml, lowest first, each a list of top-level names."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [
        [name.strip().removeprefix("benchgate.") for name in layer.split("|")] for layer in contract["layers"]
    ][::-1]


def test_the_package_docstring_states_the_enforced_layer_order() -> None:
    stated = " ".join((benchgate.__doc__ or "").split())
    order = " < ".join(", ".join(layer) for layer in layers())
    assert order in stated, f"benchgate/__init__.py should state the layers as: {order}"


def test_the_architecture_drawing_lists_the_folders_in_the_enforced_order() -> None:
    drawing = DOC.split("## The layers", 1)[1].split("```", 2)[1]
    drawn = [m.group(1) for m in re.finditer(r"^  ([a-z_]+)/", drawing, flags=re.MULTILINE)]
    enforced = [name for layer in reversed(layers()) for name in layer if (PACKAGE / name).is_dir()]
    enforced = [name for name in enforced if name != "data"]  # package data: drawn with workloads
    assert drawn == enforced, f"the drawing's folders {drawn}; the contract's {enforced}"
