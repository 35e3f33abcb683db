"""One exception tree for benchgate; the CLI maps each branch to a documented exit code.

    BenchgateError                      exit 3 unless a subclass says otherwise
    ├── BadInputError                   exit 2: the user can fix it by changing what they passed
    │   ├── ConfigError                 a config field or CLI flag has a bad value
    │   ├── WorkloadError               the workload does not import, raises, or breaks the protocol
    │   ├── BaselineError               the baseline is corrupt, truncated, or of another machine profile
    │   └── SpoolEntryError             a spooled run is truncated, not JSON, or misses files of its bundle
    └── RunFailedError                  exit 3: the benchmark itself failed (a rank raised or hung, NaN loss)
        └── DiskError                   this machine's disk refused a write: full, read-only, no permission

Exit codes 1 and 4 are not errors: they are the gate's verdicts FAIL and UNKNOWN (see `checks/compare.py`).
Every message names the field, rank or file and the offending value, so a user never needs a traceback.
"""

from __future__ import annotations

EXIT_PASS = 0
EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
EXIT_RUN_FAILED = 3
EXIT_UNKNOWN = 4  # the timing could not be resolved within the budget: neither a pass nor a regression
# `benchgate doctor`: this machine cannot decide the tolerance within gate.ab.max_seconds (even unchanged
# code would mostly end UNKNOWN). A finding about the machine, like exit 1 and 4 about code: no error class.
EXIT_TOO_NOISY = 5


class BenchgateError(Exception):
    """The base of every error benchgate raises for a user; the CLI exits with its `exit_code`.

    `exit_code` is 3 (EXIT_RUN_FAILED) unless a subclass says otherwise: 2 (EXIT_BAD_INPUT) for
    BadInputError and its subclasses. The message names the field, rank or file and the offending value.
    Exit codes 1 and 4 are verdicts (FAIL, UNKNOWN: `Comparison.exit_code`), never errors.
    """

    exit_code = EXIT_RUN_FAILED


class BadInputError(BenchgateError):
    """What the user passed is wrong, and changing it fixes the run: exit 2 (EXIT_BAD_INPUT).

    Its subclasses say what was wrong: ConfigError, WorkloadError, BaselineError, SpoolEntryError.
    """

    exit_code = EXIT_BAD_INPUT


class ConfigError(BadInputError):
    """A configuration value is invalid; the message names the dotted field and the value."""


class WorkloadError(BadInputError):
    """The workload spec cannot be imported, its factory raised, or it lacks a protocol member."""


class BaselineError(BadInputError):
    """A baseline file is unreadable, or it belongs to another machine profile or workload."""


class SpoolEntryError(BadInputError):
    """A spool entry cannot be sent as it is; a human must repair or remove it (sync sends the others)."""


class RunFailedError(BenchgateError):
    """A stage of the benchmark failed at run time."""


class DiskError(RunFailedError):
    """A local file could not be written (disk full, read-only, permission denied, I/O error). The message
    names the path and the reason; what was written before stays as it was."""
