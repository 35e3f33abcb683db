"""`benchgate submit` / `make submit COMMIT=sha`: run the pipeline on a KFP cluster and exit with its verdict.

Connection comes from the environment, as in any CI job:

    KFP_HOST                      the KFP API endpoint, e.g. https://kfp.example.com/pipeline (required)
    KFP_TOKEN                     a bearer token; else the in-cluster service-account token from
                                  KF_PIPELINES_SA_TOKEN_PATH
                                  (default /var/run/secrets/kubeflow/pipelines/token)
    KF_PIPELINES_UI_ENDPOINT      base URL of the UI for printed links (default: KFP_HOST)

Exactly-once on retry: the run name is derived from the commit and every argument, and an existing run of
that name in the experiment is attached to instead of submitting another. A CI job that times out and is
retried therefore waits on the same run.

Attempts: a run that ended FAILED without a verdict, CANCELED or SKIPPED will never give one, so a retry
does not wait on it again: it reports the run (name, id, state) and exits 3. `--rerun` then starts the
next attempt, named `<name>-attempt-2`, `-attempt-3`, ... after the highest attempt that exists: still a
name fixed by the arguments, so a retried `--rerun` attaches to the attempt the first one started. A run
whose gate failed (a verdict FAIL or UNKNOWN) is an answer, not a failed attempt: a retry reports that
verdict with exit 1 again, as the first call did; `--rerun` measures again.

Exit codes: 0 the gate passed (or warned), 1 the gate task failed (a regression), 2 bad input (COMMIT,
missing KFP_HOST, a token the server refuses, an unknown parameter, a run KFP rejects as invalid), 3 the
cluster run failed or could not be reached, or the wait timed out.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchgate.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED
from benchgate.kfp.api import Connection, KfpApi, preflight
from benchgate.kfp.run_request import (  # what a run is; here, its sending
    DEFAULT_EXPERIMENT,
    ENDED_WITHOUT_PASS,
    GATE_REGRESSION,
    GATE_TASKS,
    TERMINAL,
    PipelineKind,
    attempt_name,
    exit_code_for,
    run_name_for,
)


@dataclass
class SubmitOutcome:
    run_id: str
    run_name: str
    url: str
    reused: bool
    state: str | None = None
    exit_code: int = EXIT_PASS
    message: str = ""


def compile_package(directory: Path) -> Path:
    """The benchgate pipeline compiled to `directory`/benchgate.yaml (this version of benchgate)."""
    from benchgate.kfp.compile import compile_to
    from benchgate.kfp.pipeline import cluster_pipeline

    return compile_to(cluster_pipeline(), directory / "benchgate.yaml")


def load_package(package: Path) -> dict[str, Any]:
    """A compiled pipeline as the v2beta1 API takes it: the pipeline spec, or {pipeline_spec,
    platform_spec} when it has Kubernetes settings (ours does). Loaded with libyaml where present: the
    pure-Python loader takes ~0.1 s of CPU for this 70 KB file, which a controller paid per run."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    documents = [d for d in yaml.load_all(package.read_text(encoding="utf-8"), Loader=loader) if d]
    if len(documents) == 1:
        return dict(documents[0])
    pipeline_spec, platform_spec = documents
    return {"pipeline_spec": pipeline_spec, "platform_spec": platform_spec}


def ensure_run(
    api: KfpApi,
    experiment_id: str,
    name: str,
    arguments: dict[str, Any],
    pipeline_spec: Callable[[], dict[str, Any]],
) -> tuple[str, bool]:
    """The run named `name` in the experiment: the existing one if any (a retry), else a new one.
    Returns (run id, reused). `pipeline_spec` compiles or loads the pipeline only when a run is made."""
    run_id = api.find_run(experiment_id, name)
    if run_id is not None:
        return run_id, True
    return api.create_run(pipeline_spec(), arguments, name, experiment_id), False


def _start_or_attach(
    api: KfpApi,
    conn: Connection,
    arguments: dict[str, Any],
    experiment_id: str,
    rerun: bool,
    say: Callable[[str], None],
    kind: PipelineKind,
) -> SubmitOutcome:
    """The run to follow: the latest attempt of the arguments' run name, or a new one where there is none
    or (`rerun`) the latest ended without passing. An outcome with its state set is final: the latest
    attempt ended without a verdict and will never give one, so it is reported, not waited on."""
    base = kind.run_name(arguments)
    latest = api.latest_attempt(experiment_id, base)
    if latest is None or (rerun and latest.state in ENDED_WITHOUT_PASS):
        name = attempt_name(base, latest.number + 1 if latest is not None else 1)
        with tempfile.TemporaryDirectory() as tmp:
            run_id = api.create_run(load_package(kind.compile(Path(tmp))), arguments, name, experiment_id)
        say(f"submitted run {name}: {conn.run_url(run_id)}")
        return SubmitOutcome(run_id, name, conn.run_url(run_id), reused=False)
    outcome = SubmitOutcome(latest.run_id, latest.name, conn.run_url(latest.run_id), reused=True)
    note = f" (attempt {latest.number}, {latest.state})" if latest.number > 1 or rerun else ""
    if latest.state in ENDED_WITHOUT_PASS:
        state, tasks = api.run_state(latest.run_id)
        code, why = exit_code_for(state, tasks, kind)
        if code != EXIT_REGRESSION:  # a crash, cancel or skip: the same retry would get the same answer
            say(f"found run {latest.name}: {outcome.url}")
            outcome.state, outcome.exit_code = state, EXIT_RUN_FAILED
            outcome.message = (
                f"attempt {latest.number} (run id {latest.run_id}): {why} before this call; not waited "
                f"on again. Pass --rerun (make submit ARGS=--rerun) to start attempt {latest.number + 1}: "
                f"{attempt_name(base, latest.number + 1)}"
            )
            return outcome
        # The gate's verdict: a retry reports it as the first call did; measuring again takes --rerun.
        note = f" (attempt {latest.number} ended with the gate's verdict; --rerun measures again)"
    elif rerun:
        note += ": --rerun starts a new attempt only after one that failed"
    say(f"attached to existing run {latest.name}: {outcome.url}{note}")
    return outcome


def submit(
    arguments: dict[str, Any],
    conn: Connection,
    experiment: str = DEFAULT_EXPERIMENT,
    wait: bool = True,
    timeout_s: float = 3600.0,
    poll_s: float = 15.0,
    say: Callable[[str], None] = print,
    rerun: bool = False,
    kind: PipelineKind | None = None,
) -> SubmitOutcome:
    """Submit (or re-attach to) the run for `arguments` and, with `wait`, follow it to its verdict.
    `rerun`: start the next attempt when the latest one ended FAILED, CANCELED or SKIPPED. `kind`: the
    pipeline (default the gate pipeline; kfp/suite/submit.py has the suite's)."""
    kind = kind or GATE_PIPELINE
    multi_user = preflight(conn)
    api = KfpApi(conn)
    experiment_id = api.experiment_id(experiment, api.own_namespace(multi_user))
    outcome = _start_or_attach(api, conn, arguments, experiment_id, rerun, say, kind)
    if outcome.state is not None or not wait:
        return outcome
    ended = follow(api, outcome, timeout_s, poll_s)
    if ended is not None:
        outcome.exit_code, outcome.message = exit_code_for(*ended, kind)
    return outcome


def follow(
    api: KfpApi, outcome: SubmitOutcome, timeout_s: float, poll_s: float
) -> tuple[str, list[tuple[str, str]]] | None:
    """Poll the run until it ends: its final state and tasks' states (also set on `outcome.state`), or
    None where `timeout_s` passed first (`outcome` then says so, exit 3: the run goes on)."""
    deadline = time.monotonic() + timeout_s
    state, tasks = api.run_state(outcome.run_id)
    while state not in TERMINAL:
        if time.monotonic() >= deadline:
            outcome.state, outcome.exit_code = state, EXIT_RUN_FAILED
            outcome.message = (
                f"still {state} after {timeout_s:g} s; run the same command again to keep waiting "
                "(it attaches to this run instead of submitting another)"
            )
            return None
        time.sleep(poll_s)
        state, tasks = api.run_state(outcome.run_id)
    outcome.state = state
    return state, tasks


GATE_PIPELINE = PipelineKind(run_name_for, compile_package, GATE_TASKS, GATE_REGRESSION)
