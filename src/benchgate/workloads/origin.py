"""Where a workload's module may come from once a task has checked out the code under test: the
repository itself, or benchgate's own workloads (`benchgate.workloads.*`), and nothing else.

`bench.workload` names a `module:function` and `bench.workloadArgs` its keyword arguments. Without this
rule a BenchmarkRun admitted for an allowed repository could name any importable function instead,
`os:system` with `{command: ...}` or `subprocess:getoutput`, and run it in every task of the pipeline,
with that task's credentials in its environment. The repository allow-list of the admin policy only
means something if the code that runs is the repository's.

`measure/source.use_source` sets BENCHGATE_WORKLOAD_ROOT to the checkout when a task fetches the commit
under test (a pipeline task, `run --commit`, a backfill); its children (torchrun's ranks) inherit it.
An A/B side's bench, whose code is another checkout of the same repository (the base commit's),
confines itself to that side's import paths instead (`confine_to`). Without the variable (a local
`benchgate run` on the working tree) any module loads, as the user asked.

Finding a module's file imports its parent packages (`a` for `a.b`), never the module itself or the
factory: a parent outside the repository is the standard library's or an installed package's own code,
run with no argument of the spec.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from benchgate.errors import WorkloadError

ROOT_ENV: Final = "BENCHGATE_WORKLOAD_ROOT"
OWN_WORKLOADS: Final = "benchgate.workloads"


def confined_roots() -> list[Path] | None:
    """The directories workloads must come from in this process, or None (no confinement)."""
    value = os.environ.get(ROOT_ENV, "").strip()
    return [Path(part) for part in value.split(os.pathsep) if part] if value else None


def confine_to(paths: Sequence[str | Path]) -> None:
    """Where confinement is on, confine this process (and its children) to `paths` instead: an A/B
    side's checkout, which benchgate made, of the repository under test."""
    if confined_roots() is not None and paths:
        os.environ[ROOT_ENV] = os.pathsep.join(str(path) for path in paths)


def check_origin(spec: str, roots: Sequence[Path]) -> None:
    """Raise a WorkloadError (exit 2) naming `spec` unless its module is benchgate's own workload
    module or a file (or package) inside one of `roots`."""
    module_name = spec.partition(":")[0]
    if module_name == OWN_WORKLOADS or module_name.startswith(OWN_WORKLOADS + "."):
        return
    try:
        found = importlib.util.find_spec(module_name)
    except Exception:  # a parent package that does not import: load_workload says why
        return
    if found is None:  # nothing to import: load_workload reports the missing module
        return
    locations = [found.origin] if found.has_location and found.origin else []
    locations += list(found.submodule_search_locations or [])
    where = ", ".join(locations) or str(found.origin or "built into Python")
    if not locations or not all(_inside(Path(location), roots) for location in locations):
        outside = ", ".join(str(root) for root in roots)
        raise WorkloadError(
            f"bench.workload: got {spec!r}: module {module_name!r} is not code of the repository under "
            f"test ({where}, outside {outside}); a checked-out run loads only the repository's own "
            f"workloads or benchgate's ({OWN_WORKLOADS}.*)"
        )


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    # Resolved: a symlink in the checkout pointing out of it does not make outside code the repository's.
    resolved = path.resolve()
    return any(resolved.is_relative_to(root.resolve()) for root in roots)
