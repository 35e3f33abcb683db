"""Does a FAIL name its cause? Planted single-cause slowdowns, each decided by a real A/B and explained.

    python benchmarks/attribution.py [--only extra_layernorm,...] [--repeats 1] [--out FILE]

Each cause is one code change planted in a copy of benchmarks/planted_workload.py (the base: CAUSE =
"none"; the candidate: the cause), on the reference GPT (gpt-tiny) or Hugging Face's GPT-2 (2 layers,
d=128). For each: the A/B runs as `benchgate run` runs it (ab/runner.run_ab: interleaved, pinned rounds
until the rule decides), then its explaining rounds (ab/explain.py, gate.ab.explain=always so that a
cause too small to FAIL is still explained), and the attribution is checked against the operators the
cause adds or slows (EXPECTED: any of them counts as the cause; a cause that slows several operators,
such as eager attention, lists them all).

Printed per cause: the decision and its change, the top three entries, whether an expected one ranks
first / in the top three, the share the top five explain, the range that carries most (whole,
its operators inside) with its share, and the explaining rounds' wall time against the decision's (the
overhead a FAIL pays). The summary gives each rate over the A/Bs that decided FAIL, with its Wilson 95%
interval.

Results: benchmarks/results/attribution-<date>.json (--out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, base_config, rate

from benchgate.ab.explain import explain_ab
from benchgate.ab.runner import Side, run_ab

TEMPLATE = Path(__file__).resolve().parent / "planted_workload.py"
# cause -> (family, world size, operators any of which names the cause)
CPU_OP = r"^(aten::|autograd::)"
EXPECTED: dict[str, tuple[str, int, str]] = {
    "extra_layernorm": ("gpt", 1, r"native_layer_norm"),
    "extra_copy": ("gpt", 1, r"aten::(clone|copy_|empty_like)$"),
    "extra_contiguous": ("gpt", 1, r"aten::(clone|copy_|contiguous|empty_like)$"),
    # The layout change's cost is SDPA's math path (its copies are three a block): its operators name it,
    # and the flash kernel it no longer reaches is expected among the offsetting entries (gone).
    "layout_drops_flash": (
        "gpt",
        1,
        r"aten::(bmm|baddbmm|matmul|_softmax|_softmax_backward_data|_scaled_dot_product_attention_math)$",
    ),
    "eager_attention": (
        "gpt",
        1,
        r"aten::(bmm|matmul|_softmax|_softmax_backward_data|masked_fill_?|div|mul|triu)",
    ),
    "python_loop": ("gpt", 1, r"^forward \(Python"),
    "slower_activation": ("gpt", 1, r"aten::(mul|add|tanh|pow|tanh_backward|pow_backward)$"),
    "extra_dropout": (
        "gpt",
        1,
        r"aten::(native_dropout|bernoulli_|native_dropout_backward|mul|div_|empty_like)",
    ),
    "larger_mlp": ("gpt", 1, r"aten::(addmm|mm|gelu|gelu_backward|_foreach_\w+)$"),
    "optimizer_for_loop": (
        "gpt",
        1,
        r"(^optimizer_step \(Python|^Optimizer\.step|aten::(add_|mul_|addcmul_|addcdiv_|sqrt|div|lerp_))",
    ),
    "slow_batch": ("gpt", 1, r"^(data \(Python|aten::(tensor|lift_fresh|_to_copy|copy_))"),
    "loss_in_float64": (
        "gpt",
        1,
        r"aten::(_to_copy|copy_|_log_softmax|_log_softmax_backward_data|nll_loss\w*)$",
    ),
    "logits_topk": ("gpt", 1, r"aten::topk$"),
    "forward_twice": (
        "gpt",
        1,
        r"aten::(mm|addmm|matmul|_scaled_dot_product\w+|native_layer_norm\w*|gelu\w*)$",
    ),
    "extra_allreduce": ("gpt", 2, r"(allreduce|all_reduce|c10d::|gloo)"),
    "gpt2_eager_attention": (
        "gpt2",
        1,
        r"aten::(bmm|matmul|_softmax|_softmax_backward_data|where|div|mul|masked_fill)",
    ),
    "gpt2_gelu_new": ("gpt2", 1, r"aten::(mul|add|tanh|pow|tanh_backward|pow_backward)$"),
    "gpt2_larger_mlp": ("gpt2", 1, r"aten::(addmm|mm|gelu|gelu_backward|_foreach_\w+)$"),
    "gpt2_extra_layernorm": ("gpt2", 1, r"native_layer_norm"),
    "gpt2_python_loop": ("gpt2", 1, r"^forward \(Python"),
    "larger_mlp_ws2": ("gpt", 2, r"aten::(addmm|mm|gelu|gelu_backward|_foreach_\w+)$"),
}
SIDE_CAUSE = {"larger_mlp_ws2": "larger_mlp"}  # a cause planted at another world size


def side_dir(root: Path, cause: str) -> Path:
    path = root / cause
    path.mkdir(parents=True, exist_ok=True)
    text = re.sub(r'^CAUSE = "none"', f'CAUSE = "{cause}"', TEMPLATE.read_text(), count=1, flags=re.MULTILINE)
    (path / "planted_workload.py").write_text(text)
    return path


def run_cause(cause: str, root: Path) -> dict[str, Any]:
    family, ws, pattern = EXPECTED[cause]
    work = root / cause
    shutil.rmtree(work, ignore_errors=True)
    base = Side("base (no cause)", "base", (side_dir(work / "src", "none"),))
    candidate = Side(
        f"candidate ({cause})", "candidate", (side_dir(work / "src", SIDE_CAUSE.get(cause, cause)),)
    )
    # The gate's [gate.ab] defaults but a 240 s budget: a cause too small to FAIL would run the default
    # 600 s to its last look, and only FAIL decisions count towards the overhead.
    config = base_config(
        work, workload="planted_workload:make_workload", **{"ab.explain": "always", "ab.max_seconds": 240.0}
    )
    config = config.model_copy(
        update={
            "bench": config.bench.model_copy(
                update={"workload_args": {"family": family}, "world_sizes": sorted({1, ws})}
            )
        }
    )
    started = time.monotonic()
    outcome = run_ab(config, ws, work / "out", base, candidate, gpus=0)
    block = explain_ab(config, outcome, work / "out" / "ab" / f"ws{ws}", base, candidate, 0)
    entries = block["entries"]
    matches = [bool(re.search(pattern, e["op"])) for e in entries]
    rank = matches.index(True) + 1 if any(matches) else None
    decision = outcome.decision
    return {
        "cause": cause,
        "family": family,
        "world_size": ws,
        "decision": decision.status,
        "change_pct": decision.change_pct,
        "rounds": len(outcome.rounds),
        "measured_ms_per_step": block["measured"],
        # The kept entries' changes summed (they partition the profiled host steps on CPU): beside the
        # timer's own change above, whether the step ranges hold what the timer measured.
        "entries_sum_ms_per_step": sum(e["change_ms_per_step"] for e in entries),
        "decided_change_ms_per_step": block["shared_change_ms_per_step"],
        "rank_of_cause": rank,
        "top": [
            {k: e[k] for k in ("op", "change_ms_per_step", "ci", "share_pct", "only_in")} for e in entries[:5]
        ],
        "explained_by_top_pct": block["explained_by_top_pct"],
        "top_ranges": [
            {k: r[k] for k in ("op", "change_ms_per_step", "ci", "share_pct")} for r in block["ranges"][:3]
        ],
        "communication": block.get("communication"),
        "offsetting": [
            {k: e[k] for k in ("op", "change_ms_per_step", "ci", "only_in")} for e in block["offsetting"][:3]
        ],
        "calls_per_step": block["calls_per_step"],
        "decision_s": outcome.seconds,
        "explain_s": block["seconds"],
        "overhead_pct": 100.0 * block["seconds"] / outcome.seconds,
        "wall_s": time.monotonic() - started,
    }


def _range_share(result: dict[str, Any]) -> float:
    """The share of the range first in the ranges list (0 where no range was profiled)."""
    ranges = result.get("top_ranges") or []
    return float(ranges[0]["share_pct"] or 0) if ranges else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated causes (default: all)")
    parser.add_argument("--repeats", type=int, default=1, help="A/Bs per cause")
    parser.add_argument("--out", type=Path, default=RESULTS / f"attribution-{datetime.date.today()}.json")
    args = parser.parse_args()
    causes = [c for c in args.only.split(",") if c] or list(EXPECTED)
    unknown = [c for c in causes if c not in EXPECTED]
    if unknown:
        parser.error(f"--only: unknown causes {unknown}; known: {', '.join(EXPECTED)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="benchgate-attribution-") as tmp:
        for cause in causes:
            for _ in range(args.repeats):
                r = run_cause(cause, Path(tmp))
                results.append(r)
                # Written after every cause: a crash later loses none of the decided ones.
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"results": results}, indent=1) + "\n")
                top = "; ".join(
                    f"{e['op'][:48]} {e['change_ms_per_step']:+.3f} ms"
                    + (f" ({e['share_pct']:.0f}%)" if e["share_pct"] is not None else "")
                    for e in r["top"][:3]
                )
                print(
                    f"{cause:22s} ws={r['world_size']} {r['decision']:7s} {r['change_pct']:+6.1f}% "
                    f"rank={r['rank_of_cause']} top5={r['explained_by_top_pct'] or 0:.0f}% "
                    f"range={(r['top_ranges'] or [{'op': '-'}])[0]['op']}:{_range_share(r):.0f}% "
                    f"overhead={r['overhead_pct']:.0f}% ({r['explain_s']:.1f}/{r['decision_s']:.1f} s) "
                    f"| {top}",
                    flush=True,
                )
    # Rates over the A/Bs that decided FAIL: a cause too small to slow the step has nothing to name.
    fails = [r for r in results if r["decision"] == "FAIL"]
    n = len(fails)
    first = sum(r["rank_of_cause"] == 1 for r in fails)
    top3 = sum(r["rank_of_cause"] is not None and r["rank_of_cause"] <= 3 for r in fails)
    explained = sum((r["explained_by_top_pct"] or 0) >= 80 for r in fails)
    by_range = sum(_range_share(r) >= 80 for r in fails)
    either = sum((r["explained_by_top_pct"] or 0) >= 80 or _range_share(r) >= 80 for r in fails)
    overhead_ok = sum(r["overhead_pct"] <= 20 for r in fails)
    summary = {
        "ab_runs": len(results),
        "fails": n,
        "ranked_first_of_fails": rate(first, n),
        "in_top_three_of_fails": rate(top3, n),
        "top_five_carry_80pct_of_fails": rate(explained, n),
        "top_range_carries_80pct_of_fails": rate(by_range, n),
        "top_five_or_top_range_carry_80pct_of_fails": rate(either, n),
        "overhead_le_20pct_of_fails": rate(overhead_ok, n),
        "overhead_pct_of_fails": sorted(round(r["overhead_pct"], 1) for r in fails),
        "not_fail": [
            [r["cause"], r["decision"], round(r["change_pct"] or 0, 1)] for r in results if r not in fails
        ],
    }
    for key, value in summary.items():
        print(f"{key}: {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "results": results}, indent=1) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
