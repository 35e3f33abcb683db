"""benchgate: a benchmark operator and CI regression gate for PyTorch training.

The public API: run the gate's stages from Python; write a workload; read and compare results.

Names are imported on first use (PEP 562), so a light pipeline task such as the gate does not pay for
importing torch it never touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "BadInputError": "benchgate.errors",
    "BaselineError": "benchgate.errors",
    "BenchgateError": "benchgate.errors",
    "Bundle": "benchgate.results",
    "Check": "benchgate.compare",
    "Comparison": "benchgate.compare",
    "ConfigError": "benchgate.errors",
    "FlopsPerToken": "benchgate.workloads.base",
    "GateOutcome": "benchgate.kfp.local_run",
    "RunConfig": "benchgate.config",
    "RunFailedError": "benchgate.errors",
    "Workload": "benchgate.workloads.base",
    "WorkloadError": "benchgate.errors",
    "capture_environment": "benchgate.env",
    "compare": "benchgate.compare",
    "load_bundle": "benchgate.results",
    "load_config": "benchgate.config",
    "load_workload": "benchgate.workloads.base",
    "machine_profile": "benchgate.env",
    "run_gate": "benchgate.kfp.local_run",
}

if TYPE_CHECKING:
    from benchgate.compare import Check, Comparison, compare
    from benchgate.config import RunConfig, load_config
    from benchgate.env import capture_environment, machine_profile
    from benchgate.errors import (
        BadInputError,
        BaselineError,
        BenchgateError,
        ConfigError,
        RunFailedError,
        WorkloadError,
    )
    from benchgate.kfp.local_run import GateOutcome, run_gate
    from benchgate.results import Bundle, load_bundle
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
