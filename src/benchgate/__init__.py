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
errors, _version < config_types, kit < config < results < attribution < workloads, data < store <
tracking < measure < checks < ab < history < publish < suite < kfp < ranges < controller < cli.
docs/architecture.md draws it.

Names are imported on first use (PEP 562), so a light pipeline task such as the gate does not pay for
importing torch it never touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from benchgate._version import __version__ as __version__

# The public API, each name mapped to the module that defines it: the one list. `__all__` is derived from
# it, and the TYPE_CHECKING imports below must name the same (tests/unit/test_public_api.py checks both).
_EXPORTS = {
    "BadInputError": "benchgate.errors",
    "BaselineError": "benchgate.errors",
    "BenchgateError": "benchgate.errors",
    "Bundle": "benchgate.results.bundle",
    "Check": "benchgate.results.comparison",
    "Comparison": "benchgate.results.comparison",
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

__all__ = ["__version__", *_EXPORTS]

# For type checkers only (at run time the names are imported on first use, by __getattr__). `X as X`
# marks each as re-exported, as __all__ above is not a literal a checker reads.
if TYPE_CHECKING:
    from benchgate.checks.compare import compare as compare
    from benchgate.config import RunConfig as RunConfig
    from benchgate.config import load_config as load_config
    from benchgate.errors import BadInputError as BadInputError
    from benchgate.errors import BaselineError as BaselineError
    from benchgate.errors import BenchgateError as BenchgateError
    from benchgate.errors import ConfigError as ConfigError
    from benchgate.errors import RunFailedError as RunFailedError
    from benchgate.errors import WorkloadError as WorkloadError
    from benchgate.kfp.local_run import GateOutcome as GateOutcome
    from benchgate.kfp.local_run import run_gate as run_gate
    from benchgate.measure.env import capture_environment as capture_environment
    from benchgate.measure.env import machine_profile as machine_profile
    from benchgate.results.bundle import Bundle as Bundle
    from benchgate.results.bundle import load_bundle as load_bundle
    from benchgate.results.comparison import Check as Check
    from benchgate.results.comparison import Comparison as Comparison
    from benchgate.workloads.base import FlopsPerToken as FlopsPerToken
    from benchgate.workloads.base import Workload as Workload
    from benchgate.workloads.base import load_workload as load_workload


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'benchgate' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)
