"""The KFP API as benchgate uses it: the connection from the environment (KFP_HOST, KFP_TOKEN, else the
in-cluster service-account token file, read again for every request because it rotates; KFP_NAMESPACE),
a preflight that tells "unreachable" from "refused" (and whether KFP is multi-user), and the few
kfp.Client calls that submit and the controller make, with KFP's errors turned into benchgate's.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.run_request import ATTEMPT_SUFFIX
from benchgate.kit.request_bounds import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, bound_requests

DEFAULT_SA_TOKEN_PATH = "/var/run/secrets/kubeflow/pipelines/token"

# The run states KFP terminates a run from: its run store's TerminateRun updates only rows in these
# states (kubeflow/pipelines backend/src/apiserver/storage/run_store.go) and answers 400 for any other.
TERMINABLE_STATES = frozenset({"PENDING", "RUNNING", "PAUSED", "RUNTIME_STATE_UNSPECIFIED"})


class KfpRefused(ConfigError):
    """KFP refused the credentials (HTTP 401/403)."""


class KfpRejected(ConfigError):
    """KFP rejected the request as invalid (HTTP 4xx other than auth, not-found and throttling)."""


class KfpRunGone(RunFailedError):
    """KFP has no run of this id (HTTP 404 for the run itself): deleted, or its store was reset. Not
    "unavailable": waiting cannot bring it back."""


@dataclass(frozen=True)
class Connection:
    host: str
    token: str | None  # KFP_TOKEN: a fixed bearer token
    ui: str
    # Without KFP_TOKEN, a token file (a projected ServiceAccount token): read again for every request,
    # because the kubelet rotates it and the one read at start expires within the hour.
    token_file: Path | None = None
    # KFP_NAMESPACE: the profile namespace of the experiment on a multi-user KFP (empty: decided per
    # run, `kfp_namespace`).
    namespace: str = ""

    def bearer(self) -> str | None:
        """The token to send now: KFP_TOKEN, else the token file's current content."""
        if self.token or self.token_file is None:
            return self.token
        try:
            return self.token_file.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def run_url(self, run_id: str) -> str:
        return f"{self.ui.rstrip('/')}/#/runs/details/{run_id}"


def kfp_namespace(configured: str, multi_user: bool, run_namespace: str | None) -> str | None:
    """The namespace to file experiments under: KFP_NAMESPACE when set; on a multi-user KFP (which
    refuses an experiment without one) the namespace of the run's own resource; else none."""
    if configured:
        return configured
    return (run_namespace or None) if multi_user else None


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
    token_file = token_path if token is None and token_path.is_file() else None
    ui = environ.get("KF_PIPELINES_UI_ENDPOINT") or host
    namespace = environ.get("KFP_NAMESPACE", "").strip()
    return Connection(host.rstrip("/"), token, ui, token_file=token_file, namespace=namespace)


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


def _headers(conn: Connection) -> dict[str, str]:
    token = conn.bearer()
    return {"Authorization": f"Bearer {token}"} if token else {}


def preflight(conn: Connection) -> bool:
    """One cheap call before anything else, to tell 'unreachable' from 'refused' in plain words.
    Returns whether KFP is multi-user (its healthz says so), where every experiment needs a namespace."""
    url = f"{conn.host}/apis/v2beta1/healthz"
    try:
        response = requests.get(url, headers=_headers(conn), timeout=CONNECT_TIMEOUT_S)
    except requests.RequestException as e:
        raise RunFailedError(f"KFP_HOST: cannot reach {conn.host} ({type(e).__name__}: {e})") from None
    _raise_for_status(response.status_code, response.text, conn)
    try:
        return bool(response.json().get("multi_user", False))
    except (ValueError, AttributeError):
        return False


def _raise_for_status(status: int, body: str, conn: Connection) -> None:
    if status in (401, 403):
        which = "no token (set KFP_TOKEN)"
        if conn.token or conn.token_file:
            which = "KFP_TOKEN" if conn.token else f"the token in {conn.token_file}"
        raise KfpRefused(f"KFP at {conn.host} refused the credentials: HTTP {status} with {which}")
    if 400 <= status < 500 and status not in (404, 408, 429):
        # The request itself is wrong (a parameter KFP rejects): retrying cannot help.
        raise KfpRejected(f"KFP at {conn.host} rejected the request: HTTP {status}: {body[:300]}")
    if status >= 400:
        raise RunFailedError(f"KFP at {conn.host} answered HTTP {status}: {body[:300]}")


class KfpApi:
    """The few kfp.Client calls submit needs, with KFP's errors turned into benchgate's."""

    def __init__(self, conn: Connection, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        import kfp

        self.conn = conn
        # A token file is read again before every request (kfp's refresh hook); a fixed token is not.
        credentials = None
        if not conn.token and conn.token_file is not None:
            credentials = kfp.client.ServiceAccountTokenVolumeCredentials(str(conn.token_file))
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore", FutureWarning)  # "only works with KFP v2.0.0-beta.2 and later"
            self.client = self._call(
                lambda: kfp.Client(host=conn.host, existing_token=conn.token, credentials=credentials),
                quiet=True,
            )
        # kfp.Client passes no timeout to its calls: a server that never answers would hold the caller
        # for good (kit/request_bounds.py). Every service of the client shares one ApiClient (kfp 2.17).
        bound_requests(self.client._run_api.api_client.rest_client, read_timeout_s)

    def _call(self, fn: Callable[[], Any], quiet: bool = False) -> Any:
        """Run one client call with KFP's errors turned into benchgate's. `quiet` silences the calls
        that print links of their own (redirecting stdout swaps it for the whole process, so only those
        calls, which happen once per client, do it)."""
        from kfp_server_api.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            try:
                if quiet:
                    with contextlib.redirect_stdout(io.StringIO()):  # kfp prints its links; we print ours
                        return fn()
                return fn()
            except ApiException as e:
                # A token file rotated between its read and KFP's check: once more, with the new one.
                if e.status != 401 or self.conn.token or self.conn.token_file is None:
                    raise
            return fn()
        except ApiException as e:
            _raise_for_status(int(e.status or 0), str(e.body or e.reason), self.conn)
            raise RunFailedError(f"KFP at {self.conn.host}: {e.reason}") from None
        except HTTPError as e:
            raise RunFailedError(f"KFP_HOST: lost connection to {self.conn.host} ({e})") from None

    def _call_on_run(self, run_id: str, fn: Callable[[], Any]) -> Any:
        """A call about one run: KFP's 404 for it is KfpRunGone, not an outage to wait out."""

        try:
            return self._call(lambda: _not_found_raised(fn))
        except _NotFound:
            raise KfpRunGone(f"KFP at {self.conn.host} has no run {run_id} (HTTP 404)") from None

    def own_namespace(self, multi_user: bool) -> str | None:
        """The namespace of a CLI user's experiments: KFP_NAMESPACE, else on a multi-user KFP the one of
        the kfp CLI's context (`kfp`'s own setting); None on a single-user KFP."""
        namespace = kfp_namespace(self.conn.namespace, multi_user, self.client.get_user_namespace() or None)
        if multi_user and namespace is None:
            raise ConfigError(
                f"KFP_NAMESPACE: not set, and KFP at {self.conn.host} is multi-user: every experiment "
                "belongs to a profile namespace (set KFP_NAMESPACE to yours)"
            )
        return namespace

    def experiment_id(self, name: str, namespace: str | None = None) -> str:
        """The experiment `name` (in `namespace` on a multi-user KFP), created when it is missing. Two
        clients that both found none create it at the same moment, and KFP refuses the second ("already
        exist", HTTP 409): that one reads the experiment the first made."""
        from kfp_server_api.exceptions import ApiException

        def found_or_created() -> Any:
            try:
                return self.client.create_experiment(name, namespace=namespace)
            except ApiException as e:
                if e.status != 409 and "already exist" not in str(e.body or ""):
                    raise
            return self.client.get_experiment(experiment_name=name, namespace=namespace)

        found = self._call(found_or_created, quiet=True)
        return str(found.experiment_id)

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

    def terminate_run(self, run_id: str) -> bool:
        """Ask KFP to cancel the run; False when there was nothing to cancel: the run had already ended
        or was being canceled, which KFP answers with HTTP 400 ("Row not found"), an answer the state
        read after it tells from a request KFP refused."""
        try:
            self._call_on_run(run_id, lambda: self.client.terminate_run(run_id))
        except KfpRunGone:
            return False  # nothing left to cancel
        except KfpRejected:
            if self.run_state(run_id)[0] in TERMINABLE_STATES:
                raise
            return False
        return True

    def run_state(self, run_id: str) -> tuple[str, list[tuple[str, str]]]:
        """The run's state and its tasks' (name, state); KfpRunGone where KFP has no such run."""
        run = self._call_on_run(run_id, lambda: self.client.get_run(run_id))
        details = getattr(run, "run_details", None)
        tasks = [
            (t.display_name or "", t.state or "") for t in (getattr(details, "task_details", None) or [])
        ]
        return str(run.state or "PENDING"), tasks


class _NotFound(Exception):
    """A 404 answer, carried past `_call`'s mapping of KFP's errors."""


def _not_found_raised(fn: Callable[[], Any]) -> Any:
    from kfp_server_api.exceptions import ApiException

    try:
        return fn()
    except ApiException as e:
        if e.status == 404:
            raise _NotFound from None
        raise
