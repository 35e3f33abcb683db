"""What the bisect pipeline's one task does in its pod (kfp/bisect/pipeline.py): a full clone of the
repository, then `benchgate bisect` on it, exactly as a user runs it on a machine of their own.

The bisection runs through the public CLI in a subprocess (`python -m benchgate bisect`, its working
directory the clone), not by importing the bisect code: that code is in ranges/, a layer above this
one, and the CLI is the interface a local bisect already keeps stable. The clone is a full one (not
shallow, as a gate task's checkout is): the bisect walks the history between good and bad and checks
out commits of it as worktrees.

    <results>/bisect.json, step<k>/...   what the CLI writes to --out (ranges/bisect_run.py)

The CLI's exit code is mapped: 0 (no regression), 1 (culprit) and 4 (UNKNOWN) are results, and the
task succeeds with bisect.json in its output artifact; 2 (bad input) and 3 (a run failed) fail the
task, with the tail of the CLI's error output as the message (task_harness.reporting_errors). The
KFP run id goes to the CLI as $BENCHGATE_KFP_RUN_ID, which it records in bisect.json and as the MLflow
run's benchgate.kfp_run_id tag.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchgate.errors import (
    EXIT_BAD_INPUT,
    EXIT_PASS,
    EXIT_REGRESSION,
    EXIT_UNKNOWN,
    BadInputError,
    RunFailedError,
)
from benchgate.kfp.params import decode_workload_args
from benchgate.kfp.task_harness import reporting_errors
from benchgate.kit.files import read_json
from benchgate.measure.source import checkout, validate_commit, validate_repository

CONFIG_FILE = "bisect.toml"
# The pipeline run the bisect is the task of, for `benchgate bisect` (cli/bisect.py) to tag its MLflow
# run with: an environment variable, so the command a user types has no option only a pod may use.
KFP_RUN_ID_VARIABLE = "BENCHGATE_KFP_RUN_ID"
BISECT_RESULT = "bisect.json"
RESULT_CODES = (EXIT_PASS, EXIT_REGRESSION, EXIT_UNKNOWN)
# How much of the CLI's error output a failed task reports (the whole of it is in the task's log).
ERROR_TAIL_LINES = 8


def bisect_task(
    good: str,
    bad: str,
    repository: str,
    workload: str,
    workload_args: str,
    world_size: int,
    config: str,
    kfp_run_id: str,
    results_dir: str,
) -> str:
    """Bisect good..bad of `repository` on this pod into `results_dir`; the bisection's status
    (CULPRIT, NO_REGRESSION, UNKNOWN). `config` is the TOML text `benchgate bisect --config` takes.
    The pod runs the commits' code and holds no tracking credential: the CLI runs with --no-tracking,
    and the `log bisection` task (`log_bisection_task`) logs bisect.json to MLflow."""
    with reporting_errors("bisect", results_dir):
        out = Path(results_dir)
        out.mkdir(parents=True, exist_ok=True)
        good, bad = validate_commit(good, "good"), validate_commit(bad, "bad")
        repository = validate_repository(repository)
        with tempfile.TemporaryDirectory(prefix="benchgate-bisect-") as workspace:
            # Beside the clone, not in the output: the CLI refuses an --out it did not write.
            config_file = Path(workspace) / CONFIG_FILE
            config_file.write_text(config, encoding="utf-8")
            clone = checkout(repository, bad, Path(workspace) / "source", history=True)
            command = bisect_command(good, bad, workload, workload_args, world_size, config_file, out)
            code, tail = run_relaying_errors(command, clone, kfp_run_environment(kfp_run_id))
        if code not in RESULT_CODES:
            failure = BadInputError if code == EXIT_BAD_INPUT else RunFailedError
            raise failure(f"benchgate bisect exited {code}: {tail or 'no error output'}")
        status = str(read_json(out / BISECT_RESULT).get("status", ""))
        print(f"benchgate bisect: {status} (exit {code}); results in {out / BISECT_RESULT}", flush=True)
        return status


def bisect_command(
    good: str,
    bad: str,
    workload: str,
    workload_args: str,
    world_size: int,
    config_file: Path,
    out: Path,
) -> list[str]:
    """The `benchgate bisect` command line the task runs (without tracking: see `bisect_task`)."""
    command = [sys.executable, "-m", "benchgate", "bisect", "--good", good, "--bad", bad]
    command += ["--out", str(out), "--config", str(config_file), "--workload", workload]
    for key, value in decode_workload_args(workload_args).items():
        # --workload-arg reads each value as JSON where it parses: the JSON text keeps its type.
        command += ["--workload-arg", f"{key}={json.dumps(value)}"]
    command += ["--world-size", str(world_size), "--no-tracking"]
    return command


def log_bisection_task(results_dir: str, config: str, mlflow_tracking_uri: str, kfp_run_id: str) -> str:
    """Log the bisection the bisect task wrote (`results_dir`/bisect.json) to MLflow as one run of
    kind bisect, tagged with `kfp_run_id`; its MLflow run id. Benchgate's code only, holding the
    tracking credential: bisect.json comes from a pod that ran user code, so it is parsed as JSON and
    checked for the fields the run is made of, and where to log (the experiment of `config`, the TOML
    text, at `mlflow_tracking_uri`) and the run id tag are this task's parameters, not the file's."""
    from benchgate.config import load_config
    from benchgate.errors import RunFailedError
    from benchgate.tracking import client as tracking
    from benchgate.tracking.bisection import log_bisection

    with reporting_errors("log bisection", str(Path(results_dir) / "logged")):
        path = Path(results_dir) / BISECT_RESULT
        record = read_json(path)
        if not isinstance(record, dict):
            raise RunFailedError(f"{path}: got {type(record).__name__} (expected the bisection, an object)")
        record["kfp_run_id"] = kfp_run_id if kfp_run_id and not kfp_run_id.startswith("{{") else None
        with tempfile.TemporaryDirectory(prefix="benchgate-log-bisection-") as workspace:
            config_file = Path(workspace) / CONFIG_FILE
            config_file.write_text(config, encoding="utf-8")
            overrides = {"tracking.uri": mlflow_tracking_uri or None, "tracking.enabled": True}
            cfg = load_config(config_file, overrides)
        try:
            run_id = log_bisection(tracking.connect(cfg), record, path)
        except (KeyError, TypeError) as e:
            raise RunFailedError(
                f"{path}: not a bisection benchgate wrote ({type(e).__name__}: {e})"
            ) from None
        except tracking.send_errors() as e:
            raise RunFailedError(
                f"the bisection was not logged to MLflow: {tracking.short_error(e)}"
            ) from None
        print(f"benchgate bisect: logged to MLflow as run {run_id}", flush=True)
        return run_id


def kfp_run_environment(kfp_run_id: str) -> dict[str, str]:
    """KFP_RUN_ID_VARIABLE for the CLI, which tags the bisection's MLflow run with it (there `benchgate
    bisect --submit --wait` finds it). Outside KFP (the component function called directly) the
    placeholder arrives unresolved, and there is no run id to tag."""
    return {} if not kfp_run_id or kfp_run_id.startswith("{{") else {KFP_RUN_ID_VARIABLE: kfp_run_id}


def run_relaying_errors(command: list[str], cwd: Path, environment: dict[str, str]) -> tuple[int, str]:
    """Run `command` with `environment` added, its output in this task's log (the KFP UI shows it); its
    exit code and the last lines of its error output."""
    # PYTHONSAFEPATH: the clone's working tree, the CLI's working directory, is not importable ahead
    # of the installed benchgate; the A/B's workers import each commit from its worktree.
    env = os.environ | {"PYTHONSAFEPATH": "1", "PYTHONUNBUFFERED": "1"} | environment
    tail: collections.deque[str] = collections.deque(maxlen=ERROR_TAIL_LINES)
    sys.stdout.flush()
    with subprocess.Popen(command, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True) as process:
        assert process.stderr is not None
        for line in process.stderr:  # standard output goes straight to the task's log
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip():
                tail.append(line.rstrip())
    return process.returncode, " | ".join(tail)
