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

import contextlib
import functools
import hashlib
import io
import json
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from benchgate.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED, ConfigError, RunFailedError
from benchgate.kfp.params import workload_args_parameter
from benchgate.source import validate_branch, validate_commit, validate_repository

DEFAULT_EXPERIMENT = "benchgate"
DEFAULT_SA_TOKEN_PATH = "/var/run/secrets/kubeflow/pipelines/token"
GATE_TASKS = ("gate", "gate (A/B)")
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED")
# States after which the run will never give a verdict (CANCELING always ends CANCELED): --rerun starts
# a new attempt after one of these. PAUSED and RUNTIME_STATE_UNSPECIFIED may still go on.
ENDED_WITHOUT_PASS = ("FAILED", "CANCELED", "CANCELING", "SKIPPED")
ATTEMPT_SUFFIX = "-attempt-"
CONNECT_TIMEOUT_S = 10.0


class KfpRefused(ConfigError):
    """KFP refused the credentials (HTTP 401/403)."""


class KfpRejected(ConfigError):
    """KFP rejected the request as invalid (HTTP 4xx other than auth, not-found and throttling)."""


@dataclass(frozen=True)
class Connection:
    host: str
    token: str | None
    ui: str

    def run_url(self, run_id: str) -> str:
        return f"{self.ui.rstrip('/')}/#/runs/details/{run_id}"


@dataclass
class SubmitOutcome:
    run_id: str
    run_name: str
    url: str
    reused: bool
    state: str | None = None
    exit_code: int = EXIT_PASS
    message: str = ""


def connection_from_env(environ: Mapping[str, str]) -> Connection:
    host = environ.get("KFP_HOST", "").strip()
    if not host:
        raise ConfigError(
            "KFP_HOST: not set (expected the KFP API endpoint, e.g. https://kfp.example.com/pipeline)"
        )
    if not host.startswith(("http://", "https://")):
        raise ConfigError(f"KFP_HOST: got {host!r} (expected an http:// or https:// URL)")
    token = environ.get("KFP_TOKEN") or None
    token_path = Path(environ.get("KF_PIPELINES_SA_TOKEN_PATH", DEFAULT_SA_TOKEN_PATH))
    if token is None and token_path.is_file():
        token = token_path.read_text(encoding="utf-8").strip() or None
    return Connection(host.rstrip("/"), token, environ.get("KF_PIPELINES_UI_ENDPOINT") or host)


def run_name_for(arguments: Mapping[str, Any]) -> str:
    """Deterministic: the same commit and arguments give the same name, which makes retries idempotent."""
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:10]
    return f"benchgate-{str(arguments['commit'])[:12]}-{digest}"


def attempt_name(base: str, attempt: int) -> str:
    """The name of attempt `attempt` (1: the first run, which keeps the plain name) of run `base`."""
    return base if attempt == 1 else f"{base}{ATTEMPT_SUFFIX}{attempt}"


def attempt_number(base: str, name: str) -> int | None:
    """Which attempt of `base` the run `name` is; None for a run of another name."""
    match = re.fullmatch(re.escape(base) + rf"(?:{ATTEMPT_SUFFIX}([1-9][0-9]*))?", name)
    if match is None or match[1] == "1":  # attempt 1 is the plain name; "-attempt-1" is not ours
        return None
    return int(match[1] or 1)


@dataclass(frozen=True)
class Attempt:
    number: int
    name: str
    run_id: str
    state: str


def build_arguments(
    commit: str, repository: str, branch: str, parameters: Mapping[str, Any], known: set[str]
) -> dict[str, Any]:
    """Validated pipeline arguments: the code under test plus any named pipeline parameter."""
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
        arguments[key] = value
    return arguments


def _headers(conn: Connection) -> dict[str, str]:
    return {"Authorization": f"Bearer {conn.token}"} if conn.token else {}


def preflight(conn: Connection) -> None:
    """One cheap call before anything else, to tell 'unreachable' from 'refused' in plain words."""
    url = f"{conn.host}/apis/v2beta1/healthz"
    try:
        response = requests.get(url, headers=_headers(conn), timeout=CONNECT_TIMEOUT_S)
    except requests.RequestException as e:
        raise RunFailedError(f"KFP_HOST: cannot reach {conn.host} ({type(e).__name__}: {e})") from None
    _raise_for_status(response.status_code, response.text, conn)


def _raise_for_status(status: int, body: str, conn: Connection) -> None:
    if status in (401, 403):
        which = "KFP_TOKEN" if conn.token else "no token (set KFP_TOKEN)"
        raise KfpRefused(f"KFP at {conn.host} refused the credentials: HTTP {status} with {which}")
    if 400 <= status < 500 and status not in (404, 408, 429):
        # The request itself is wrong (a parameter KFP rejects): retrying cannot help.
        raise KfpRejected(f"KFP at {conn.host} rejected the request: HTTP {status}: {body[:300]}")
    if status >= 400:
        raise RunFailedError(f"KFP at {conn.host} answered HTTP {status}: {body[:300]}")


class KfpApi:
    """The few kfp.Client calls submit needs, with KFP's errors turned into benchgate's."""

    def __init__(self, conn: Connection) -> None:
        import kfp

        self.conn = conn
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore", FutureWarning)  # "only works with KFP v2.0.0-beta.2 and later"
            self.client = self._call(
                lambda: kfp.Client(host=conn.host, existing_token=conn.token), quiet=True
            )

    def _call(self, fn: Callable[[], Any], quiet: bool = False) -> Any:
        """Run one client call with KFP's errors turned into benchgate's. `quiet` silences the calls
        that print links of their own (redirecting stdout swaps it for the whole process, so only those
        calls, which happen once per client, do it)."""
        from kfp_server_api.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            if quiet:
                with contextlib.redirect_stdout(io.StringIO()):  # kfp prints its links; we print ours
                    return fn()
            return fn()
        except ApiException as e:
            _raise_for_status(int(e.status or 0), str(e.body or e.reason), self.conn)
            raise RunFailedError(f"KFP at {self.conn.host}: {e.reason}") from None
        except HTTPError as e:
            raise RunFailedError(f"KFP_HOST: lost connection to {self.conn.host} ({e})") from None

    def experiment_id(self, name: str) -> str:
        return str(self._call(lambda: self.client.create_experiment(name), quiet=True).experiment_id)

    def find_run(self, experiment_id: str, run_name: str) -> str | None:
        name_filter = json.dumps(
            {"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": run_name}]}
        )
        found = self._call(
            lambda: self.client.list_runs(experiment_id=experiment_id, filter=name_filter, page_size=10)
        )
        runs = [r for r in (found.runs or []) if r.display_name == run_name]
        return str(runs[0].run_id) if runs else None

    def latest_attempt(self, experiment_id: str, base: str) -> Attempt | None:
        """The attempt of run `base` with the highest number in the experiment, None before the first.
        One listing of every run whose name contains `base` (page by page), filtered to its attempts."""
        name_filter = json.dumps(
            {"predicates": [{"operation": "IS_SUBSTRING", "key": "display_name", "stringValue": base}]}
        )
        query = {"page_size": 100, "experiment_id": experiment_id, "filter": name_filter}
        found: list[Attempt] = []
        page_token = ""
        while True:
            page = self._call(functools.partial(self.client.list_runs, page_token=page_token, **query))
            for run in page.runs or []:
                number = attempt_number(base, str(run.display_name or ""))
                if number is not None:
                    found.append(Attempt(number, run.display_name, str(run.run_id), run.state or "PENDING"))
            page_token = page.next_page_token or ""
            if not page_token:
                break
        return max(found, key=lambda a: (a.number, a.run_id), default=None)

    def create_run(
        self, pipeline_spec: dict[str, Any], arguments: dict[str, Any], run_name: str, experiment_id: str
    ) -> str:
        """Create a run of an already loaded pipeline (`load_package`) through the generated v2beta1 API:
        what `create_run_from_pipeline_package` sends, without parsing the package again per run."""
        import kfp_server_api

        body = kfp_server_api.V2beta1Run(
            experiment_id=experiment_id,
            display_name=run_name,
            pipeline_spec=pipeline_spec,
            runtime_config=kfp_server_api.V2beta1RuntimeConfig(parameters=arguments),
        )
        result = self._call(lambda: self.client.runs.run_service_create_run(run=body))
        return str(result.run_id)

    def terminate_run(self, run_id: str) -> None:
        self._call(lambda: self.client.terminate_run(run_id))

    def run_state(self, run_id: str) -> tuple[str, list[tuple[str, str]]]:
        run = self._call(lambda: self.client.get_run(run_id))
        details = getattr(run, "run_details", None)
        tasks = [
            (t.display_name or "", t.state or "") for t in (getattr(details, "task_details", None) or [])
        ]
        return str(run.state or "PENDING"), tasks


def compile_package(directory: Path) -> Path:
    """The benchgate pipeline compiled to `directory`/benchgate.yaml (this version of benchgate)."""
    from benchgate.kfp.compile import compile_to
    from benchgate.kfp.pipeline import benchgate_pipeline

    return compile_to(benchgate_pipeline, directory / "benchgate.yaml")


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


def exit_code_for(state: str, tasks: list[tuple[str, str]]) -> tuple[int, str]:
    if state == "SUCCEEDED":
        return EXIT_PASS, "the gate passed"
    failed = [name for name, task_state in tasks if task_state == "FAILED"]
    if state == "FAILED" and any(name in GATE_TASKS for name in failed):
        return EXIT_REGRESSION, (
            "the gate found a regression (verdict FAIL), or UNKNOWN: timing not resolved within the A/B "
            "budget; see the verdict of the compare or A/B task"
        )
    where = f" (failed: {', '.join(failed)})" if failed else ""
    return EXIT_RUN_FAILED, f"the run ended {state}{where}"


def _start_or_attach(
    api: KfpApi,
    conn: Connection,
    arguments: dict[str, Any],
    experiment_id: str,
    rerun: bool,
    say: Callable[[str], None],
) -> SubmitOutcome:
    """The run to follow: the latest attempt of the arguments' run name, or a new one where there is none
    or (`rerun`) the latest ended without passing. An outcome with its state set is final: the latest
    attempt ended without a verdict and will never give one, so it is reported, not waited on."""
    base = run_name_for(arguments)
    latest = api.latest_attempt(experiment_id, base)
    if latest is None or (rerun and latest.state in ENDED_WITHOUT_PASS):
        name = attempt_name(base, latest.number + 1 if latest is not None else 1)
        with tempfile.TemporaryDirectory() as tmp:
            run_id = api.create_run(load_package(compile_package(Path(tmp))), arguments, name, experiment_id)
        say(f"submitted run {name}: {conn.run_url(run_id)}")
        return SubmitOutcome(run_id, name, conn.run_url(run_id), reused=False)
    outcome = SubmitOutcome(latest.run_id, latest.name, conn.run_url(latest.run_id), reused=True)
    note = f" (attempt {latest.number}, {latest.state})" if latest.number > 1 or rerun else ""
    if latest.state in ENDED_WITHOUT_PASS:
        state, tasks = api.run_state(latest.run_id)
        code, why = exit_code_for(state, tasks)
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
) -> SubmitOutcome:
    """Submit (or re-attach to) the run for `arguments` and, with `wait`, follow it to its verdict.
    `rerun`: start the next attempt when the latest one ended FAILED, CANCELED or SKIPPED."""
    preflight(conn)
    api = KfpApi(conn)
    outcome = _start_or_attach(api, conn, arguments, api.experiment_id(experiment), rerun, say)
    if outcome.state is not None or not wait:
        return outcome
    run_id = outcome.run_id
    deadline = time.monotonic() + timeout_s
    state, tasks = api.run_state(run_id)
    while state not in TERMINAL:
        if time.monotonic() >= deadline:
            outcome.state, outcome.exit_code = state, EXIT_RUN_FAILED
            outcome.message = (
                f"still {state} after {timeout_s:g} s; run the same command again to keep waiting "
                "(it attaches to this run instead of submitting another)"
            )
            return outcome
        time.sleep(poll_s)
        state, tasks = api.run_state(run_id)
    outcome.state = state
    outcome.exit_code, outcome.message = exit_code_for(state, tasks)
    return outcome


def pipeline_parameter_names() -> set[str]:
    import inspect

    from benchgate.kfp.pipeline import benchgate_pipeline

    return set(inspect.signature(benchgate_pipeline.pipeline_func).parameters)
