"""A throwaway `mlflow server` on 127.0.0.1 for the benchmark scripts (lean: one worker, no job runner).

It serves artifacts itself (--artifacts-destination), as a shared team server does. The tests start
theirs the same way (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import requests

MLFLOW = Path(sys.executable).with_name("mlflow")
QUIET_ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mlflow_server(
    workdir: Path, port: int | None = None, extra_args: Sequence[str] = (), timeout_s: float = 90
) -> Iterator[tuple[str, Path]]:
    """Yields (URI, access log) of a server storing in `workdir`; always stops it."""
    port = port or free_port()
    log = workdir / "server.log"
    command = [str(MLFLOW), "server", "--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}",
               "--artifacts-destination", str(workdir / "artifacts"), "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1", *extra_args]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **QUIET_ENV}
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        while True:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{uri}/health", timeout=2).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() - started > timeout_s:
                sys.exit(f"mlflow server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        print(f"mlflow server up at {uri} after {time.monotonic() - started:.1f} s", flush=True)
        yield uri, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
