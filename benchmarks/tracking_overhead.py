"""What logging to MLflow costs a gate run: wall time with logging to a local server vs logging off.

Starts a real `mlflow server` on 127.0.0.1 (lean settings), makes one untimed run that becomes the
baseline in MLflow, then times `benchgate run` (defaults: gpt-tiny, ws=1 and 2, eval, trace) with
`--tracking` and `--no-tracking` in interleaved rounds, so both sides see the same host. The HTTP
calls of each logged run are counted from the server's access log.

Target: median(logging on) / median(logging off) <= 1.05.

    python benchmarks/tracking_overhead.py [--rounds 3] [-- extra benchgate run flags]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from local_mlflow import mlflow_server

REQUEST = re.compile(r'"(GET|POST|PUT|PATCH|DELETE) (/[^ ?]*)')


def requests_since(log: Path, offset: int) -> tuple[Counter[str], int]:
    """Requests in the access log after byte `offset`, by kind (health probes, runs API, artifacts)."""
    text = log.read_bytes()[offset:].decode(errors="replace")
    kinds: Counter[str] = Counter()
    for method, path in REQUEST.findall(text):
        if path.startswith("/api/2.0/mlflow-artifacts/"):
            kinds[f"{method} artifacts"] += 1
        else:
            kinds[f"{method} {path.removeprefix('/api/2.0/mlflow/')}"] += 1
    return kinds, offset + len(text.encode())


def gate(tmp: Path, name: str, uri: str, tracking: bool, extra: list[str]) -> float:
    flag = "--tracking" if tracking else "--no-tracking"
    command = [sys.executable, "-m", "benchgate", "run", flag, "--tracking-uri", uri,
               "--out", str(tmp / name), "--baseline-dir", str(tmp / "baselines"), *extra]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"benchgate run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="flags passed to every `benchgate run` (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="benchgate-tracking-") as name:
        tmp = Path(name)
        with mlflow_server(tmp) as (uri, log):
            gate(tmp, "warmup", uri, True, ["--update-baseline", *args.extra])  # the baseline, in MLflow
            _, offset = requests_since(log, 0)
            on: list[float] = []
            off: list[float] = []
            calls: list[Counter[str]] = []
            for i in range(args.rounds):
                for tracking in (True, False) if i % 2 == 0 else (False, True):
                    extra = ["--no-update-baseline", *args.extra]
                    seconds = gate(tmp, f"r{i}-{tracking}", uri, tracking, extra)
                    kinds, offset = requests_since(log, offset)
                    (on if tracking else off).append(seconds)
                    if tracking:
                        calls.append(kinds)
                    calls_text = f"  {sum(kinds.values())} HTTP calls" if tracking else ""
                    state = "on " if tracking else "off"
                    print(f"round {i + 1}: logging {state} {seconds:6.1f} s{calls_text}", flush=True)
    ratio = statistics.median(on) / statistics.median(off)
    print(f"\nmedian wall: logging on {statistics.median(on):.1f} s, off {statistics.median(off):.1f} s")
    print(f"ratio on/off: {ratio:.3f}   target <= 1.05   (rounds: {args.rounds})")
    print(f"HTTP calls per logged run: {[sum(c.values()) for c in calls]}")
    for kind, count in sorted(calls[-1].items(), key=lambda kv: -kv[1]):
        print(f"  {count:3d}  {kind}")


if __name__ == "__main__":
    main()
