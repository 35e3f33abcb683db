"""Which of transformers' model types train through benchgate's Hugging Face workload, family by family.

    python benchmarks/hf_coverage.py [--tasks causal-lm,masked-lm,...] [--size tiny] [--only TYPE,...]
                                     [--out FILE]

For every model type of each family (`task=`, benchgate/workloads/hf/tasks.py), in a worker process:
the workload made from `task=<family> model_type=<type> size=<size>` as `benchgate run` would make it
(the factory's checks, the size preset, the default attention), one real training step in fp32 on the
CPU (benchgate.workloads.training.check_training_step: the loss finite, the contract checked), then one
step counted under FlopCounterMode (the MFU's counted FLOPs). A type passes when both hold. A failure
keeps its first line as the reason. Each type's wall time is the step's and the count's (the worker's
imports are paid once per family).

A worker runs a whole family; a type that kills it (a crash) or outlasts --timeout is recorded as such
and a new worker goes on with the next type.

Printed: one line per type, then per family the share that trains and the reasons grouped.
Results: benchmarks/results/hf-coverage-<date>.json (--out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS

TARGETS = {"causal-lm": 0.90}  # every other family: 0.80
OTHER_TARGET = 0.80


def worker(task: str, size: str, types: list[str]) -> None:
    """Try each of `types`, printing one JSON line per type (the parent reads them as they come)."""
    import torch

    from benchgate.measure.mfu import count_flops_or_why
    from benchgate.workloads.hf import make_workload
    from benchgate.workloads.training import check_training_step

    torch.set_num_threads(max(1, (os.cpu_count() or 1)))
    for model_type in types:
        print(json.dumps({"type": model_type, "started": True}), flush=True)
        started = time.monotonic()
        row: dict[str, Any] = {"type": model_type}
        try:
            workload = make_workload(task=task, model_type=model_type, size=size, batch_size=2, seq_len=64)
            row["name"] = workload.name
            row["loss"] = check_training_step(workload, f"{task}:{model_type}")
            model = workload.build_model(torch.device("cpu"))
            row["attention"] = workload.attention
            row["parameters"] = sum(p.numel() for p in model.parameters())
            counted = count_flops_or_why(workload, model, torch.device("cpu"), "fp32", 0)
            if "error" in counted:
                raise RuntimeError(counted["error"])
            row["flops_per_step"] = counted["flops"]
            if not counted["flops"] > 0:
                raise RuntimeError("FlopCounterMode counted no FLOPs in a training step")
            row["unit"] = workload.unit
            row["units_per_step"] = workload.tokens_per_step
            row["ok"] = True
        except BaseException as e:  # every failure is a reason to record
            row["ok"] = False
            row["reason"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[
                :300
            ]
        row["seconds"] = round(time.monotonic() - started, 2)
        print(json.dumps(row), flush=True)


def run_family(task: str, size: str, types: list[str], timeout: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    pending = list(types)
    while pending:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", task, "--size", size, "--only", ",".join(pending)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        ended = _read_worker(proc, task, timeout, rows, pending)
        if not ended:
            proc.kill()
        proc.wait()
        if ended is not None and ended != "done":  # the worker died on a type: the next worker goes on
            rows.append({"type": ended, "ok": False, "reason": f"the worker died (exit {proc.returncode})"})
            print(f"  {task:24s} {ended:34s} CRASH", flush=True)
            pending.remove(ended)
    return rows


def _read_worker(
    proc: subprocess.Popen[bytes], task: str, timeout: float, rows: list[dict[str, Any]], pending: list[str]
) -> str | None:
    """Read the worker's lines as they come (unbuffered reads: a model's own output without a newline
    never blocks the timeout). Returns "done", the type it died on, or None where a type timed out."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buffer = b""
    current: str | None = None
    started = time.monotonic()
    while True:
        if current is not None and time.monotonic() - started > timeout:
            rows.append(
                {"type": current, "ok": False, "reason": f"timeout: over {timeout:.0f} s", "seconds": timeout}
            )
            print(f"  {task:24s} {current:34s} TIMEOUT", flush=True)
            pending.remove(current)
            return None
        readable, _, _ = select.select([fd], [], [], 1.0)
        if not readable:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:  # the worker ended: done, or died on `current`
            return current or "done"
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue  # a model's own print
            if not isinstance(row, dict) or "type" not in row:
                continue
            if row.get("started"):
                current, started = row["type"], time.monotonic()
                continue
            current = None
            pending.remove(row["type"])
            rows.append(row)
            status = "ok  " if row["ok"] else "FAIL"
            print(
                f"  {task:24s} {row['type']:34s} {status} {row['seconds']:6.1f}s "
                + row.get("reason", "")[:150],
                flush=True,
            )


def main() -> int:
    from benchgate.workloads.hf.tasks import TASKS

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated families (default: all)")
    parser.add_argument("--size", default="tiny")
    parser.add_argument(
        "--only", default="", help="comma-separated model types (default: every one of the family)"
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per type")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / f"hf-coverage-{datetime.date.today()}.json")
    args = parser.parse_args()
    only = [t for t in args.only.split(",") if t]
    if args.worker:
        worker(args.worker, args.size, only)
        return 0
    results: dict[str, Any] = {"size": args.size, "families": {}}
    for task in [t for t in args.tasks.split(",") if t]:
        types = only or sorted(TASKS[task].types)
        started = time.monotonic()
        rows = run_family(task, args.size, types, args.timeout)
        trained = sum(r["ok"] for r in rows)
        target = TARGETS.get(task, OTHER_TARGET)
        reasons = Counter(r["reason"].split(":")[0] for r in rows if not r["ok"])
        seconds = sorted(r["seconds"] for r in rows if r["ok"] and r["seconds"] is not None)
        summary = {
            "types": len(rows),
            "train": trained,
            "share": trained / len(rows) if rows else 0.0,
            "target": target,
            "met": bool(rows) and trained / len(rows) >= target,
            "median_seconds_per_type": seconds[len(seconds) // 2] if seconds else None,
            "max_seconds_per_type": seconds[-1] if seconds else None,
            "wall_seconds": round(time.monotonic() - started, 1),
            "failures_by_kind": dict(reasons.most_common()),
        }
        results["families"][task] = {"summary": summary, "rows": rows}
        print(
            f"{task}: {trained}/{len(rows)} train ({100 * summary['share']:.0f}%, "
            f"target {100 * target:.0f}%), "
            f"median {summary['median_seconds_per_type']} s a type, {summary['wall_seconds']} s in all",
            flush=True,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")  # after every family: nothing lost
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
