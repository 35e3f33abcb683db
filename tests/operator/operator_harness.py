"""The operator tests' helpers (their fixtures `cluster`, `fake_kfp`, `kmock_options` are in conftest.py).

The real controller (kopf, every handler) against kmock's emulated Kubernetes API and the FAKE KFP
server (tests/support/fake_kfp_server.py), all in this process on 127.0.0.1.

kmock is an emulator, not an API server: it assigns no uid, creationTimestamp or generation, never
bumps resourceVersion, and replays objects on every watch (so create handlers can fire twice, which
the controller must survive). `Cluster.create` fills in what an API server would, and can check the
object against the CRD's schema first, as an API server does.

After each test, two audits of what the controller sent: every request is one the chart's RBAC allows
(`forbidden_requests`), and every status it wrote is its status model's (`refused_statuses`): a
handler writing a key the model lacks fails every test that reaches it.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import jsonpatch
import jsonschema
import yaml
from fake_kfp_server import FakeKfp
from kmock import KubernetesEmulator, KubernetesError, action
from pydantic import BaseModel, ValidationError

from benchgate.controller.access import GROUP, REQUIRED_ACCESS, VERSION, Access, allows
from benchgate.controller.decide.schedule import SCHEDULE_LABEL
from benchgate.controller.spec.crds import benchmarkrun_crd, benchmarkschedule_crd
from benchgate.controller.spec.status import BenchmarkRunStatus, BenchmarkScheduleStatus

REPO = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "https://github.com/example/trainer.git"
POLL_S = 0.2
TEST_CLIENT = {"User-Agent": "benchgate-tests"}
VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
STATUS_MODELS: dict[str, type[BaseModel]] = {
    "benchmarkruns": BenchmarkRunStatus,
    "benchmarkschedules": BenchmarkScheduleStatus,
}
SCHEMAS = {
    "benchmarkruns": benchmarkrun_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
    "benchmarkschedules": benchmarkschedule_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
}


class FastClock:
    """The controller's clock, running `speed` times faster than real time from the moment it starts:
    cron times, deadlines and TTLs of minutes pass in a fraction of a second."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.start = datetime.now(UTC)
        self.started = time.monotonic()

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=(time.monotonic() - self.started) * self.speed)


def run_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BenchmarkRun",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"commit": SHA, "repository": REPOSITORY, "worldSize": 2, **spec},
    }


def schema_errors(plural: str, manifest: dict[str, Any]) -> list[str]:
    """What an API server's schema check would refuse (CEL rules aside), as messages."""
    validator = jsonschema.Draft4Validator(_jsonschema(SCHEMAS[plural]))
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(manifest)]


def _jsonschema(node: Any) -> Any:
    """The CRD's OpenAPI schema as JSON Schema: `nullable` allows null, unknown fields are errors
    (kubectl's default strict field validation), vendor extensions dropped."""
    if isinstance(node, list):
        return [_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes") and k != "nullable"}
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    top_level = {"apiVersion", "kind", "metadata", "spec", "status"}
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and out["properties"].keys() != top_level
    ):
        out["additionalProperties"] = False
    return out


@attrs.frozen
class Forbidden(KubernetesError):  # type: ignore[misc]
    """HTTP 403 as the API server answers it (a Status object), for a create an admission check refuses."""

    status: int = 403
    reason: str = "Forbidden"
    message: str = ""


@dataclass
class Fault:
    """A failure the API server answers instead of serving: every request `match` accepts, `times`
    times, gets HTTP `status` and nothing of it is stored (a write lost to a 5xx, a timeout, a restart)."""

    match: Callable[[Any], bool]
    status: int
    times: int


class ApiServerEmulator(KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator plus what an API server adds to a new object (a name from generateName, uid,
    resourceVersion, creation time, generation): kopf patches with a resourceVersion test, and objects
    the controller creates itself (the schedule's runs, Events) need them as much as those the tests
    create.

    Two admission checks a real cluster may have, off unless a test turns them on (the `cluster`
    fixture's `enforce_owner_references` and `refuse_creates`): OpenShift's owner-reference enforcement,
    which refuses an object whose owner reference blocks the owner's deletion from a client that may not
    update the owner's finalizers; and a refusal of every BenchmarkRun the controller creates (a quota,
    a policy). `faults` (Cluster.fail): requests answered with an error before anything is stored, as
    a write the API server loses."""

    enforce_owner_references = False
    refuse_creates: str | None = None
    faults: list[Fault] = []  # noqa: RUF012  (the `cluster` fixture gives each emulator its own list)

    async def _handle(self, request: Any) -> Any:
        self._fail_if_faulty(request)
        if request.action == action.CREATE and request.headers.get("User-Agent") != TEST_CLIENT["User-Agent"]:
            self._admit(request)
        if request.action == action.CREATE and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            # kmock ignores generateName, so every Event kopf posts (all named through it) would share
            # one empty name and all but the first be refused (409): an API server makes it unique.
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:8]}"
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("resourceVersion", "1")
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta.setdefault("generation", 1)
        if request.action == action.UPDATE and not request.subresource and isinstance(request.data, dict):
            self._bump_generation(request)
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchException as e:
            # An API server refuses a JSON patch it cannot apply with 422, and stores nothing; kmock
            # would answer 500, which kopf retries for minutes. kopf sends its finalizer's changes
            # as a JSON patch computed on the body it last saw: after another write changed the
            # finalizers (which, as kmock never bumps resourceVersion, kopf's version test misses),
            # a real API server refuses it on that test, with 422 too.
            raise KubernetesError(422, "Invalid", f"the JSON patch does not apply: {e}", {}) from None

    def _fail_if_faulty(self, request: Any) -> None:
        # Before kmock's own handling: kmock stores a write even when one of its reactions answers it
        # with an error, so only an answer given here loses the write.
        for fault in self.faults:
            if fault.times > 0 and fault.match(request):
                fault.times -= 1
                reason = "InternalError" if fault.status >= 500 else "Invalid"
                # Details as an API server gives them (without any, kmock sends this server's traceback).
                details = {"name": request.name, "kind": request.resource and request.resource.plural}
                raise KubernetesError(fault.status, reason, "injected fault", details)

    def _bump_generation(self, request: Any) -> None:
        """As an API server does (kmock does not): a PATCH or PUT that changes the spec raises
        metadata.generation by one."""
        if "spec" not in request.data:
            return
        key = (request.resource, request.namespace, request.name)
        stored = next((obj for found, obj in self.objects.items() if found == key), None)
        if stored is None or stored.deleted:
            return
        old = dict(stored.raw)
        if _changes(old.get("spec") or {}, request.data["spec"]):
            generation = int(old.get("metadata", {}).get("generation") or 1) + 1
            request.data.setdefault("metadata", {})["generation"] = generation

    def _admit(self, request: Any) -> None:
        if self.refuse_creates is not None and request.resource.plural == "benchmarkruns":
            raise Forbidden(message=self.refuse_creates)
        owners = (request.data or {}).get("metadata", {}).get("ownerReferences", [])
        blocks_a_schedule = any(
            o.get("blockOwnerDeletion") and o.get("kind") == "BenchmarkSchedule" for o in owners
        )
        if (
            self.enforce_owner_references
            and blocks_a_schedule
            and not allows(GROUP, "benchmarkschedules/finalizers", "update")
        ):
            message = "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set"
            raise Forbidden(message=f"{request.resource.plural} is forbidden: {message} finalizers on")


def _changes(old: dict[str, Any], patch: Any) -> bool:
    """Whether merge-patching `old` with `patch` changes it (None removes a key)."""
    if not isinstance(patch, dict):
        return bool(old != patch)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            if _changes(old[key], value):
                return True
        elif (key in old) if value is None else old.get(key) != value:
            return True
    return False


@dataclass
class Cluster:
    kmock: Any
    url: str
    kfp: FakeKfp
    kfp_url: str
    clock: Callable[[], datetime]
    runtime: Any
    token_file: Path | None = None  # the controller's KFP token file, with the `token_file` option

    def fail(self, match: Callable[[Any], bool], status: int = 500, times: int = 1) -> Fault:
        """Answer the next `times` requests that `match` accepts (a kmock request: `.resource`,
        `.subresource`, `.data`, ...) with HTTP `status`, storing nothing; the Fault counts down."""
        fault = Fault(match, status, times)
        self.kmock.faults.append(fault)
        return fault

    def path(self, plural: str, namespace: str, name: str = "") -> str:
        base = f"{self.url}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
        return f"{base}/{name}" if name else base

    async def create(self, manifest: dict[str, Any], plural: str = "benchmarkruns") -> dict[str, Any]:
        """POST the object as kubectl would, with what an API server adds to metadata."""
        body = {**manifest, "metadata": dict(manifest["metadata"])}
        body["metadata"].setdefault("uid", str(uuid.uuid4()))
        body["metadata"].setdefault("creationTimestamp", self.clock().strftime("%Y-%m-%dT%H:%M:%SZ"))
        body["metadata"].setdefault("generation", 1)
        body["metadata"].setdefault("resourceVersion", "1")
        async with aiohttp.ClientSession(headers=TEST_CLIENT) as http:
            response = await http.post(self.path(plural, body["metadata"]["namespace"]), json=body)
            assert response.status in (200, 201), await response.text()
            return dict(await response.json())

    async def delete(self, name: str, namespace: str = "team-a", plural: str = "benchmarkruns") -> None:
        async with aiohttp.ClientSession(headers=TEST_CLIENT) as http:
            response = await http.delete(self.path(plural, namespace, name))
            assert response.status == 200, await response.text()

    def get(
        self, name: str, namespace: str = "team-a", plural: str = "benchmarkruns"
    ) -> dict[str, Any] | None:
        for (resource, ns, obj_name), obj in self.kmock.objects.items():
            if resource.plural == plural and ns == namespace and obj_name == name and not obj.deleted:
                return dict(obj.raw)
        return None

    def names(self, namespace: str = "team-a", plural: str = "benchmarkruns") -> list[str]:
        return [
            name
            for (resource, ns, name), obj in self.kmock.objects.items()
            if resource.plural == plural and ns == namespace and not obj.deleted
        ]

    def status(self, name: str, plural: str = "benchmarkruns") -> dict[str, Any]:
        obj = self.get(name, plural=plural)
        return dict((obj or {}).get("status") or {})

    async def wait(self, check: Callable[[], Any], timeout_s: float = 30.0, what: str = "") -> Any:
        """Poll `check` until it is truthy; the limit is generous for a loaded CI host, not a target."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what or check}")

    async def phase(self, name: str, phase: str, timeout_s: float = 30.0) -> dict[str, Any]:
        result: dict[str, Any] = await self.wait(
            lambda: self.status(name) if self.status(name).get("phase") == phase else None,
            timeout_s,
            f"{name} to reach phase {phase} (status now: {self.status(name)})",
        )
        return result

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        found = [
            dict(obj.raw)
            for (resource, _ns, _name), obj in self.kmock.objects.items()
            if resource.plural == "events" and not obj.deleted
        ]
        return [e for e in found if reason is None or e.get("reason") == reason]


def verb_of(request: Any) -> str:
    method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
    if method == "GET":
        if str(request.params.get("watch", "")).lower() in ("true", "1"):
            return "watch"
        return "get" if request.name else "list"
    return VERBS.get(method, method.lower())


def forbidden_requests(kmock: Any, access: Iterable[Access] = REQUIRED_ACCESS) -> list[str]:
    """Every request the controller sent that the chart's RBAC (`access`: the rules of a standalone
    controller unless given) would refuse. Discovery (no resource) is open to every authenticated
    client and is not counted."""
    refused = []
    for request in list(kmock):  # a kmock view iterates over the requests it served
        if request.resource is None or request.resource.plural is None:  # discovery
            continue
        if request.headers.get("User-Agent") == TEST_CLIENT["User-Agent"]:
            continue
        resource = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
        verb = verb_of(request)
        if not allows(request.resource.group or "", resource, verb, access):
            refused.append(f"{verb} {request.resource.group or 'core'}/{resource} ({request.url})")
    return refused


def written_statuses(kmock: Any) -> list[tuple[str, dict[str, Any]]]:
    """(plural, status) of every status patch the controller sent, kopf's own progress (`status.kopf`,
    kept by the CRD's preserved unknown fields) left out."""
    written = []
    for request in list(kmock):
        if request.resource is None or request.resource.plural not in STATUS_MODELS:
            continue
        if verb_of(request) != "patch" or request.headers.get("User-Agent") == TEST_CLIENT["User-Agent"]:
            continue
        status = (request.data or {}).get("status") if isinstance(request.data, dict) else None
        ours = {k: v for k, v in (status or {}).items() if k != "kopf"}
        if ours:
            written.append((request.resource.plural, ours))
    return written


def refused_statuses(written: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """What the status models (extra="forbid") refuse of `written`: a key a model lacks, a wrong type."""
    refused = []
    for plural, status in written:
        try:
            STATUS_MODELS[plural].model_validate(status)
        except ValidationError as e:
            refused.append(f"{plural}: {status}: {e}")
    return refused


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def schedule_manifest(name: str, url: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BenchmarkSchedule",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "schedule": "* * * * *",
            "runTemplate": {
                "metadata": {"labels": {"team": "infra"}},
                "spec": {"repository": url, "branch": "main", "worldSize": 2},
            },
            **spec,
        },
    }


def owned(cluster: Cluster, schedule: str) -> list[dict[str, Any]]:
    runs = [cluster.get(n) for n in cluster.names()]
    return [r for r in runs if r and r["metadata"].get("labels", {}).get(SCHEDULE_LABEL) == schedule]


async def finish(cluster: Cluster, run: dict[str, Any], state: str = "SUCCEEDED") -> None:
    name = run["metadata"]["name"]
    run_id = await cluster.wait(lambda: cluster.status(name).get("kfpRunId"), what=f"{name} submitted")
    cluster.kfp.force(run_id, state, "GATE_FAILED" if state == "FAILED" else state)
    await cluster.wait(lambda: cluster.status(name).get("phase") in ("Succeeded", "Failed"), what="done")
