"""How long benchgate takes to detect and report each fault of docs/reliability.md, by real faults.

    python benchmarks/faults.py [--trials 3] [--only rank-kill,rank-hang,mlflow-down,disk-full]

- rank-kill:   `kill -9` of rank 1 of a ws=2 torchrun mid-step → seconds from the kill to the error
               (exit 3, naming rank 1), bench.timeout_s=10.
- rank-hang:   rank 1 stops inside a step, bench.timeout_s=10 → seconds from the hang to the error.
- mlflow-down: a whole `benchgate run` with tracking.uri on a port nothing listens on and the default
               budget (tracking.max_wait_s=30) beside the same run with --no-tracking, interleaved:
               the wall time the outage costs, and what tracking.json says was waited.
- disk-full:   a whole `benchgate run` whose --out is a 200 KiB tmpfs (made here; needs root) → seconds
               from the start to exit 3 naming the path, beside a run with room, interleaved.

Every figure is printed and saved to benchmarks/results/faults.json.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig
from benchgate.errors import BenchgateError
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import stage_bench

RESULTS = Path(__file__).resolve().parent / "results"

WORKLOAD = '''
"""A tiny linear model that can announce its pid at a step, or stop inside one."""
import os, time
from pathlib import Path
import torch
from torch import nn
import torch.nn.functional as F
from benchgate.workloads.base import FlopsPerToken


class Faulty:
    name = "faulty"
    tokens_per_step = 64

    def __init__(self, directory, fault="none", at_step=5, rank=1):
        self.directory, self.fault, self.at_step, self.rank = Path(directory), fault, int(at_step), int(rank)
        self.steps = 0

    def build_model(self, device):
        return nn.Linear(16, 16).to(device)

    def make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.05)

    def make_batch(self, generator, device):
        return torch.randn(4, 16, generator=generator).to(device)

    def forward(self, model, batch):
        self.steps += 1
        time.sleep(0.02)
        mine = int(os.environ.get("RANK", "-1")) == self.rank
        if mine and self.steps == self.at_step:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / "fault").write_text(f"{os.getpid()} {time.time()}")
            if self.fault == "hang":
                time.sleep(3600)
        return model(batch)

    def loss(self, output, batch):
        return F.mse_loss(output, batch)

    def flops_per_token(self):
        return FlopsPerToken(dense_6n=6 * 272, attention_aware=6 * 272)


def make(directory, fault="none", at_step=5, rank=1):
    return Faulty(directory, fault, at_step, rank)
'''


def _config(work: Path, fault: str, steps: int = 3000) -> RunConfig:
    return RunConfig.model_validate(
        {
            "bench": {
                "workload": "faultwork:make",
                "workload_args": {"directory": str(work / "signals"), "fault": fault},
                "steps": steps,
                "warmup": 1,
                "timeout_s": 10,
            },
            "out": str(work / "out"),
        }
    )


def _wait_for(path: Path, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists() or not path.read_text():
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.02)
    return path.read_text()


def rank_fault(fault: str, work: Path) -> dict[str, Any]:
    """Seconds from the fault (kill, or the start of the hang) to stage_bench's error."""
    started: list[float] = []

    def kill_when_announced() -> None:
        pid, at = _wait_for(work / "signals" / "fault").split()
        if fault == "kill":
            os.kill(int(pid), signal.SIGKILL)
            started.append(time.time())
        else:
            started.append(float(at))

    watcher = threading.Thread(target=kill_when_announced, daemon=True)
    watcher.start()
    try:
        stage_bench(_config(work, "hang" if fault == "hang" else "none"), 2, work / "out")
    except BenchgateError as e:
        ended = time.time()
        watcher.join(5)
        return {"detect_s": ended - started[0], "exit_code": e.exit_code, "message": str(e).splitlines()[0]}
    raise AssertionError("the run did not fail")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_run(work: Path, out: Path, *extra: str) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "benchgate", "run", "--workload", "faultwork:make", "--workload-arg",
        f"directory={work / 'signals'}", "--steps", "30", "--warmup", "2", "--world-sizes", "1", "--no-eval",
        "--no-trace", "--out", str(out), "--baseline-dir", str(work / "baselines"), *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    lines = (done.stdout + done.stderr).strip().splitlines()
    return {"wall_s": wall, "exit_code": done.returncode, "last_line": lines[-1] if lines else ""}


def mlflow_down(work: Path) -> dict[str, Any]:
    dead = f"http://127.0.0.1:{_free_port()}"
    down = cli_run(work, work / "out-down", "--tracking-uri", dead, "--tracking")
    tracking = work / "out-down" / "tracking.json"
    down["waited_s"] = read_json(tracking).get("waited_s") if tracking.exists() else None
    off = cli_run(work, work / "out-off", "--no-tracking")
    return {"down": down, "no_tracking": off, "extra_s": down["wall_s"] - off["wall_s"]}


def disk_full(work: Path) -> dict[str, Any]:
    full = work / "full"
    full.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(full)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        return {"skipped": f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}"}
    try:
        result = cli_run(work, full / "out", "--no-tracking")
    finally:
        subprocess.run(["umount", str(full)], check=False)
    roomy = cli_run(work, work / "out-roomy", "--no-tracking")
    return {"full": result, "with_room": roomy}


def summary(values: list[float]) -> str:
    median, low, high = statistics.median(values), min(values), max(values)
    return f"median {median:.2f} s (min {low:.2f}, max {high:.2f}, n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--only", default="rank-kill,rank-hang,mlflow-down,disk-full")
    args = parser.parse_args()
    chosen = args.only.split(",")
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
    with tempfile.TemporaryDirectory(prefix="benchgate-faults-") as tmp:
        module_dir = Path(tmp) / "workload"
        module_dir.mkdir()
        (module_dir / "faultwork.py").write_text(WORKLOAD)
        sys.path.insert(0, str(module_dir))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(module_dir), os.environ.get("PYTHONPATH")])
        )
        for trial in range(args.trials):  # each trial runs every fault once: interleaved
            for name in chosen:
                work = Path(tmp) / f"{name}-{trial}"
                work.mkdir()
                if name == "rank-kill":
                    result = rank_fault("kill", work)
                elif name == "rank-hang":
                    result = rank_fault("hang", work)
                elif name == "mlflow-down":
                    result = mlflow_down(work)
                else:
                    result = disk_full(work)
                measured[name].append(result)
                print(f"{name} trial {trial + 1}: {result}", flush=True)
    print()
    for name, results in measured.items():
        if name in ("rank-kill", "rank-hang"):
            print(
                f"{name}: detected in {summary([r['detect_s'] for r in results])}; "
                f"exit {results[0]['exit_code']}"
            )
        elif name == "mlflow-down":
            print(
                f"{name}: run {summary([r['down']['wall_s'] for r in results])} vs --no-tracking "
                f"{summary([r['no_tracking']['wall_s'] for r in results])}; outage costs "
                f"{summary([r['extra_s'] for r in results])}; "
                f"waited_s {[r['down']['waited_s'] for r in results]}; "
                f"exit {[r['down']['exit_code'] for r in results]}"
            )
        elif any("skipped" in r for r in results):
            print(f"{name}: skipped ({results[0].get('skipped')})")
        else:
            print(
                f"{name}: exit {[r['full']['exit_code'] for r in results]} after "
                f"{summary([r['full']['wall_s'] for r in results])}; with room "
                f"{summary([r['with_room']['wall_s'] for r in results])}"
            )
    RESULTS.mkdir(exist_ok=True)
    write_json(RESULTS / "faults.json", measured)


if __name__ == "__main__":
    main()
