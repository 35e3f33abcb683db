"""The operator tests' fixtures: `cluster` (the real controller, in its own thread, against kmock's
emulated Kubernetes API and the FAKE KFP server), `fake_kfp` and `kmock_options`. Helpers that tests
import by name (Cluster, run_manifest, the audits) are in operator_harness.py."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import pytest_asyncio
from fake_kfp_server import FakeKfp, Scenario, serve
from operator_harness import (
    POLL_S,
    ApiServerEmulator,
    Cluster,
    FastClock,
    forbidden_requests,
    git,
    refused_statuses,
    written_statuses,
)

from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.main import ControllerThread, build
from benchgate.controller.settings import ControllerSettings
from benchgate.kfp.api import Connection


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    return {**kmock_options, "cls": ApiServerEmulator}


@pytest.fixture
def fake_kfp() -> Iterator[tuple[FakeKfp, str]]:
    state = FakeKfp(Scenario(token="controller-token", outcome="RUNNING"))
    server, url = serve(state)
    yield state, url
    server.shutdown()


@pytest_asyncio.fixture
async def cluster(
    kmock: Any,
    fake_kfp: tuple[FakeKfp, str],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Cluster]:
    """The controller running against the emulator; `indirect` parameters override its settings
    (max_active_per_namespace, mlflow_ui; `mlflow`: the real MLflow server), the clock speed
    (`speed`), objects created before the controller starts (`precreate`), the emulator's admission
    checks (`enforce_owner_references`, `refuse_creates`: ApiServerEmulator) and a KFP token read from
    a file (`token_file`)."""
    options: dict[str, Any] = dict(getattr(request, "param", {}))
    if options.pop("mlflow", False):  # the session's real `mlflow server` (tests/conftest.py)
        options["mlflow_uri"] = request.getfixturevalue("mlflow_server")
    kmock.resources.load_bundled()
    for plural, kind in (("benchmarkruns", "BenchmarkRun"), ("benchmarkschedules", "BenchmarkSchedule")):
        kmock.resources[f"{GROUP}/{VERSION}/{plural}"] = {
            "kind": kind,
            "namespaced": True,
            "verbs": {"list", "watch", "get", "create", "patch", "update", "delete"},
            "subresources": {"status"},
        }
    state, kfp_url = fake_kfp
    url = str(kmock.url).rstrip("/")
    clock = FastClock(float(options.pop("speed", 1.0)))
    precreate = options.pop("precreate", [])
    kmock.enforce_owner_references = options.pop("enforce_owner_references", False)
    kmock.refuse_creates = options.pop("refuse_creates", None)
    kmock.faults = []  # Cluster.fail adds to it
    # `token_file`: the controller reads its KFP token from a file (a projected ServiceAccount token).
    token_file = tmp_path_factory.mktemp("token") / "token" if options.pop("token_file", False) else None
    if token_file is not None:
        token_file.write_text("controller-token\n", encoding="utf-8")
    connection = Connection(
        kfp_url, None if token_file else "controller-token", kfp_url, token_file=token_file
    )
    settings = ControllerSettings(
        kfp=connection,
        poll_s=POLL_S,
        schedule_poll_s=POLL_S,
        **options,
    )
    registry, runtime = build(settings, kube_host=url, clock=clock)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=url)

    harness = Cluster(kmock, url, state, kfp_url, clock, runtime, token_file)
    for manifest in precreate:  # objects that exist before the controller starts watching
        await harness.create(manifest)
    # The controller runs in its own thread and event loop, as it would in its own pod.
    controller = ControllerThread(settings, registry, runtime)
    assert await asyncio.to_thread(controller.start, 20), "the controller did not start within 20 s"
    yield harness
    assert await asyncio.to_thread(controller.stop, 20), "the controller did not stop within 20 s"
    # A kopf timer whose write the API server refused (Cluster.fail) leaves a task whose exception
    # nobody retrieved; asyncio logs it, with its traceback, when the task is collected. Collected
    # now, not inside a later `ast.parse` (pytest's assertion rewriting), where formatting that
    # traceback would parse source again, which Python 3.11's ast module reports as a SystemError.
    gc.collect()
    # Every test doubles as an RBAC audit: the controller used nothing the chart does not grant ...
    assert forbidden_requests(kmock) == []
    # ... and as a status audit: it wrote no status key (or value) its status model does not have.
    refused = refused_statuses(written_statuses(kmock))
    assert not refused, "\n".join(refused)


@pytest.fixture
def repository(tmp_path: Path) -> tuple[str, Path]:
    """A real git repository with a main branch; returns (file:// URL, path)."""
    repo = tmp_path / "trainer"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    (repo / "train.py").write_text("print('v1')\n")
    git(repo, "add", "train.py")
    git(repo, "commit", "--quiet", "-m", "v1")
    return repo.resolve().as_uri(), repo
