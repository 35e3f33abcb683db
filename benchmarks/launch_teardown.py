"""A torchrun launch with and without the interpreters' teardown after the work is done.

The bench worker (`benchgate.measure.bench`) and the torchrun process around it (`benchgate.kit.lifeline`)
leave with `os._exit` once their output is written and flushed, skipping Python's teardown with torch
loaded. This measures what that saves per launch, as `stage_bench` pays it (every bench, and both worker
groups of every A/B round): the same torchrun command, once as shipped and once through a wrapper that
runs the same worker and torchrun code and then exits the ordinary way, interleaved launch by launch so
host drift hits both alike. Reported: median wall seconds per launch of each, and their ratio.

    python benchmarks/launch_teardown.py [--launches 8] [--world-size 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchgate.config import load_config
from benchgate.kit.files import write_json

# The ordinary exit, for comparison: the worker's main and torchrun's main, then `sys.exit`.
WORKER = "import sys; from benchgate.measure.bench import main; sys.exit(main())"
TORCHRUN = "import sys; from torch.distributed.run import main; main(); sys.exit(0)"


def launch(shipped: bool, world_size: int, config: Path, out: Path) -> float:
    errors = out.parent / "errors"
    worker_args = ["--config", str(config), "--out", str(out), "--errors-dir", str(errors)]
    torchrun = ["--standalone", f"--nproc-per-node={world_size}", "--max-restarts=0"]
    if shipped:  # exactly what measure/launch.py runs
        cmd = [sys.executable, "-m", "benchgate.kit.lifeline", str(os.getpid()), "torch.distributed.run"]
        cmd += [*torchrun, "-m", "benchgate.measure.bench", *worker_args]
    else:
        wrapper = out.parent / "worker_plain_exit.py"
        wrapper.write_text(WORKER + "\n")
        cmd = [sys.executable, "-c", TORCHRUN, *torchrun, str(wrapper), *worker_args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=8, help="launches of each, interleaved")
    parser.add_argument("--world-size", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = load_config(
            overrides={
                "bench.workload_args": {"size": "tiny"},
                "bench.steps": 10,
                "bench.warmup": 2,
                "tracking.enabled": False,
            }
        )
        config_path = write_json(root / "config.json", config.model_dump(mode="json"))
        times: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.launches):
            for shipped in (True, False) if i % 2 == 0 else (False, True):
                times[shipped].append(launch(shipped, args.world_size, config_path, root / "metrics.json"))
    shipped, plain = statistics.median(times[True]), statistics.median(times[False])
    print(f"torchrun launch, ws={args.world_size}, 10 steps of gpt-tiny, {args.launches} launches each:")
    print(f"  ordinary exit:           median {plain:.2f} s  {[round(t, 2) for t in times[False]]}")
    print(f"  teardown skipped (ours): median {shipped:.2f} s  {[round(t, 2) for t in times[True]]}")
    print(f"  saved per launch: {plain - shipped:.2f} s; ratio ours/ordinary {shipped / plain:.3f}")


if __name__ == "__main__":
    main()
