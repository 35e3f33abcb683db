"""What a submission is, apart from sending it: run kinds, arguments, names and exit codes.

Pure (no HTTP, no KFP SDK at import): the controller's decision modules and the CLI build and judge
runs with these, and kfp/submit.py sends them (kfp/api.py). `pipeline_parameter_names` reads the
pipeline's parameters from its definition, importing the KFP SDK only when called.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchgate.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED, ConfigError
from benchgate.kfp.params import (
    REQUEST_PARAMETERS,
    multi_node_arguments,
    request_parameter,
    workload_args_parameter,
)
from benchgate.measure.source import validate_branch, validate_commit, validate_repository

DEFAULT_EXPERIMENT = "benchgate"
# The tasks that fail a run with a verdict: the gate pipeline's two gates, and the suite pipeline's
# (kfp/suite/pipeline.py), which the controller reads alike.
GATE_TASKS = ("gate", "gate (A/B)", "suite gate")
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED")
# States after which the run will never give a verdict (CANCELING always ends CANCELED): --rerun starts
# a new attempt after one of these. PAUSED and RUNTIME_STATE_UNSPECIFIED may still go on.
ENDED_WITHOUT_PASS = ("FAILED", "CANCELED", "CANCELING", "SKIPPED")
# A retried run's name: <name>-attempt-<k> (kfp/api.py finds the highest attempt that exists).
ATTEMPT_SUFFIX = "-attempt-"
GATE_REGRESSION = (
    "the gate found a regression (verdict FAIL), or UNKNOWN: timing not resolved within the A/B budget; "
    "see the verdict of the compare or A/B task"
)


def run_name_for(arguments: Mapping[str, Any]) -> str:
    """Deterministic: the same commit and arguments give the same name, which makes retries idempotent."""
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:10]
    return f"benchgate-{str(arguments['commit'])[:12]}-{digest}"


def attempt_name(base: str, attempt: int) -> str:
    """The name of attempt `attempt` (1: the first run, which keeps the plain name) of run `base`."""
    return base if attempt == 1 else f"{base}{ATTEMPT_SUFFIX}{attempt}"


def build_arguments(
    commit: str, repository: str, branch: str, parameters: Mapping[str, Any], known: set[str]
) -> dict[str, Any]:
    """Validated pipeline arguments: the code under test plus any named pipeline parameter; with
    `gpus_per_node` and a larger world_size_n, `multi_node` (see params.multi_node_arguments)."""
    arguments: dict[str, Any] = {
        "commit": validate_commit(commit),
        "repository": validate_repository(repository),
    }
    if branch:
        arguments["branch"] = validate_branch(branch)
    for key, value in parameters.items():
        if key not in known:
            raise ConfigError(
                f"--param: got {key!r}, not a parameter of the pipeline ({', '.join(sorted(known))})"
            )
        if key in arguments:
            raise ConfigError(f"--param: {key!r} has an option of its own (--{key})")
        if key == "workload_args" and isinstance(value, dict):
            # The parameter is a JSON object in a string, where 512 stays an int (see kfp.params).
            value = workload_args_parameter(value)
        elif key in REQUEST_PARAMETERS:
            # A quantity string: KFP's driver would refuse a bad one only when it makes the task's pod.
            value = request_parameter(key, value)
        arguments[key] = value
    # A world size beyond gpus_per_node runs across nodes: the condition is the caller's to compute.
    return multi_node_arguments(arguments)


@dataclass(frozen=True)
class PipelineKind:
    """Which pipeline a submission runs: how its run is named, compiled, and judged when it fails."""

    run_name: Callable[[Mapping[str, Any]], str]
    compile: Callable[[Path], Path]
    # The tasks whose failure is a verdict (exit 1), and what that verdict means.
    gate_tasks: tuple[str, ...]
    regression: str


def exit_code_for(
    state: str, tasks: list[tuple[str, str]], kind: PipelineKind | None = None
) -> tuple[int, str]:
    """The exit code and its reason for a run that ended in `state` with `tasks` ((name, state) pairs):
    a failed gate task is a verdict (exit 1), any other failure the run's (exit 3)."""
    gate_tasks, regression = (kind.gate_tasks, kind.regression) if kind else (GATE_TASKS, GATE_REGRESSION)
    if state == "SUCCEEDED":
        return EXIT_PASS, "the gate passed"
    failed = [name for name, task_state in tasks if task_state == "FAILED"]
    if state == "FAILED" and any(name in gate_tasks for name in failed):
        return EXIT_REGRESSION, regression
    where = f" (failed: {', '.join(failed)})" if failed else ""
    return EXIT_RUN_FAILED, f"the run ended {state}{where}"


def pipeline_parameter_names() -> set[str]:
    """The gate pipeline's parameter names (kfp/pipeline.py), which --param and spec.config may set."""
    from benchgate.kfp.pipeline import parameter_names

    return parameter_names()
