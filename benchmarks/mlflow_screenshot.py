"""Screenshot of the MLflow UI's runs table after two real gate runs (two commits, one machine profile).

Starts a throwaway MLflow server in a temp dir, makes a tiny git repository with two commits on `main`,
runs `benchgate run` on each commit with MLFLOW_TRACKING_URI pointing at the server, then opens the
experiment's runs table in headless Chromium by the link benchgate gives, in the view it keeps, and
saves the picture.

    .venv/bin/python benchmarks/mlflow_screenshot.py [--out docs/img/mlflow-runs.png]

Needs Chromium on PATH (`apt-get install -y chromium`) and mlflow in the same environment as benchgate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

from local_mlflow import QUIET_ENV, free_port, mlflow_server

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "benchgate"
# The browser opens the UI under this name, not 127.0.0.1: on a loopback hostname the UI auto-opens its
# Assistant side panel, which would cover a third of the table. Chromium resolves *.localhost to loopback.
UI_HOST = "mlflow.localhost"


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    fail("Chromium not found on PATH; install it with: apt-get install -y chromium")


def make_repo(repo: Path) -> list[str]:
    """Two commits on `main` that differ only in README: same code, so one machine profile, two SHAs."""
    git = ["git", "-C", str(repo), "-c", "user.name=benchgate", "-c", "user.email=benchgate@example.invalid",
           "-c", "commit.gpgsign=false"]  # fmt: skip
    repo.mkdir()
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    shas = []
    for text in ("first\n", "second\n"):
        (repo / "README").write_text(text)
        subprocess.run([*git, "add", "README"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", text.strip()], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                                   text=True).stdout.strip())  # fmt: skip
    return shas


def run_gates(tmp: Path, repo: Path, shas: list[str], uri: str) -> None:
    env = {**os.environ, **QUIET_ENV, "MLFLOW_TRACKING_URI": uri}
    for i, sha in enumerate(shas):
        cmd = [sys.executable, "-m", "benchgate", "run", "--commit", sha, "--repository", f"file://{repo}",
               "--branch", "main", "--workload-arg", "size=tiny", "--steps", "20", "--warmup", "3",
               "--update-baseline", "--out", str(tmp / f"out-{i}"),
               "--baseline-dir", str(tmp / "baselines")]  # fmt: skip
        print(f"benchgate run --commit {sha[:12]} ...", flush=True)
        code = subprocess.run(cmd, cwd=tmp, env=env).returncode
        # 0 = pass and 1 = regression are both verdicts; anything else means the gate itself broke.
        if code not in (0, 1):
            fail(f"benchgate run --commit {sha} exited with {code}")


def runs_table_url(uri: str) -> str:
    """The link benchgate gives to experiment 'benchgate's runs table, opened as UI_HOST.

    The columns are benchgate's own view, which each gate run keeps in the experiment tag
    `mlflow.sharedViewState.benchgate` and the link names: the picture is what users get.
    """
    from mlflow import MlflowClient  # here, not at the top: importing mlflow takes seconds

    from benchgate.tracking.view import TAG_VIEW, ui_url

    # Fail fast rather than retry for minutes if the server died under us.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    experiment = MlflowClient(tracking_uri=uri).get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        fail(f"no experiment {EXPERIMENT!r} at {uri}: did benchgate run log to MLflow?", code=3)
    if TAG_VIEW not in experiment.tags:
        fail(f"experiment {EXPERIMENT!r} has no {TAG_VIEW} tag: benchgate run did not set its view", code=3)
    return ui_url(uri.replace("127.0.0.1", UI_HOST), experiment.experiment_id)


def screenshot(chromium: str, url: str, out: Path, window: str, budget_ms: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="benchgate-chromium-") as profile:
        # No sandbox: often run as root in containers. The network flags keep it from calling out;
        # the virtual time budget is what lets the SPA fetch runs and render before the capture.
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={out}",
               f"--window-size={window}", f"--virtual-time-budget={budget_ms}", url]  # fmt: skip
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=30 + budget_ms / 1000)
        except subprocess.TimeoutExpired:
            # Seen when the budget ran out before the first page load ended: Chromium then never exits.
            fail(f"chromium hung taking the screenshot; try a larger --budget-ms than {budget_ms}")
    if result.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        fail(f"chromium made no screenshot (exit {result.returncode}):\n{result.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img/mlflow-runs.png"),
                        help="PNG to write; relative paths are from the repository root")  # fmt: skip
    # Wide enough for all of benchgate's columns at their widths; two runs need little height.
    parser.add_argument("--window", default="1920,560", help="browser window WIDTH,HEIGHT in pixels")
    parser.add_argument("--budget-ms", type=int, default=15000, help="Chromium virtual time budget")
    args = parser.parse_args(argv)
    out = args.out if args.out.is_absolute() else ROOT / args.out
    chromium = find_chromium()  # before minutes of gate runs, not after
    with tempfile.TemporaryDirectory(prefix="benchgate-mlflow-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        # The UI is opened as UI_HOST, so the server must accept that host name and its origin.
        ui_access = ["--allowed-hosts", f"127.0.0.1:{port},{UI_HOST}:{port}",
                     "--cors-allowed-origins", f"http://{UI_HOST}:{port}"]  # fmt: skip
        with mlflow_server(tmp, port, ui_access) as (uri, _):
            shas = make_repo(tmp / "repo")
            run_gates(tmp, tmp / "repo", shas, uri)
            url = runs_table_url(uri)
            start = time.monotonic()
            screenshot(chromium, url, out, args.window, args.budget_ms)
            seconds = time.monotonic() - start
    # Width and height open the IHDR chunk: after the 8-byte signature and the chunk's length and type.
    width, height = struct.unpack(">II", out.read_bytes()[16:24])
    print(f"url: {url}")
    print(f"wrote {out} ({width}x{height} px, {out.stat().st_size} bytes) in {seconds:.1f} s")


if __name__ == "__main__":
    main()
