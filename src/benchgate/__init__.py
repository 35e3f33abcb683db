"""benchgate: a benchmark operator and CI regression gate for PyTorch training.

The public API: run the gate's stages from Python; write a workload; read and compare results.

Words used throughout, one meaning each:
- a **stage** is one step of a gate run, a function from files to files in one result directory:
  env, bench, eval, trace (measure/), compare (checks/), A/B (ab/), publish (publish/), and the gate's
  exit code. A crash leaves the finished stages' files on disk.
- a KFP **component** wraps one stage (kfp/components.py); a **task** is a component placed in the
  pipeline, and `kfp/tasks.py` holds the tasks' bodies over their artifact paths.
- a **launch** is starting torchrun for one world size (measure/launch.py).

The folders follow the run, each importing only the ones below it (checked by `make lint`):
kit, results, config < workloads < store < tracking < measure < checks < ab < publish < kfp <
history < controller < cli. docs/architecture.md draws it.

Names are imported on first use (PEP 562), so a light pipeline task such as the gate does not pay for
importing torch it never touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from benchgate._version import __version__

_EXPORTS = {
    "BadInputError": "benchgate.errors",
    "BaselineError": "benchgate.errors",
    "BenchgateError": "benchgate.errors",
    "Bundle": "benchgate.results.bundle",
    "Check": "benchgate.checks.compare",
    "Comparison": "benchgate.checks.compare",
    "ConfigError": "benchgate.errors",
    "FlopsPerToken": "benchgate.workloads.base",
    "GateOutcome": "benchgate.kfp.local_run",
    "RunConfig": "benchgate.config",
    "RunFailedError": "benchgate.errors",
    "Workload": "benchgate.workloads.base",
    "WorkloadError": "benchgate.errors",
    "capture_environment": "benchgate.measure.env",
    "compare": "benchgate.checks.compare",
    "load_bundle": "benchgate.results.bundle",
    "load_config": "benchgate.config",
    "load_workload": "benchgate.workloads.base",
    "machine_profile": "benchgate.measure.env",
    "run_gate": "benchgate.kfp.local_run",
}

if TYPE_CHECKING:
    from benchgate.checks.compare import compare
    from benchgate.config import RunConfig, load_config
    from benchgate.errors import (
        BadInputError,
        BaselineError,
        BenchgateError,
        ConfigError,
        RunFailedError,
        WorkloadError,
    )
    from benchgate.kfp.local_run import GateOutcome, run_gate
    from benchgate.measure.env import capture_environment, machine_profile
    from benchgate.results.bundle import Bundle, load_bundle
    from benchgate.results.comparison import Check, Comparison
    from benchgate.workloads.base import FlopsPerToken, Workload, load_workload


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'benchgate' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*_EXPORTS, "__version__"])


__all__ = [
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
]
