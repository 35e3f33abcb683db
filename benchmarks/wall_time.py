"""Wall time of `benchgate run` with defaults (after set-up), and peak RSS per rank for gpt-tiny.

Targets: <= 120 s on 2 cores; <= 600 MB max RSS per rank.

    python benchmarks/wall_time.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchgate.kit.files import read_json


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchgate",
                "run",
                "--out",
                f"{tmp}/out",
                "--baseline-dir",
                f"{tmp}/b",
                "--no-update-baseline",
            ],
            capture_output=True,
            text=True,
            cwd=tmp,  # the embedded MLflow store and the spool land here, not in the checkout
        )
        wall = time.perf_counter() - start
        if result.returncode not in (0, 1):
            sys.exit(f"benchgate run failed ({result.returncode}):\n{result.stderr}")
        stages = {p.stem: read_json(p).get("wall_s") for p in Path(tmp, "out").glob("*.json")}
        rss = {
            p.stem: [b / 2**20 for b in read_json(p)["memory"]["max_rss_bytes_per_rank"]]
            for p in sorted(Path(tmp, "out").glob("metrics-ws*.json"))
        }
    print(f"benchgate run (defaults): {wall:.1f} s wall, exit {result.returncode}   target <= 120 s")
    print(
        "stage work (s, excluding process start): "
        + ", ".join(f"{k} {v:.1f}" for k, v in sorted(stages.items()) if v)
    )
    for name, values in rss.items():
        print(
            f"{name}: max RSS per rank " + ", ".join(f"{v:.0f} MiB" for v in values) + "   target <= 600 MB"
        )


if __name__ == "__main__":
    main()
