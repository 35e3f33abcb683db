"""`benchgate submit --suite FILE` / `make submit SUITE=suite.toml`: a suite as one run of the
benchgate-suite pipeline (kfp/suite/pipeline.py), followed to its exit code.

As `benchgate submit` for one gate run (kfp/submit.py): the run's name is fixed by its arguments, so a
retry attaches to the run the first call started, and `--rerun` starts the next attempt after one that
ended without a verdict. The arguments come from the suite file: its entries, expanded as a local
suite expands them (kfp/suite_entry.py), its [suite] config file's tables as `config` (bench.steps,
bench.warmup and tracking.uri as the parameters of those names), and `--param` over them all.

Everything a cluster would refuse is refused here first, with exit 2 and nothing sent: an entry a local
suite would report as an error (a cluster run is not worth starting for a typo), a multi-node parameter
(each entry runs on one node), and a suite without an MLflow server (its entries' verdicts meet there).

Exit codes: as `benchgate suite run`'s where the suite gate ran (read from the suite's MLflow run; 1
where MLflow cannot be read then), 3 where the run failed otherwise or the wait timed out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from benchgate.config import parse_config
from benchgate.errors import EXIT_REGRESSION, BenchgateError, ConfigError
from benchgate.kfp.api import Connection
from benchgate.kfp.params import MULTI_NODE_PARAMETERS
from benchgate.kfp.pipeline import validate_pipeline_arguments
from benchgate.kfp.run_request import DEFAULT_EXPERIMENT, PipelineKind, build_arguments
from benchgate.kfp.submit import SubmitOutcome, submit
from benchgate.kfp.suite.pipeline import (
    SUITE_GATE_TASK,
    SUITE_ONLY,
    SUITE_PIPELINE_NAME,
    compile_suite_package,
    suite_parameter_names,
)
from benchgate.kfp.suite_entry import entry_parameter, spec_entries
from benchgate.kit.credentials import MLFLOW_INSTEAD, refuse_credentials
from benchgate.suite.spec import SuiteSpec

# How long the exit code is looked for in MLflow after the run ended (the suite gate logged it already).
MLFLOW_READ_BUDGET_S = 15.0


def suite_run_name(arguments: Mapping[str, Any]) -> str:
    """Fixed by the arguments, as a gate run's is: a retried submit attaches to the same run."""
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:10]
    return f"{SUITE_PIPELINE_NAME}-{arguments['suite_name'][:40]}-{str(arguments['commit'])[:12]}-{digest}"


SUITE_PIPELINE = PipelineKind(
    suite_run_name,
    compile_suite_package,
    (SUITE_GATE_TASK,),
    "an entry FAILed, was UNKNOWN or has no verdict: the suite gate's log has the table, and the suite's "
    "MLflow run each entry's gate run",
)


def suite_file_parameters(spec: SuiteSpec) -> dict[str, Any]:
    """What the [suite] config file sets: its tables as `config`, and bench.steps, bench.warmup and
    tracking.uri as the parameters of those names (the named parameters win over `config`)."""
    config = json.loads(json.dumps(spec.config, default=str))  # JSON-safe: a TOML date has no KFP type
    bench, tracking = config.get("bench", {}), config.get("tracking", {})
    out: dict[str, Any] = {"config": config} if config else {}
    out |= {key: bench[key] for key in ("steps", "warmup") if key in bench}
    if tracking.get("uri"):
        out["mlflow_tracking_uri"] = tracking["uri"]
    return out


def suite_arguments(
    spec: SuiteSpec, commit: str, repository: str, branch: str, parameters: Mapping[str, Any]
) -> dict[str, Any]:
    """The suite pipeline's arguments for a suite file, `parameters` (--param) over the file's; checked
    as the cluster would check them (module docstring). A ConfigError names the field."""
    for key in parameters:
        if key in SUITE_ONLY:
            raise ConfigError(f"--param: {key!r} comes from the suite file ([suite] name, [[entries]])")
    merged = suite_file_parameters(spec) | dict(parameters)
    _refuse_multi_node(merged)
    arguments = build_arguments(commit, repository, branch, merged, suite_parameter_names())
    arguments["suite_name"] = spec.name
    arguments["entries"] = [entry_parameter(entry) for entry in spec_entries(spec)]
    check_suite_arguments(arguments)
    return arguments


def _refuse_multi_node(arguments: Mapping[str, Any]) -> None:
    for name in MULTI_NODE_PARAMETERS:
        if name in arguments:
            raise ConfigError(
                f"{name}: got {arguments[name]!r} (a suite runs each entry on one node; gate a world size "
                "across nodes with `benchgate submit` without --suite)"
            )


def check_suite_arguments(arguments: Mapping[str, Any]) -> None:
    """What a suite on a cluster needs beyond a gate run's arguments: one node, an MLflow server, and
    each entry valid as its env task will check it (a ConfigError names the entry and the field)."""
    _refuse_multi_node(arguments)
    entries = arguments.get("entries")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"entries: got {entries!r} (expected a list of one JSON object per entry)")
    shared = {k: v for k, v in arguments.items() if k not in SUITE_ONLY}
    for text in entries:
        try:
            validate_pipeline_arguments(shared | {"suite_entry": text})
        except ConfigError as e:
            raise ConfigError(f"entry {_entry_name(text)!r}: {e}") from None
    uri = str(arguments.get("mlflow_tracking_uri") or "")
    refuse_credentials(uri, "mlflow_tracking_uri", MLFLOW_INSTEAD)
    if not uri.startswith(("http://", "https://")):
        raise ConfigError(
            f"mlflow_tracking_uri: got {uri!r} (a suite on a cluster needs an MLflow server the cluster "
            "reaches, where its entries' verdicts meet: tracking.uri in the suite's config file or "
            "--param mlflow_tracking_uri=URL for `benchgate submit`, the controller's MLFLOW_TRACKING_URI "
            "for a BenchmarkRun)"
        )


def _entry_name(text: Any) -> Any:
    try:
        return json.loads(text).get("name", text)
    except (TypeError, ValueError, AttributeError):
        return text


def suite_exit_code(arguments: Mapping[str, Any], kfp_run_id: str) -> int | None:
    """The exit code the suite gate of KFP run `kfp_run_id` logged to MLflow, None where it has none."""
    from benchgate.tracking import client as tracking
    from benchgate.tracking.suite_record import TAG_SUITE_EXIT
    from benchgate.tracking.suite_runs import suite_run_for_kfp

    table = dict((arguments.get("config") or {}).get("tracking") or {})
    table["uri"] = arguments["mlflow_tracking_uri"]
    tracker = tracking.connect(parse_config({"tracking": table}), budget_s=MLFLOW_READ_BUDGET_S)
    run = suite_run_for_kfp(tracker, kfp_run_id)
    code = run.data.tags.get(TAG_SUITE_EXIT) if run is not None else None
    return int(code) if code is not None and code.isdigit() else None


def submit_suite(
    arguments: dict[str, Any],
    conn: Connection,
    experiment: str = DEFAULT_EXPERIMENT,
    wait: bool = True,
    timeout_s: float = 3600.0,
    poll_s: float = 15.0,
    say: Callable[[str], None] = print,
    rerun: bool = False,
) -> SubmitOutcome:
    """Submit (or attach to) the suite's run and, with `wait`, follow it; where its suite gate failed,
    the suite's own exit code is read from MLflow (2, 3 or 4 are not a regression)."""
    outcome = submit(arguments, conn, experiment, wait, timeout_s, poll_s, say, rerun, SUITE_PIPELINE)
    if outcome.exit_code != EXIT_REGRESSION:
        return outcome
    from benchgate.tracking.client import send_errors

    failures: tuple[type[BaseException], ...] = (BenchgateError, *send_errors())
    try:
        code = suite_exit_code(arguments, outcome.run_id)
    except failures as e:
        outcome.message += f" (the suite's exit code is in MLflow, which could not be read: {e})"
        return outcome
    if code is not None:
        outcome.exit_code = code
        outcome.message = f"the suite ended with exit {code}; {SUITE_PIPELINE.regression}"
    return outcome
