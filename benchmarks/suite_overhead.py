"""Suite overhead: `benchgate suite run` of 3 entries against the same 3 entries as separate `benchgate run`s.

Both sides are what a user types, each a fresh process (interpreter start and imports included), and
they take turns pair by pair (suite, separate, suite, separate, ...) so host drift hits both alike.
The entries are gpt-tiny at batch sizes 2, 4 and 8 (one world size, 10 steps, eval and trace off,
tracking off: MLflow's cost is tracking_overhead.py's), each stored under its own name as the suite
stores it (bench.name). Ratio = suite wall time / the three separate runs' wall time, per pair; the
figure is the median. Target: <= 1.1x.

    python benchmarks/suite_overhead.py [--pairs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCH_SIZES = (2, 4, 8)
COMMON = """\
[bench]
steps = 10
warmup = 2
world_sizes = [1]
precision = "fp32"
[eval]
enabled = false
[trace]
enabled = false
[gate]
baseline_dir = "{root}/baselines"
update_baseline = "never"
[tracking]
enabled = false
"""


def write_inputs(root: Path) -> tuple[Path, list[Path]]:
    """The suite file (and its shared config), and one config file per entry for the separate runs."""
    common = COMMON.format(root=root)
    (root / "bench.toml").write_text(common)
    suite = ['[suite]\nname = "overhead"\nconfig = "bench.toml"\n']
    separate = []
    for batch in BATCH_SIZES:
        name = f"gpt-tiny-b{batch}"
        suite.append(
            f'\n[[entries]]\nname = "{name}"\nworkload = "benchgate.workloads.gpt:make_workload"\n'
            f'args = {{ size = "tiny" }}\nvariant = {{ batch_size = {batch} }}\n'
        )
        entry = root / f"{name}.toml"
        bench = (
            f'[bench]\nname = "{name}"\nworkload = "benchgate.workloads.gpt:make_workload"\n'
            f'workload_args = {{ size = "tiny", batch_size = {batch} }}\n'
        )
        entry.write_text(common.replace("[bench]\n", bench, 1))
        separate.append(entry)
    (root / "suite.toml").write_text("".join(suite))
    return root / "suite.toml", separate


def timed(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr}"
        )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    benchgate = [sys.executable, "-m", "benchgate"]
    ratios, suites, separates = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        suite, entries = write_inputs(root)
        for pair in range(args.pairs):
            s = timed([*benchgate, "suite", "run", str(suite), "--out", "suite-out"], root)
            d = sum(
                timed([*benchgate, "run", "--config", str(entry), "--out", f"run-{entry.stem}"], root)
                for entry in entries
            )
            suites.append(s)
            separates.append(d)
            ratios.append(s / d)
            print(f"pair {pair}: suite {s:.1f} s  separate {d:.1f} s  ratio {s / d:.3f}", flush=True)
    print(
        f"median: suite {statistics.median(suites):.1f} s, separate {statistics.median(separates):.1f} s, "
        f"ratio {statistics.median(ratios):.3f} (per pair {min(ratios):.3f}-{max(ratios):.3f}; target <= 1.1)"
    )


if __name__ == "__main__":
    main()
