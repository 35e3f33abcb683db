"""Compile the pipeline and each component to the YAML committed in pipelines/ and components/ (the
bisect pipeline's file too, from `benchgate compile`: kfp/bisect/pipeline.py compiles with this module,
which therefore does not import it).

`make compile` runs this; a test compiles again and compares, so the committed files never drift from
the code. Upload pipelines/benchgate.yaml in the KFP UI; the component files let other pipelines reuse
a single step (e.g. only `compare`).

The files are byte-for-byte reproducible. KFP dumps the YAML body with sorted keys, but writes the
header comment (`# Inputs: ... [Default: ...]`) with `str()` of each default as it comes out of a
protobuf Struct, whose key order follows upb's per-process hash seed (randomised by the address space
layout, so PYTHONHASHSEED does not fix it): the default tolerations came out in a different order on
each compile. `compile_to` rewrites those defaults with their keys sorted, as the body has them.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from typing import Any

from kfp import compiler
from kfp.dsl.base_component import BaseComponent

from benchgate.kfp.components import ALL
from benchgate.kfp.pipeline import cluster_pipeline

PIPELINE_FILE = Path("pipelines/benchgate.yaml")
COMPONENTS_DIR = Path("components")
# One input of KFP's header comment: `#    name: type [Default: <str() of the value>]`.
HEADER_DEFAULT = re.compile(r"^(#    \w+: \S+ \[Default: )(.*)(\])$")


def _sorted_keys(value: Any) -> Any:
    """`value` with every dict's keys in sorted order (lists keep theirs: their order is data)."""
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


def sorted_header(text: str) -> str:
    """`text` (a compiled YAML file) with the dict defaults of its header comment in sorted key order.
    Only the leading comment lines change; a default that is not a Python literal (a string holding a
    quote, say) has no dict in it and stays as KFP wrote it."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if not line.startswith("#"):
            break
        match = HEADER_DEFAULT.match(line.rstrip("\n"))
        if match is None:
            continue
        try:
            default = ast.literal_eval(match[2])
        except (ValueError, SyntaxError):
            continue
        if isinstance(default, dict | list):
            lines[index] = f"{match[1]}{_sorted_keys(default)}{match[3]}\n"
    return "".join(lines)


def compile_to(component: BaseComponent, path: Path) -> Path:
    """Compile a pipeline or component to `path`, with the same bytes on every compile."""
    compiler.Compiler().compile(component, str(path))
    path.write_text(sorted_header(path.read_text(encoding="utf-8")), encoding="utf-8")
    return path


def compile_all(root: Path) -> list[Path]:
    """Write the pipeline and component YAML under `root`; returns the files written."""
    (root / PIPELINE_FILE).parent.mkdir(parents=True, exist_ok=True)
    written = [compile_to(cluster_pipeline(), root / PIPELINE_FILE)]
    (root / COMPONENTS_DIR).mkdir(parents=True, exist_ok=True)
    for component in ALL:
        written.append(
            compile_to(component, root / COMPONENTS_DIR / f"{component.name.replace('-', '_')}.yaml")
        )
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchgate.kfp.compile", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root to write under")
    args = parser.parse_args(argv)
    for path in compile_all(args.root):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
