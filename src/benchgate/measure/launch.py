"""Launch `torchrun -m benchgate.measure.bench` for one world size; its outcome as files or a clear error.

torchrun's own output goes to a log file; rank 0's progress lines drive a callback. A run that outlives
`bench.run_timeout_s` is killed with its whole process group. When torchrun fails, the ranks' error
files name the root cause: the earliest error wins, and ranks that wrote none are reported as suspected
hung, which is what a collective timeout on their peers means.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchgate.config import RunConfig
from benchgate.errors import EXIT_BAD_INPUT, BadInputError, ConfigError, RunFailedError
from benchgate.kit import lifeline
from benchgate.kit.cpus import HOST_CGROUP, CgroupPaths, cpu_quota
from benchgate.kit.files import read_json, write_json
from benchgate.kit.progress import PROGRESS_PREFIX
from benchgate.measure.env import usable_cpu_cores

ProgressCallback = Callable[[int, int], None]


def visible_gpus() -> int:
    """CUDA devices this process can use.

    torch is imported here, not at the top, and only where an NVIDIA driver exists: a pipeline task that
    launches torchrun (the count comes from env.json) and `benchgate run` on a laptop never pay ~2 s for it.
    """
    if not Path("/proc/driver/nvidia").exists() and shutil.which("nvidia-smi") is None:
        return 0  # torch reaches CUDA devices only through the NVIDIA driver
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def uses_cuda(device: str, gpus: int) -> bool:
    return device == "cuda" or (device == "auto" and gpus > 0)


# Intra-op threads per rank on a GPU host whose pod has no CPU limit. Fixed, not the node's cores // ranks:
# threads_per_rank is part of what makes two runs comparable, and two nodes of the same GPU type with
# different CPU counts must not be refused as different setups. A GPU rank's host work (the Python loop,
# a batch, the launches) uses few threads.
GPU_THREADS_WITHOUT_QUOTA = 4
# Where a profiled launch (stage_bench(op_trace=True)) writes its ranks' traces, under its out_dir.
OP_TRACE_DIR = "op-trace"


def resolve_threads(
    requested: int | None, device_type: str, world_size: int, cgroup: CgroupPaths = HOST_CGROUP
) -> int:
    """Intra-op threads per rank: `bench.threads_per_rank` when set; on CPU one per rank; on CUDA the
    pod's own CPU quota shared by its ranks, else GPU_THREADS_WITHOUT_QUOTA, never the node's CPU count."""
    if requested:
        return requested
    if device_type == "cuda":
        # The quota is the pod's CPU limit: 4 CPUs give 2 threads at ws=2 on a 96- or a 224-core node.
        quota = cpu_quota(cgroup)
        if quota is None:
            return GPU_THREADS_WITHOUT_QUOTA
        return max(1, math.floor(quota) // world_size)
    # On CPU a rank stands for one device: one thread each, so ws=1 and ws=N give every rank the same
    # resources and tokens/s(N) / (N x tokens/s(1)) means what it means on GPUs.
    return 1


def default_world_sizes(device: str, gpus: int) -> list[int]:
    if uses_cuda(device, gpus):
        return [1, gpus] if gpus > 1 else [1]
    # Two CPU ranks need two usable cores: a pod limited to one CPU measures ws=1 only.
    return [1, 2] if usable_cpu_cores() >= 2 else [1]


def check_world_size(world_size: int, device: str, gpus: int) -> None:
    if device == "cuda" and gpus == 0:
        raise ConfigError("bench.device: got 'cuda' but torch sees no CUDA device")
    if uses_cuda(device, gpus):
        available, what = gpus, "CUDA devices"
    else:
        available, what = usable_cpu_cores(), "usable CPU cores (affinity mask and CPU quota)"
    if world_size > available:
        raise ConfigError(
            f"bench.world_sizes: got {world_size}, but this machine has only {available} {what}"
        )


def metrics_path(out_dir: Path, world_size: int) -> Path:
    return out_dir / f"metrics-ws{world_size}.json"


@dataclass(frozen=True)
class NodeLayout:
    """This node's place in a world that spans nodes: torchrun starts `procs_per_node` ranks here, and
    rank 0 runs on node 0 at `master_addr` (measure/node.py reads it from Kubeflow Trainer's PET_* env)."""

    nodes: int
    procs_per_node: int
    node_rank: int
    master_addr: str
    master_port: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def ranks(self) -> range:
        """The global ranks torchrun starts on this node."""
        first = self.node_rank * self.procs_per_node
        return range(first, first + self.procs_per_node)

    def torchrun_args(self) -> list[str]:
        # Static rendezvous at rank 0's node: every node knows its rank, nothing is elected.
        return [
            f"--nnodes={self.nodes}",
            f"--nproc-per-node={self.procs_per_node}",
            f"--node-rank={self.node_rank}",
            f"--master-addr={self.master_addr}",
            f"--master-port={self.master_port}",
        ]


def stage_bench(
    config: RunConfig,
    world_size: int,
    out_dir: Path,
    on_progress: ProgressCallback | None = None,
    gpus: int | None = None,
    *,
    source_paths: Sequence[Path] = (),
    turns: tuple[str, str] | None = None,
    pin_cores: bool = True,
    node: NodeLayout | None = None,
    per_launch: int | None = None,
    count_flops: bool = True,
    op_trace: bool = False,
    op_trace_memory: bool = False,
) -> Path:
    """Run the benchmark at `world_size` under torchrun; returns the metrics file rank 0 wrote.

    `gpus` is the host's CUDA device count when the caller knows it (from env.json); else torch is asked.
    `source_paths` put the code under test first on the workers' import path (after benchgate itself);
    `turns` = (coordinator address, side) makes the workers take turns with another group (A/B), with
    rank r of both groups on the same cores unless `pin_cores` is off.
    `node`: this torchrun starts only this node's ranks of a world that spans nodes, and prints what
    they print as it goes (a pod's log is where its output is read). Rank 0 runs on node 0, so the
    metrics file exists only there; on the other nodes the returned path names a file never written.
    `per_launch`: the GPUs the run's largest launch uses (env.json's `gpu.per_launch`), which the
    metrics' machine profile names as env.json's does, whatever this pod sees. `count_flops` off skips
    the FLOP count (an A/B round's launch, whose step times are all that is read); a launch that takes
    turns never counts. `op_trace`: the measured steps run under torch.profiler, each rank writing its
    trace into `<out_dir>/op-trace/` (measure/op_trace.py; an A/B's explaining round), with allocations
    where `op_trace_memory`.
    """
    gpus = visible_gpus() if gpus is None else gpus
    local_ranks = world_size
    if node is not None:
        if node.world_size != world_size:
            raise ConfigError(
                f"world size: got {world_size}, but {node.nodes} nodes x {node.procs_per_node} processes "
                f"per node make {node.world_size}"
            )
        local_ranks = node.procs_per_node
    check_world_size(local_ranks, config.bench.device, gpus)
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = write_json(out_dir / "config.json", config.model_dump(mode="json"))
    errors_dir = out_dir / "errors" / f"ws{world_size}"
    for stale in errors_dir.glob("rank*.json"):
        stale.unlink()
    log_path = out_dir / "logs" / f"bench-ws{world_size}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    out = metrics_path(out_dir, world_size)
    out.unlink(missing_ok=True)
    device_type = "cuda" if uses_cuda(config.bench.device, gpus) else "cpu"
    threads = resolve_threads(config.bench.threads_per_rank, device_type, local_ranks)
    world = node.torchrun_args() if node else ["--standalone", f"--nproc-per-node={world_size}"]
    # torchrun is tied to this process (kit/lifeline.py): if this task is killed, torchrun stops its ranks.
    cmd = lifeline.command(
        os.getpid(),
        "torch.distributed.run",
        *world,
        "--max-restarts=0",
        "-m",
        "benchgate.measure.bench",
        "--config",
        str(config_path),
        "--out",
        str(out),
        "--errors-dir",
        str(errors_dir),
        *(arg for path in source_paths for arg in ("--source-path", str(path))),
        *(["--turns", turns[0], "--side", turns[1]] if turns else []),
        *(["--no-pin"] if turns and not pin_cores else []),
        *(["--per-launch", str(per_launch)] if per_launch else []),
        *([] if count_flops else ["--no-count"]),
        *(["--op-trace", str(out_dir / OP_TRACE_DIR)] if op_trace else []),
        *(["--op-trace-memory"] if op_trace and op_trace_memory else []),
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )
        timed_out = threading.Event()

        def kill_on_timeout() -> None:
            timed_out.set()
            lifeline.kill_tree(proc.pid)

        watchdog = threading.Timer(config.bench.run_timeout_s, kill_on_timeout)
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if node is not None:  # a pod's log is where a node's output is read
                    sys.stdout.write(line)
                    sys.stdout.flush()
                if line.startswith(PROGRESS_PREFIX):
                    done, total = line.split()[1:3]
                    if on_progress:
                        on_progress(int(done), int(total))
                else:
                    log.write(line)
            returncode = proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                lifeline.kill_tree(proc.pid)
                proc.wait()
    if timed_out.is_set():
        raise RunFailedError(
            f"bench ws={world_size}: killed after bench.run_timeout_s={config.bench.run_timeout_s:g} s; "
            f"log: {log_path}"
        )
    if returncode != 0:
        ranks = node.ranks if node else range(world_size)
        raise _failure(world_size, errors_dir, log_path, config.bench.timeout_s, ranks)
    if not out.exists() and (node is None or 0 in node.ranks):
        raise RunFailedError(
            f"bench ws={world_size}: torchrun exited 0 but wrote no {out.name}; log: {log_path}"
        )
    return out


# torchrun's failure summary: one block per failed rank, e.g.
#   rank      : 1 (local_rank: 1)
#   exitcode  : -9 (pid: 26646)  (SIGKILL)
_RANK_EXIT = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)")


def killed_ranks(log_text: str) -> dict[int, tuple[signal.Signals, int]]:
    """Ranks that torchrun saw die of a signal it did not send itself: rank → (signal, pid).

    torchrun stops the surviving ranks with SIGTERM once one has died, so SIGTERM is its own teardown,
    not a cause; a rank killed by anything else (SIGKILL from a user or the OOM killer, SIGSEGV) is.
    """
    killed = {}
    for rank, code, pid in _RANK_EXIT.findall(log_text):
        number = -int(code)
        if number > 0 and number != signal.SIGTERM:
            with contextlib.suppress(ValueError):
                killed[int(rank)] = (signal.Signals(number), int(pid))
    return killed


def _failure(
    world_size: int, errors_dir: Path, log_path: Path, timeout_s: float, ranks: range
) -> Exception:
    """The cause of a failed torchrun that started `ranks` (all of them, or one node's)."""
    log_text = log_path.read_text(encoding="utf-8", errors="replace")
    killed = killed_ranks(log_text)
    if killed:
        # A rank that died of a signal wrote no error file, and its peers' errors ("connection closed by
        # peer") are consequences: the killed rank is the cause, however the others reported.
        rank, (sig, pid) = min(killed.items())
        hint = " (the OOM killer sends SIGKILL too: check `dmesg`)" if sig == signal.SIGKILL else ""
        return RunFailedError(
            f"bench ws={world_size}: rank {rank} was killed by {sig.name} (signal {int(sig)}, pid {pid})"
            f"{hint}\n  log: {log_path}"
        )
    reports = []
    for path in sorted(errors_dir.glob("rank*.json")):
        try:
            reports.append(read_json(path))
        except ValueError:
            continue
    if not reports:
        tail = "".join(log_text.splitlines(True)[-15:])
        return RunFailedError(
            f"bench ws={world_size}: torchrun failed before any rank reported; log tail:\n{tail}"
        )
    reports.sort(key=lambda r: r["time"])
    first = reports[0]
    silent = sorted(set(ranks) - {r["rank"] for r in reports})
    message = f"bench ws={world_size}: rank {first['rank']} failed: {first['type']}: {first['message']}"
    if silent:
        named = ", ".join(str(r) for r in silent)
        message += (
            f"\n  rank(s) {named} reported no error: probably hung (collective timeout "
            f"bench.timeout_s={timeout_s:g} s)"
        )
    message += f"\n  log: {log_path}"
    if first["exit_code"] == EXIT_BAD_INPUT:
        return BadInputError(message)
    return RunFailedError(message)
