"""A FAKE Kubeflow Pipelines API server, for testing `benchgate submit` without a cluster.

It is a stand-in for the one remote service that cannot run here: a plain HTTP server on 127.0.0.1
that speaks the KFP v2beta1 REST endpoints `kfp.Client` calls (healthz, experiments, runs), with the
JSON shapes of the v2beta1 API, bearer-token checks, and runs that move PENDING -> RUNNING -> a final
state over a few polls. It does not execute pipelines; each test chooses how the run ends (for all
runs through the scenario, or one run with `force`), can make the whole server answer an error status
(`scenario.fail_with`, e.g. 503 while "down"), and can make it reject new runs as invalid
(`scenario.reject_runs`). Terminating a run (`POST /runs/{id}:terminate`, as
`kfp.Client.terminate_run` sends) ends it CANCELED; as KFP's run store does, only a run that is PENDING,
RUNNING, PAUSED or RUNTIME_STATE_UNSPECIFIED can be terminated, any other gets HTTP 400 with KFP's
"Row not found" message. A multi-user KFP (`scenario.multi_user`) refuses an experiment without a
namespace, as KFP does, and keeps experiments per namespace. Listing runs applies the filter's EQUALS and
IS_SUBSTRING predicates on `display_name`, pages by `page_size`/`page_token` (answering
`next_page_token`), and shows each run's current state, as KFP's list does; only GET /runs/{id} counts
as a poll that moves a run on.

A run's task details follow its pipeline (by the compiled pipeline's name): the benchgate-suite
pipeline's runs end in its `suite gate` task, which fails where a gate run's `gate` would.

`created_at` holds, for each entry of `created_runs` (same index), the `time.monotonic()` at which the
server accepted that POST /runs: benchmarks use it to time submissions as the server saw them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

API = "/apis/v2beta1"
CREATED_AT = "2026-11-21T00:00:00Z"
# The pipelines a run may be of (by their compiled name), each with a parameter its runs always carry.
REQUIRED_PARAMETER = {"benchgate": "commit", "benchgate-bisect": "good", "benchgate-suite": "entries"}
# The task whose failure is the verdict, per pipeline (the bisect pipeline's runs use the gate's names).
GATE_TASK = {"benchgate-suite": "suite gate"}


@dataclass
class Scenario:
    token: str | None = "good-token"
    # How a run ends: SUCCEEDED, GATE_FAILED (the gate task fails), TASK_FAILED (bench fails), CANCELED,
    # or RUNNING (never ends).
    outcome: str = "SUCCEEDED"
    polls_until_done: int = 2
    # Answer every request with this HTTP status (503: a KFP that is down); None: serve normally.
    fail_with: int | None = None
    # Answer POST /runs with 400, as KFP does for a pipeline spec or parameter it cannot accept.
    reject_runs: bool = False
    # Seconds POST /runs takes before answering (a slow KFP: a submission still in flight).
    create_delay_s: float = 0.0
    # Seconds GET /runs/{id} takes before answering: a KFP (or a proxy before it) that accepts a state
    # read and does not answer.
    get_delay_s: float = 0.0
    # Every created run reports this (state, outcome for task details) from its first look, as `force`
    # does for one run: e.g. ("SUCCEEDED", "SUCCEEDED"), a run that ended before anyone looked.
    initial: tuple[str, str] | None = None
    # A run asked to terminate ends in this (state, outcome) a moment before the request arrives: the
    # race between a look at a running run and its terminate.
    ends_before_terminate: tuple[str, str] | None = None
    # A multi-user KFP (healthz says so): an experiment needs a namespace, to be created or listed
    # (400 with KFP's messages otherwise), and experiments of one name are per namespace.
    multi_user: bool = False
    # Called once after a request was refused with 401 (e.g. to rotate the token file a client reads).
    on_unauthorized: Callable[[], None] | None = None
    # The next this many creates of an experiment that does not exist find it made meanwhile by another
    # client (two controllers creating it at the same moment, after both listed none): the other's is
    # stored, and this create answered 409, as KFP answers a name that exists.
    experiment_races: int = 0


# The states KFP's TerminateRun updates (kubeflow/pipelines backend/src/apiserver/storage/run_store.go).
TERMINABLE = ("PENDING", "RUNNING", "PAUSED", "RUNTIME_STATE_UNSPECIFIED")


@dataclass
class FakeKfp:
    scenario: Scenario = field(default_factory=Scenario)
    requests: list[tuple[str, str]] = field(default_factory=list)
    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    created_runs: list[dict[str, Any]] = field(default_factory=list)
    created_at: list[float] = field(default_factory=list)  # time.monotonic() per created_runs entry
    terminated: list[str] = field(default_factory=list)
    # Per-run state set by a test, overriding the scenario: (state, outcome for task details).
    forced: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The compiled pipeline's name of each run (its task details follow that pipeline's tasks).
    pipelines: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def force(self, run_id: str, state: str, outcome: str = "SUCCEEDED") -> None:
        """Make one run report `state` from now on (outcome picks its task details when it is final)."""
        with self.lock:
            self.forced[run_id] = (state, outcome)

    def calls(self, method: str, path_prefix: str) -> int:
        return sum(1 for m, p in self.requests if m == method and p.startswith(API + path_prefix))


def authorization_of(method: str, path: str) -> tuple[str, str] | None:
    """The (resource, verb) of group pipelines.kubeflow.org that a multi-user KFP authorizes a request
    for, as its API server does (backend/src/apiserver/server/experiment_server.go and run_server.go:
    each handler's SubjectAccessReview); None for a request it does not authorize (healthz)."""
    route = path.removeprefix(API)
    if route == "/experiments":
        return ("experiments", "list" if method == "GET" else "create")
    if route == "/runs":
        return ("runs", "list" if method == "GET" else "create")
    if route.startswith("/runs/") and route.endswith(":terminate") and method == "POST":
        return ("runs", "terminate")
    if route.startswith("/runs/") and method == "GET":
        return ("runs", "get")
    return None


def _predicate_value(filter_text: str | None, key: str) -> str | None:
    if not filter_text:
        return None
    for predicate in json.loads(filter_text).get("predicates", []):
        if predicate.get("key") == key and predicate.get("operation") == "EQUALS":
            return predicate.get("stringValue", predicate.get("string_value"))
    return None


def _matches(filter_text: str | None, record: dict[str, Any]) -> bool:
    """Whether `record` passes every predicate of a v2beta1 filter (EQUALS and IS_SUBSTRING on strings,
    the two operations benchgate sends; KFP's IS_SUBSTRING is a SQL LIKE '%value%')."""
    for predicate in json.loads(filter_text or "{}").get("predicates", []):
        value = predicate.get("stringValue", predicate.get("string_value"))
        field_value = str(record.get(predicate.get("key"), ""))
        if predicate.get("operation") == "EQUALS" and field_value != value:
            return False
        if predicate.get("operation") == "IS_SUBSTRING" and str(value) not in field_value:
            return False
    return True


def _task_details(outcome: str, done: bool, pipeline: str = "benchgate") -> list[dict[str, Any]]:
    names = ["env", "bench ws=1", "bench ws=N", "eval", "trace", "compare", "gate"]
    gate = GATE_TASK.get(pipeline, "gate")
    if gate not in names:
        names.append(gate)
    states = dict.fromkeys(names, "SUCCEEDED" if done else "RUNNING")
    if done and outcome == "GATE_FAILED":
        states[gate] = "FAILED"
    if done and outcome == "CANCELED":
        states.update({"compare": "CANCELED", "gate": "SKIPPED"})
    if done and outcome == "TASK_FAILED":
        states.update({"bench ws=N": "FAILED", "eval": "SKIPPED", "trace": "SKIPPED", "compare": "SKIPPED"})
        states["gate"] = "SKIPPED"
    return [
        {"task_id": f"task-{i}", "display_name": name, "state": state, "create_time": CREATED_AT}
        for i, (name, state) in enumerate(states.items())
    ]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeKfp

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self) -> bool:
        expected = self.fake.scenario.token
        if expected is None or self.headers.get("Authorization") == f"Bearer {expected}":
            return True
        hook, self.fake.scenario.on_unauthorized = self.fake.scenario.on_unauthorized, None
        if hook is not None:  # before the answer: a client that retries at once sees what it did
            hook()
        self._send(401, {"error": "Unauthenticated", "code": 16, "message": "invalid bearer token"})
        return False

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        with self.fake.lock:
            self.fake.requests.append((method, url.path))
        if self.fake.scenario.fail_with is not None:
            status = self.fake.scenario.fail_with
            return self._send(status, {"error": f"fake KFP answering {status}", "code": 14})
        if not self._authorised():
            return
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body: dict[str, Any] = {}
        if method == "POST":
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        route = url.path.removeprefix(API)
        if route == "/healthz" and method == "GET":
            multi_user = self.fake.scenario.multi_user
            return self._send(200, {"commit_sha": "fake", "tag_name": "2.5.0", "multi_user": multi_user})
        if route == "/experiments":
            return self._experiments(method, query, body)
        if route == "/runs":
            return self._runs(method, query, body)
        if route.startswith("/runs/") and route.endswith(":terminate") and method == "POST":
            return self._terminate(route.removeprefix("/runs/").removesuffix(":terminate"))
        if route.startswith("/runs/") and method == "GET":
            time.sleep(self.fake.scenario.get_delay_s)
            return self._get_run(route.removeprefix("/runs/"))
        return self._send(404, {"error": f"no route {method} {url.path}", "code": 5})

    def _experiments(self, method: str, query: dict[str, str], body: dict[str, Any]) -> None:
        fake = self.fake
        namespace = query.get("namespace", "") if method == "GET" else body.get("namespace") or ""
        if fake.scenario.multi_user and not namespace:
            message = (
                "An experiment cannot have an empty namespace in multi-user mode"
                if method == "GET"
                else "Invalid input error: Namespace cannot be empty"
            )
            return self._send(400, {"error": message, "code": 3, "message": message})
        in_namespace = [e for e in fake.experiments.values() if e.get("namespace", "") == namespace]
        if method == "GET":
            name = _predicate_value(query.get("filter"), "display_name")
            found = [e for e in in_namespace if name is None or e["display_name"] == name]
            return self._send(200, {"experiments": found, "total_size": len(found)} if found else {})
        experiment = {
            "experiment_id": str(uuid.uuid4()),
            "display_name": body["display_name"],
            "created_at": CREATED_AT,
            "storage_state": "AVAILABLE",
            **({"namespace": namespace} if namespace else {}),
        }
        exists = any(e["display_name"] == body["display_name"] for e in in_namespace)
        if not exists and fake.scenario.experiment_races > 0:  # another client's create came first
            fake.scenario.experiment_races -= 1
            fake.experiments[experiment["experiment_id"]] = experiment
            exists = True
        if exists:  # KFP's answer (backend/src/apiserver/storage/experiment_store.go), gRPC AlreadyExists
            message = (
                f"Failed to create a new experiment. The name {body['display_name']} already exist. "
                "Please specify a new name"
            )
            return self._send(409, {"error": message, "code": 6, "message": message})
        fake.experiments[experiment["experiment_id"]] = experiment
        return self._send(200, experiment)

    def _runs(self, method: str, query: dict[str, str], body: dict[str, Any]) -> None:
        fake = self.fake
        if method == "GET":
            found = [
                {**r, "state": self._state(r["run_id"])[0]}
                for r in fake.runs.values()
                if r["experiment_id"] == query.get("experiment_id") and _matches(query.get("filter"), r)
            ]
            start, size = int(query.get("page_token") or 0), int(query.get("page_size") or 10)
            page: dict[str, Any] = {"runs": found[start : start + size], "total_size": len(found)}
            if start + size < len(found):
                page["next_page_token"] = str(start + size)
            return self._send(200, page if found else {})
        if fake.scenario.create_delay_s:
            time.sleep(fake.scenario.create_delay_s)
        if fake.scenario.reject_runs:
            return self._send(400, {"error": "invalid run: world_size_n is out of range", "code": 3})
        if body.get("experiment_id") and body["experiment_id"] not in fake.experiments:
            # As KFP: a run in an experiment that does not exist (deleted) is NotFound.
            message = f"Failed to create a run: experiment {body['experiment_id']} not found"
            return self._send(404, {"error": message, "code": 5})
        # With a platform spec (ours has one) the body nests {"pipeline_spec": ..., "platform_spec": ...}.
        spec = body.get("pipeline_spec") or {}
        spec = spec.get("pipeline_spec", spec)
        parameters = (body.get("runtime_config") or {}).get("parameters") or {}
        pipeline = spec.get("pipelineInfo", {}).get("name")
        required = REQUIRED_PARAMETER.get(pipeline)
        if required is None or required not in parameters:
            return self._send(400, {"error": "not a benchgate pipeline run", "code": 3})
        run = {
            "run_id": str(uuid.uuid4()),
            "display_name": body["display_name"],
            "experiment_id": body["experiment_id"],
            "state": "PENDING",
            "created_at": CREATED_AT,
            "runtime_config": {"parameters": parameters},
        }
        with fake.lock:
            fake.runs[run["run_id"]] = run
            fake.pipelines[run["run_id"]] = pipeline
            if fake.scenario.initial is not None:
                fake.forced[run["run_id"]] = fake.scenario.initial
            fake.created_runs.append(body)
            fake.created_at.append(time.monotonic())
        return self._send(200, run)

    def _terminate(self, run_id: str) -> None:
        fake = self.fake
        if run_id not in fake.runs:
            return self._send(404, {"error": f"run {run_id} not found", "code": 5})
        with fake.lock:
            if fake.scenario.ends_before_terminate is not None:
                fake.forced[run_id] = fake.scenario.ends_before_terminate
            state = self._state(run_id)[0]
            if state not in TERMINABLE:
                message = (
                    f"Failed to terminate a run: Failed to terminate run {run_id}: Invalid input error: "
                    f"Failed to terminate a run {run_id}. Row not found"
                )
                return self._send(400, {"error": message, "code": 3, "message": message})
            fake.terminated.append(run_id)
            fake.forced[run_id] = ("CANCELED", "CANCELED")
        return self._send(200, {})

    def _state(self, run_id: str) -> tuple[str, str, bool]:
        """(state, outcome for the task details, done) of a run after the polls it has had so far."""
        fake = self.fake
        outcome = fake.scenario.outcome
        polls = fake.polls.get(run_id, 0)
        done = outcome != "RUNNING" and polls > fake.scenario.polls_until_done
        state = "RUNNING" if polls else "PENDING"
        if done:
            state = {"SUCCEEDED": "SUCCEEDED", "CANCELED": "CANCELED"}.get(outcome, "FAILED")
        if run_id in fake.forced:
            state, outcome = fake.forced[run_id]
            done = state in ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED")
        return state, outcome, done

    def _get_run(self, run_id: str) -> None:
        fake = self.fake
        run = fake.runs.get(run_id)
        if run is None:
            return self._send(404, {"error": f"run {run_id} not found", "code": 5})
        fake.polls[run_id] = fake.polls.get(run_id, 0) + 1
        state, outcome, done = self._state(run_id)
        details = _task_details(outcome, done, fake.pipelines.get(run_id, "benchgate"))
        run = {**run, "state": state, "run_details": {"task_details": details}}
        return self._send(200, run)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


def serve(fake: FakeKfp) -> tuple[ThreadingHTTPServer, str]:
    """Start the fake on a free port of 127.0.0.1; returns the server and its base URL."""
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
