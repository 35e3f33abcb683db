"""benchgate: a benchmark operator and CI regression gate for PyTorch training.

The public API: run the gate, or its stages, from Python; write a workload; read results.
"""

__version__ = "0.1.0"

from benchgate.compare import Check, Comparison, compare  # noqa: E402
from benchgate.config import RunConfig, load_config  # noqa: E402
from benchgate.env import capture_environment, machine_profile  # noqa: E402
from benchgate.errors import (  # noqa: E402
    BadInputError,
    BaselineError,
    BenchgateError,
    ConfigError,
    RunFailedError,
    WorkloadError,
)
from benchgate.results import Bundle, load_bundle  # noqa: E402
from benchgate.runner import GateOutcome, run_gate  # noqa: E402
from benchgate.workloads.base import FlopsPerToken, Workload, load_workload  # noqa: E402

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
