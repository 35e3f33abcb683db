"""A run's key figures as flat, stable names: what MLflow stores, history reads back and plots draw.

One naming for every consumer, so a figure logged today is found by `benchgate history` next month:

    ws<N>/tokens_per_s_mean  ws<N>/tokens_per_s_p50   ws<N>/tokens_per_s_p90
    ws<N>/step_time_ms_p50   ws<N>/step_time_ms_p90
    ws<N>/peak_memory_mib    ws<N>/mfu_6nd_pct        ws<N>/mfu_attention_pct  ws<N>/mfu_counted_pct
    ws<N>/counted_flops_per_token                     ws<N>/loss_slope
    ws<N>/step_time_per_reference_p50  ws<N>/step_time_ms_mean  ws<N>/step_time_per_reference_mean
    ws<N>/energy_j_per_token  ws<N>/throttled_windows
    scaling_efficiency_pct   eval/perplexity          eval/probe_<name>_accuracy_pct
    gate/exit_code           gate/checks_<pass|warn|unknown|fail|new>

`tokens_per_s_mean` is THE tokens/s of a run (RUN_TOKENS_PER_S): the tokens of a step over the mean step
time (`step_time_ms_mean`, each step capped at STALL_CAP x the median), the figure the gate judges. The
verdict table, `benchgate history`, `baseline show`, MLflow's runs table and report.html all show it,
so a run has one tokens/s wherever it is read. The p50 and p90 are the distribution of the per-step
rates, and an A/B's base and candidate rates are another, paired measurement (Check.ab_base).

Units follow the name: `_ms` milliseconds, `_mib` MiB, `_pct` percent (41.0 is 41 %). The metrics file
keeps MFU as a fraction (`mfu.dense_6n` = 0.41, names without `_pct`, as `flops.mfu` returns it); it is
converted to percent here and nowhere else. `step_time_per_reference_p50` is dimensionless: the median
over steps of step time / drift-reference time (bench.py's fixed CPU kernel), a run-level figure with
the host's speed divided out. `step_time_ms_mean` is the mean step time (each step capped at 10x the
median, STALL_CAP): tokens/s as the gate judges it; `step_time_per_reference_mean` is it
divided by the mean drift-reference time. `energy_j_per_token` is the GPUs' energy (NVML's counters) over
the measured steps per trained token, in joules; `throttled_windows` how many ranks' GPUs were throttled
while they measured (the metrics' `device_state`, measure/device.py).

The prefix before "/" is the section the MLflow UI groups charts under. Figures that do not exist for a
run (MFU on CPU, the drift reference on GPU, energy without NVML, eval when disabled) are left out rather
than logged as zero.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchgate.kit import stats
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import STATUSES, Comparison

# What each MFU estimator counts (the metrics' `mfu.<estimator>`), said wherever its figure is shown.
MFU_CONVENTIONS = {
    "dense_6n": "6N (Kaplan et al.): the non-embedding parameters' matmuls, forward and backward",
    "attention_aware": "6N + attention (PaLM): full, non-causal attention score and value products",
    "counted": "counted: FlopCounterMode over one training step (forward, loss, backward, every "
    "matmul); causal attention counted as executed (half)",
}
# The run's tokens/s (after "ws<N>/"): tokens per step / the mean step time, as the gate judges it.
RUN_TOKENS_PER_S = "tokens_per_s_mean"
KEY_FIGURES = (RUN_TOKENS_PER_S, "step_time_ms_mean", "peak_memory_mib", "mfu_6nd_pct")
# A step slower than this many times the median step counts as this many: one stall of seconds (a page
# fault storm, a preempted core) must not decide a verdict alone, while a slowdown of every tenth step
# still moves tokens/s. The screen and the A/B decision cap steps alike.
STALL_CAP = 10.0


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else 100.0 * fraction


def _per_reference_p50(samples: dict[str, Any]) -> float | None:
    """Median over steps of step time / drift-reference time, when a reference was timed for every step."""
    steps, references = samples["step_time_s"], samples.get("reference_s")
    if not references or len(references) != len(steps) or not all(r > 0 for r in references):
        return None
    return stats.percentile([t / r for t, r in zip(steps, references, strict=True)], 50)


def bench_figures(metrics: dict[str, Any]) -> dict[str, float]:
    """One world size's summary figures (names without the ws<N>/ prefix)."""
    samples = metrics["samples"]
    mfu = metrics.get("mfu") or {}
    values: dict[str, float | None] = {
        RUN_TOKENS_PER_S: run_rate(metrics),
        "tokens_per_s_p50": stats.percentile(samples["tokens_per_s"], 50),
        "tokens_per_s_p90": stats.percentile(samples["tokens_per_s"], 90),
        "step_time_ms_p50": stats.percentile(samples["step_time_s"], 50) * 1e3,
        "step_time_ms_p90": stats.percentile(samples["step_time_s"], 90) * 1e3,
        "peak_memory_mib": metrics["memory"]["peak_bytes"] / 2**20,
        # null in the file where a figure would mislead: MFU without a known peak, a slope of < 3 steps
        "mfu_6nd_pct": _percent(mfu.get("dense_6n")),
        "mfu_attention_pct": _percent(mfu.get("attention_aware")),
        "mfu_counted_pct": _percent(mfu.get("counted")),
        # FLOPs per trained token as counted (on CPU too, where no MFU is known): a change of model
        # shows here before it shows in tokens/s.
        "counted_flops_per_token": (mfu.get("flops_per_token") or {}).get("counted"),
        "loss_slope": (metrics.get("loss_slope") or {}).get("slope"),
        "step_time_per_reference_p50": _per_reference_p50(samples),
        "step_time_ms_mean": mean_step_time(samples["step_time_s"]) * 1e3,
        "step_time_per_reference_mean": corrected_mean(samples),
        **_device_figures(metrics.get("device_state")),
    }
    return {name: float(v) for name, v in values.items() if v is not None}


def _device_figures(state: dict[str, Any] | None) -> dict[str, float | None]:
    """Energy per token and throttled windows, where the bench read NVML (none on CPU)."""
    if not state or not state.get("available"):
        return {}
    return {
        "energy_j_per_token": state.get("energy_j_per_token"),
        "throttled_windows": state["throttled_windows"] if state.get("windows_measured") else None,
    }


def eval_figures(evaluation: dict[str, Any] | None) -> dict[str, float]:
    if not evaluation or "perplexity" not in evaluation:
        return {}
    figures = {"eval/perplexity": float(evaluation["perplexity"])}
    for name, probe in evaluation.get("probes", {}).items():
        figures[f"eval/probe_{name}_accuracy_pct"] = float(probe["accuracy_pct"])
    return figures


def gate_figures(comparison: Comparison) -> dict[str, float]:
    figures = {"gate/exit_code": float(comparison.exit_code)}
    for status in STATUSES:
        figures[f"gate/checks_{status.lower()}"] = float(sum(c.status == status for c in comparison.checks))
    for check in comparison.checks:
        # The decided tokens/s change per world size: what `kubectl get benchmarkruns` shows.
        if check.metric == "tokens_per_s" and check.world_size is not None and check.change is not None:
            figures[f"gate/ws{check.world_size}/tokens_per_s_change_pct"] = float(check.change)
    return figures


def run_figures(bundle: Bundle, comparison: Comparison | None = None) -> dict[str, float]:
    """Every key figure of one gate run, flat (the parent run's metrics in MLflow)."""
    figures: dict[str, float] = {}
    for ws, metrics in sorted(bundle.metrics.items()):
        figures.update({f"ws{ws}/{name}": v for name, v in bench_figures(metrics).items()})
    scaling = scaling_efficiency(bundle.metrics)
    if scaling is not None:
        figures["scaling_efficiency_pct"] = 100.0 * scaling[1]
    figures.update(eval_figures(bundle.eval))
    if comparison is not None:
        figures.update(gate_figures(comparison))
    return figures


@dataclass(frozen=True)
class HistoryPoint:
    """One earlier gate run of a machine profile and workload, as history and plots see it."""

    commit: str | None
    created_unix: float
    figures: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    branch: str | None = None
    verdict: str | None = None
    is_baseline: bool = False
    acknowledged: str | None = None  # why the change this run starts was accepted (history ack)
    workload: str | None = None  # None where not known (runs read before it was kept)


def counted_unit(metrics: Mapping[str, Any]) -> str:
    """What a run's tokens_per_step counts: its workload's `unit` ("images", "clips"), else tokens."""
    return str(metrics.get("unit") or "tokens")


def rate_name(metrics: Mapping[str, Any]) -> str:
    """The rate as a row names it: "tokens/s", "images/s", "clips/s"."""
    return f"{counted_unit(metrics)}/s"


def rate_unit(metrics: Mapping[str, Any]) -> str:
    """The rate's unit beside a figure: "tok/s" for tokens (as the tables have always printed it),
    "images/s" for images."""
    unit = counted_unit(metrics)
    return "tok/s" if unit == "tokens" else f"{unit}/s"


def run_rate(metrics: dict[str, Any]) -> float:
    """A run's tokens/s as the gate judges it: tokens per step over the mean step time."""
    samples = metrics["samples"]
    step_s = mean_step_time(samples["step_time_s"])
    tokens = stats.percentile(samples["tokens_per_s"], 50) * stats.percentile(samples["step_time_s"], 50)
    return float(metrics.get("tokens_per_step_global") or tokens) / step_s


def scaling_efficiency(metrics: dict[int, dict[str, Any]]) -> tuple[int, float] | None:
    """tokens/s(N) / (N x tokens/s(1)) for the largest N, tokens/s as the gate judges it (over the mean
    step time, so a slowdown of some steps at N counts); None without ws=1 and N > 1."""
    multi = [ws for ws in metrics if ws > 1]
    if 1 not in metrics or not multi:
        return None
    n = max(multi)
    return n, run_rate(metrics[n]) / (n * run_rate(metrics[1]))


def mean_step_time(steps: Sequence[float]) -> float:
    """The run's time per step as tokens/s sees it: the mean, each step capped at STALL_CAP x the median."""
    cap = STALL_CAP * stats.percentile(steps, 50)
    return statistics.fmean(min(t, cap) for t in steps)


def corrected_mean(samples: dict[str, Any]) -> float | None:
    """Mean step time in units of the mean drift reference, None where the run did not time it."""
    ref = samples.get("reference_s")
    steps = samples["step_time_s"]
    if not ref or len(ref) != len(steps) or not all(r > 0 for r in ref):
        return None
    return mean_step_time(steps) / statistics.fmean(ref)


_WS_FIGURE = re.compile(r"^ws(\d+)/")


def run_tokens_per_s(figures: Mapping[str, float]) -> dict[int, float]:
    """The run's tokens/s per world size from its flat figures (an MLflow run's metrics): the logged
    `ws<N>/tokens_per_s_mean`, or, for runs logged before it was, tokens per step (the median step's
    rate x the median step time) over the mean step time: the same statistic from the figures they have."""
    rates: dict[int, float] = {}
    sizes = sorted({int(m[1]) for key in figures if (m := _WS_FIGURE.match(key))})
    for ws in sizes:
        logged = figures.get(f"ws{ws}/{RUN_TOKENS_PER_S}")
        p50, step_p50, step_mean = (
            figures.get(f"ws{ws}/{name}")
            for name in ("tokens_per_s_p50", "step_time_ms_p50", "step_time_ms_mean")
        )
        if logged is not None:
            rates[ws] = float(logged)
        elif p50 and step_p50 and step_mean:
            rates[ws] = float(p50 * step_p50 / step_mean)
    return rates
