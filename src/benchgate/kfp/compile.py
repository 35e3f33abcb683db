"""Compile the pipeline and each component to the YAML committed in pipelines/ and components/.

`make compile` runs this; a test compiles again and compares, so the committed files never drift from
the code. Upload pipelines/benchgate.yaml in the KFP UI; the component files let other pipelines reuse
a single step (e.g. only `compare`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kfp import compiler

from benchgate.kfp.components import ALL
from benchgate.kfp.pipeline import benchgate_pipeline

PIPELINE_FILE = Path("pipelines/benchgate.yaml")
COMPONENTS_DIR = Path("components")


def compile_all(root: Path) -> list[Path]:
    """Write the pipeline and component YAML under `root`; returns the files written."""
    written = [root / PIPELINE_FILE]
    written[0].parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(benchgate_pipeline, str(written[0]))
    (root / COMPONENTS_DIR).mkdir(parents=True, exist_ok=True)
    for component in ALL:
        path = root / COMPONENTS_DIR / f"{component.name.replace('-', '_')}.yaml"
        compiler.Compiler().compile(component, str(path))
        written.append(path)
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
