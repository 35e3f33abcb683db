"""benchgate: a benchmark operator and CI regression gate for PyTorch training.

The public API: run the gate, or its stages, from Python; write a workload; read results.
"""

__version__ = "0.1.0"

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
from benchgate.results import Bundle, load_bundle
from benchgate.runner import GateOutcome, run_gate
from benchgate.workloads.base import FlopsPerToken, Workload, load_workload

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
