"""A run's key figures (results/figures.py) from a metrics file a real torchrun bench wrote on this host:
the MFU logged as percent, and the drift reference's per-step ratios."""

from __future__ import annotations

import copy
import statistics
from typing import Any

import pytest
from harness import make_config

from benchgate.kit.files import read_json
from benchgate.measure.launch import stage_bench
from benchgate.results.figures import bench_figures
from benchgate.workloads.flops import PeakFlops, mfu

# A peak low enough that sleepy's few FLOPs per step give a visible MFU, high enough to stay under 100%:
# about 3,200 tokens/s x 1,632 FLOPs/token = 5.2 MFLOP/s against 1 GFLOP/s is about 0.5%.
TEST_PEAK_TFLOPS = 0.001


@pytest.fixture(scope="module")
def real_metrics(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """metrics-ws1.json as `torchrun -m benchgate.measure.bench` writes it on this host (sleepy, 8 steps)."""
    tmp_path = tmp_path_factory.mktemp("real-bench")
    config = make_config(tmp_path, bench={"steps": 8, "warmup": 1, "peak_tflops": TEST_PEAK_TFLOPS})
    return dict(read_json(stage_bench(config, 1, tmp_path / "out")))


@pytest.mark.slow
def test_real_bench_mfu_is_logged_as_percent(real_metrics: dict[str, Any]) -> None:
    file_mfu = real_metrics["mfu"]
    assert file_mfu["dense_6n"] is not None and file_mfu["attention_aware"] is not None, (
        f"bench.peak_tflops={TEST_PEAK_TFLOPS} was set but the bench wrote no MFU: {file_mfu}"
    )
    figures = bench_figures(real_metrics)
    estimators = (("mfu_6nd_pct", "dense_6n"), ("mfu_attention_pct", "attention_aware"))
    for figure, estimator in (*estimators, ("mfu_counted_pct", "counted")):
        assert 0 < file_mfu[estimator] < 1  # the file keeps a fraction
        assert figures[figure] == pytest.approx(100 * file_mfu[estimator])
        assert 0 < figures[figure] <= 100
    # sleepy's Linear(16, 16) over 4 rows per 64 tokens: forward and weight gradient (its input needs
    # none), 2 FLOPs per weight each.
    counted = file_mfu["flops_per_token"]["counted"]
    assert counted == figures["counted_flops_per_token"] == 2 * 2 * 16 * 16 * 4 / 64


@pytest.mark.slow
def test_figures_of_a_real_metrics_file(real_metrics: dict[str, Any]) -> None:
    metrics = copy.deepcopy(real_metrics)
    # MFU filled in from the file's own tokens/s and FLOPs per token by the function the bench uses.
    peak = PeakFlops("cpu", metrics["precision"], TEST_PEAK_TFLOPS * 1e12, "test peak")
    flops_per_token = metrics["mfu"]["flops_per_token"]
    for estimator in ("dense_6n", "attention_aware"):
        metrics["mfu"][estimator] = mfu(
            metrics["tokens_per_s"]["p50"], flops_per_token[estimator], peak, metrics["world_size"]
        )
    figures = bench_figures(metrics)
    for figure, estimator in (("mfu_6nd_pct", "dense_6n"), ("mfu_attention_pct", "attention_aware")):
        assert figures[figure] == pytest.approx(100 * metrics["mfu"][estimator])
        assert 0 < figures[figure] <= 100
    # The drift reference is timed after every CPU step; the figure is the median of the per-step ratios.
    samples = metrics["samples"]
    assert len(samples["reference_s"]) == len(samples["step_time_s"]) == 8
    ratios = [t / r for t, r in zip(samples["step_time_s"], samples["reference_s"], strict=True)]
    assert figures["step_time_per_reference_p50"] == pytest.approx(statistics.median(ratios))
    assert figures["step_time_per_reference_p50"] > 0
    assert figures["step_time_ms_p50"] == pytest.approx(1e3 * metrics["step_time_s"]["p50"])
