#!/usr/bin/env python3
"""The GPU check: benchgate's GPU-only paths on one real GPU, in one call of under 8 minutes.

`make gpu-check` runs it on a bare GPU machine (python3 with its own torch, numpy, psutil and
nvidia-ml-py; no network, no kfp or mlflow: the wheels benchgate's measuring layers need beyond that,
pydantic's, travel in .whl/, `make gpu-check-wheels` fetches them). It drives the measure and A/B layers
directly, never the CLI or the pipeline, so nothing else is needed. Steps, most important first, each
recorded in summary.json as it ends (a timeout still returns what finished):

    S0_env        env.json as a gate run writes it (profile, NVML identity; exit 2 if CUDA is not
                  visible) and NVML's answers recorded for the fake NVML of the tests
    S1_doctor     the device probe and its bf16 matmul ceiling (`measure/probe.py`), and what one
                  process's CUDA context holds beyond torch's reserved bytes (ab/layout.py's margin)
    S2_bench      gpt-small bf16 ws=1: tokens/s, MFU by three estimators against the datasheet and the
                  measured ceiling, memory by phase, the NVML window (energy per token, clocks, throttling)
    S3_aa         A/A rounds (layout auto) and what the gate can resolve here (`ab/power.py`)
    S4_ab_6pct    A/B against a candidate of ~+6% FLOPs (extra residual layers), layout auto
    S5_ab_12pct   A/B against ~+12% FLOPs, layout sequential (one side alive at a time), then its
                  explaining round (ab/explain.py): the kernels and operators behind the change
    S6_fsdp2      gpt-small under FSDP2 on a one-GPU mesh: NCCL, the workload's parallelize, the count
    S7_trace      a profiler trace, which must hold CUDA kernels
    S8_sync_cost  the bench again with bench.sync_every = 10: what a sync per step costs
    S9_eval       the eval at its own settings (400 steps), twice: repeatable on one GPU?

`--smoke` runs every step on CPU with gpt-tiny and minimal sizes: it checks this script (the test suite
runs it). `--only S3,S4` reruns steps; `--budget-s` skips what would start after the budget.
Files in --out (at most 8 come back from a lent machine): summary.json, nvml-recording.json,
results.tar.gz (metrics, ab.json, env.json, the trace's size only), and the caller's log.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Its own folder first, explicitly: under PYTHONSAFEPATH (which benchgate's source checkouts set for
# their children) the script's directory is not on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_wider_gpt

REPO = Path(__file__).resolve().parents[1]
SUMMARY: dict[str, Any] = {"steps": {}}


def save(out: Path) -> None:
    (out / "summary.json").write_text(json.dumps(SUMMARY, indent=1, default=str))


class Check:
    """The run's settings and its steps: each runs once, is timed, and never stops the ones after it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="bg-gpu-check-"))
        self.started = time.monotonic()

    def step(self, name: str, run: Callable[[], dict[str, Any] | None]) -> None:
        if self.args.only and not any(name.startswith(o) for o in self.args.only):
            return
        elapsed = time.monotonic() - self.started
        if elapsed > self.args.budget_s:
            SUMMARY["steps"][name] = {
                "ok": False,
                "skipped": f"budget: {elapsed:.0f} s of {self.args.budget_s:g}",
            }
            save(self.args.out)
            return
        print(f"=== {name} (at {elapsed:.0f} s)", flush=True)
        began = time.monotonic()
        try:
            SUMMARY["steps"][name] = {"ok": True, **(run() or {})}
        except BaseException as e:  # a step's failure is a finding; Ctrl-C still stops the check
            SUMMARY["steps"][name] = {
                "ok": False,
                "error": f"{type(e).__name__}: {e}"[:2000],
                "traceback": traceback.format_exc()[-3000:],
            }
            if isinstance(e, KeyboardInterrupt):
                raise
        SUMMARY["steps"][name]["seconds"] = round(time.monotonic() - began, 1)
        print(json.dumps({name: SUMMARY["steps"][name]}, default=str)[:3000], flush=True)
        save(self.args.out)

    def config(self, **overrides: Any) -> Any:
        from benchgate.config import load_config

        smoke = self.args.smoke
        settings: dict[str, Any] = {
            "bench.world_sizes": [1],
            "bench.device": "cpu" if smoke else "cuda",
            "bench.workload_args": {"size": self.args.size},
            "bench.steps": 5 if smoke else 60,
            "bench.warmup": 1 if smoke else 10,
            "bench.timeout_s": 300.0,
            "gate.baseline_dir": self.work / "baselines",
            "gate.ab.steps": 3 if smoke else 30,
            "gate.ab.warmup": 1 if smoke else 5,
            "gate.ab.min_measured_s": 0.0 if smoke else 1.5,
            "gate.ab.min_rounds": 2 if smoke else 4,
            "gate.ab.max_rounds": 2 if smoke else 6,
            "gate.ab.max_seconds": 60.0 if smoke else 110.0,
            # Only the rank-0 system sampler reads this: nothing talks to MLflow here.
            "tracking.enabled": True,
        }
        settings.update(overrides)
        return load_config(overrides=settings)


def bench_figures(metrics: dict[str, Any], ceiling_tflops: float | None) -> dict[str, Any]:
    steps = metrics["samples"]["step_time_s"]
    mfu = metrics["mfu"]
    per_token = mfu["flops_per_token"]
    achieved = {
        k: (None if v is None else metrics["tokens_per_s"]["p50"] * v / 1e12) for k, v in per_token.items()
    }
    state = metrics.get("device_state") or {}
    return {
        "device": metrics["device"],
        "precision": metrics["precision"],
        "parallelism": metrics["parallelism"],
        "machine_profile": metrics["machine_profile"],
        "sync_every": metrics["sync_every"],
        "step_ms_p50": 1e3 * metrics["step_time_s"]["p50"],
        "step_cv_pct": 100 * statistics.pstdev(steps) / statistics.fmean(steps),
        "tokens_per_s_p50": metrics["tokens_per_s"]["p50"],
        "mfu_vs_datasheet": {k: mfu[k] for k in ("dense_6n", "attention_aware", "counted")},
        "achieved_tflops": achieved,
        "mfu_vs_measured_ceiling": {
            k: (None if v is None or not ceiling_tflops else v / ceiling_tflops) for k, v in achieved.items()
        },
        "flops_per_token": per_token,
        "counting": {k: v for k, v in mfu["counting"].items() if k != "by_op"},
        "peak": mfu["peak"],
        "memory": {k: v for k, v in metrics["memory"].items() if k != "max_rss_bytes_per_rank"},
        "device_state": {k: v for k, v in state.items() if k != "windows"},
        "window": (state.get("windows") or [None])[0],
        "wall_s": metrics["wall_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--smoke", action="store_true", help="CPU, gpt-tiny, minimal sizes: checks the script"
    )
    parser.add_argument(
        "--only", type=lambda v: v.split(","), default=None, help="steps to (re)run, e.g. S3,S4"
    )
    parser.add_argument(
        "--budget-s", type=float, default=450.0, help="no step starts after this many seconds"
    )
    args = parser.parse_args()
    args.size = "tiny" if args.smoke else "small"
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    import torch

    SUMMARY.update(
        {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "smoke": args.smoke,
        }
    )
    check = Check(args)
    run_steps(check, torch)
    with tarfile.open(args.out / "results.tar.gz", "w:gz") as tar:
        for path in sorted(check.work.rglob("*")):
            if path.is_file() and path.suffix in (".json", ".log") and path.stat().st_size < 4 * 2**20:
                tar.add(path, arcname=str(path.relative_to(check.work)))
    SUMMARY["total_s"] = round(time.monotonic() - check.started, 1)
    save(args.out)
    failed = [name for name, step in SUMMARY["steps"].items() if not step.get("ok")]
    print(
        f"gpu check: {len(SUMMARY['steps']) - len(failed)} steps ok, failed: {failed or 'none'}", flush=True
    )
    return 1 if failed else 0


def run_steps(check: Check, torch: Any) -> None:
    args, work = check.args, check.work
    cuda = not args.smoke
    ceiling: dict[str, float | None] = {"tflops": None}
    step_s: dict[str, float] = {}

    def env() -> dict[str, Any]:
        from benchgate.measure.stage import stage_env

        # A GPU asked for and not visible is exit 2 here (measure/gpu_required.py): nothing else checks one.
        captured = stage_env(work / "env", config=check.config())
        recording = args.out / "nvml-recording.json"
        recorded = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "record_nvml.py"), "--out", str(recording)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return {
            "machine_profile": captured["machine_profile"],
            "gpu": captured["gpu"],
            "torch": captured["torch"],
            "cpu": captured["cpu"],
            "nvml_recorded": recorded.returncode == 0,
            "nvml_recorder_said": (recorded.stdout + recorded.stderr)[-500:],
        }

    def doctor() -> dict[str, Any]:
        from benchgate.measure import probe
        from benchgate.measure.device import identity

        context: dict[str, Any] = {}
        if cuda:
            # What one process holds beyond torch's reserved bytes (ab/layout.py's PROCESS_MARGIN guesses
            # 1 GiB): NVML's free memory before and after this process's CUDA context and one cuBLAS call.
            before = identity()
            x = torch.ones(64, 64, device="cuda")
            (x @ x).sum().item()
            after = identity()
            if before["available"] and after["available"]:
                free = [g["memory_free_bytes"] for g in (before["gpus"][0], after["gpus"][0])]
                context = {"bytes": free[0] - free[1], "torch_reserved": torch.cuda.memory_reserved()}
        figures = probe.cuda_probe() if cuda else probe.cpu_probe()
        figures["process_context"] = context
        if cuda:
            torch.cuda.empty_cache()  # this process's context stays; its cached blocks go back to the GPU
        matmul = figures.get("matmul_bf16") or figures.get("matmul_fp32") or {}
        ceiling["tflops"] = matmul.get("best_tflops")
        return figures

    def bench(name: str, **overrides: Any) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            from benchgate.kit.files import read_json
            from benchgate.measure.launch import stage_bench

            metrics = read_json(stage_bench(check.config(**overrides), 1, work / name))
            step_s[name] = metrics["step_time_s"]["mean"]
            return bench_figures(metrics, ceiling["tflops"])

        return run

    def ab(name: str, target_pct: float, layout: str, explain: bool = False) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            from benchgate.ab.power import plan
            from benchgate.ab.runner import Side, run_ab
            from benchgate.kit.files import read_json
            from benchgate.workloads.gpt import SIZES

            size = SIZES[args.size]
            counted = (SUMMARY["steps"].get("S2_bench", {}).get("flops_per_token") or {}).get("counted")
            per_layer = 6 * size.d_model**2
            extra = (
                max(1, round(target_pct / 100 * counted / per_layer))
                if target_pct and counted
                else (2 if target_pct else 0)
            )
            sides = {}
            for label, layers in (("A", 0), ("B", extra)):
                directory = work / f"{name}-{label}"
                directory.mkdir(parents=True, exist_ok=True)
                # The reference GPT with more residual Linear(d, d) layers: 6·d² FLOPs per token each.
                write_wider_gpt(directory / "abwork.py", layers, args.size, f"gpt-{args.size}-ab")
                sides[label] = Side(label, None, (directory,))
            config = check.config(
                **{
                    "bench.workload": "abwork:make_workload",
                    "bench.workload_args": {},
                    "gate.ab.layout": layout,
                }
            )
            # As in a gate run, `auto` decides from the run's env.json and its bench's metrics: without
            # them it can only fall back to sequential ("peak reserved memory ... unknown").
            (work / name).mkdir(parents=True, exist_ok=True)
            for source in (work / "env" / "env.json", work / "S2_bench" / "metrics-ws1.json"):
                if source.is_file():
                    shutil.copyfile(source, work / name / source.name)
            outcome = run_ab(config, 1, work / name, sides["A"], sides["B"], step_s=step_s.get("S2_bench"))
            saved = read_json(work / name / "ab" / "ws1" / "ab.json")
            changes = [100 * math.expm1(r["change_log"]) for r in outcome.rounds]
            seconds = outcome.seconds / max(1, len(outcome.rounds))
            sd = (
                statistics.stdev(r["change_log"] for r in outcome.rounds) if len(outcome.rounds) > 1 else None
            )
            ab_settings, tol = config.gate.ab, config.gate.tolerances
            resolution = None
            if sd:
                resolution = plan(
                    sd,
                    seconds,
                    tol.throughput_drop_pct,
                    tol.confidence,
                    ab_settings.min_rounds,
                    ab_settings.max_rounds,
                    ab_settings.max_seconds,
                ).to_dict()
            explained = None
            if explain:  # the explaining round on CUDA: kernels by their launching step, its cost
                from benchgate.ab.explain import explain_ab

                block = explain_ab(config, outcome, work / name / "ab" / "ws1", sides["A"], sides["B"], None)
                explained = {
                    "top": [
                        {k: e[k] for k in ("op", "kind", "change_ms_per_step", "ci", "share_pct", "only_in")}
                        for e in block["entries"][:5]
                    ],
                    "kernels_in_entries": sum(e["kind"] == "cuda" for e in block["entries"]),
                    "explained_by_top_pct": block.get("explained_by_top_pct"),
                    "measured": block.get("measured"),
                    "seconds": block.get("seconds"),
                    "decision_seconds": block.get("decision_seconds"),
                }
            return {
                "explained": explained,
                "extra_layers": extra,
                "expected_flops_pct": None if not counted else 100 * extra * per_layer / counted,
                "layout": saved.get("layout"),
                "decision": outcome.decision.to_dict(),
                "round_changes_pct": changes,
                "round_seconds": [r["seconds"] for r in outcome.rounds],
                "pairs": [r["pairs"] for r in outcome.rounds],
                "plan": resolution,
            }

        return run

    def trace() -> dict[str, Any]:
        from benchgate.measure.trace import stage_trace

        summary = stage_trace(
            check.config(**{"trace.wait": 1, "trace.warmup": 1, "trace.active": 2}), work / "trace"
        )
        path = next((work / "trace").glob("*.pt.trace.json.gz"))
        events = json.loads(gzip.decompress(path.read_bytes())).get("traceEvents", [])
        categories: dict[str, int] = {}
        for event in events:
            categories[event.get("cat", "?")] = categories.get(event.get("cat", "?"), 0) + 1
        names = {event.get("name") for event in events}
        return {
            "bytes": path.stat().st_size,
            "categories": categories,
            "has_kernels": categories.get("kernel", 0) > 0,
            "ranges": [r for r in summary["ranges"] if r in names],
            "wall_s": summary["wall_s"],
        }

    def evaluate() -> dict[str, Any]:
        from benchgate.measure.evaluate import stage_eval

        # The eval's own 400 steps on a GPU (a step of gpt-small there takes milliseconds): what a gate
        # run scores, not an early point of training.
        config = check.config(**({"eval.train_steps": 5} if args.smoke else {}))
        first, second = stage_eval(config, work / "eval1.json"), stage_eval(config, work / "eval2.json")
        return {
            "device": first.get("device"),
            "perplexity": first.get("perplexity"),
            "repeatable": first.get("perplexity") == second.get("perplexity"),
            "wall_s": first.get("wall_s"),
        }

    def sync_cost() -> dict[str, Any]:
        figures = bench("S8_sync_cost", **{"bench.sync_every": 10})()
        base = SUMMARY["steps"].get("S2_bench", {}).get("tokens_per_s_p50")
        figures["tokens_per_s_vs_sync_every_1_pct"] = (
            None if not base else 100 * (figures["tokens_per_s_p50"] / base - 1)
        )
        return figures

    check.step("S0_env", env)
    if cuda and not torch.cuda.is_available():
        SUMMARY["abort"] = "torch.cuda.is_available() is False: nothing else is a GPU check"
        save(args.out)
        sys.exit(2)
    check.step("S1_doctor", doctor)
    check.step("S2_bench", bench("S2_bench"))
    check.step("S3_aa", ab("S3_aa", 0.0, "auto"))
    check.step("S4_ab_6pct", ab("S4_ab_6pct", 6.0, "auto"))
    check.step("S5_ab_12pct", ab("S5_ab_12pct", 12.0, "sequential", explain=True))
    check.step(
        "S6_fsdp2", bench("S6_fsdp2", **{"bench.workload_args": {"size": args.size, "parallel": "fsdp2"}})
    )
    check.step("S7_trace", trace)
    check.step("S8_sync_cost", sync_cost)
    check.step("S9_eval", evaluate)


if __name__ == "__main__":
    sys.exit(main())
