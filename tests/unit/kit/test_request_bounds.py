"""Every call of a generated API client is time-bounded (kit/request_bounds.py): against a server that
accepts the connection and never answers, a Kubernetes API call ends with a timeout instead of
holding its thread for good."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import urllib3

from benchgate.kit import kube
from benchgate.kit.request_bounds import bound_requests


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts every connection, reads, and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


def test_a_kubernetes_call_to_a_server_that_never_answers_times_out(silent_server: str) -> None:
    from kubernetes import client

    api_client = kube.api_client(silent_server)  # bounded as every benchgate component gets it
    bound_requests(api_client.rest_client, read_timeout_s=0.5)  # the test's own, shorter bound
    objects = client.CustomObjectsApi(api_client)
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.MaxRetryError) as info:
        objects.list_namespaced_custom_object("benchgate.dev", "v1alpha1", "team-a", "benchmarkruns")
    assert isinstance(info.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert "read timeout=0.5" in str(info.value)
    assert time.monotonic() - started < 5  # one read timeout: a timed-out read is not retried


def test_a_call_that_gives_its_own_timeout_keeps_it(silent_server: str) -> None:
    from kubernetes import client

    api_client = kube.api_client(silent_server)
    objects = client.CustomObjectsApi(api_client)
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.MaxRetryError, match=r"read timeout=0\.3"):
        objects.list_namespaced_custom_object(
            "benchgate.dev", "v1alpha1", "team-a", "benchmarkruns", _request_timeout=(1, 0.3)
        )
    assert time.monotonic() - started < 5
