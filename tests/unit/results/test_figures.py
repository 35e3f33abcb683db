"""A run's key figures under the names MLflow, history and plots share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchgate.results.bundle import Bundle
from benchgate.results.comparison import Check, Comparison
from benchgate.results.figures import bench_figures, run_figures


def bench(ws: int, step_s: list[float], mfu_fraction: float | None) -> dict[str, Any]:
    tokens = 100 * ws
    return {
        "samples": {"step_time_s": step_s, "tokens_per_s": [tokens / t for t in step_s]},
        "memory": {"peak_bytes": 3 * 2**20},
        "mfu": {"dense_6n": mfu_fraction, "attention_aware": None},
        "loss_slope": {"slope": -0.5},
    }


def test_run_figures_names_and_values() -> None:
    bundle = Bundle(
        path=Path("/r"),
        env={"machine_profile": "p"},
        metrics={1: bench(1, [0.1, 0.2, 0.3], 0.41), 2: bench(2, [0.25, 0.25, 0.25], None)},
        eval={"perplexity": 1.5, "probes": {"facts": {"accuracy_pct": 50.0}}},
    )
    checks = [Check("a", "", 1.0, status="FAIL"), Check("since anchor", "", 1.0, status="INFO")]
    comparison = Comparison("p", "w", None, checks=checks)
    figures = run_figures(bundle, comparison)
    assert figures["ws1/step_time_ms_p50"] == pytest.approx(200.0)
    assert figures["ws1/tokens_per_s_p50"] == pytest.approx(500.0)
    assert figures["ws1/peak_memory_mib"] == pytest.approx(3.0)
    # The file's fraction 0.41 is logged as 41 (%), once.
    assert figures["ws1/mfu_6nd_pct"] == pytest.approx(41.0)
    # No MFU where it is unknown (CPU): absent, not zero.
    assert "ws2/mfu_6nd_pct" not in figures and "ws1/mfu_attention_pct" not in figures
    # tokens/s(2) / (2 x tokens/s(1)) = 800 / (2 x 500)
    assert figures["scaling_efficiency_pct"] == pytest.approx(80.0)
    assert figures["eval/perplexity"] == 1.5 and figures["eval/probe_facts_accuracy_pct"] == 50.0
    assert figures["gate/checks_fail"] == 1.0 and figures["gate/exit_code"] == 1.0
    # Every row is counted under its status, INFO rows too (the BenchmarkRun status sums them).
    assert sum(v for k, v in figures.items() if k.startswith("gate/checks_")) == len(checks)


def test_run_figures_without_ws1_or_eval_leave_those_out() -> None:
    bundle = Bundle(path=Path("/r"), env={"machine_profile": "p"}, metrics={4: bench(4, [0.1, 0.1], None)})
    figures = run_figures(bundle)
    assert "scaling_efficiency_pct" not in figures
    assert not any(name.startswith(("eval/", "gate/")) for name in figures)
    assert figures["ws4/tokens_per_s_p50"] == pytest.approx(4000.0)


def test_bench_figures_leave_out_what_the_file_has_as_null() -> None:
    metrics = bench(1, [0.1, 0.2], None)
    metrics["loss_slope"] = None  # fewer than 3 measured steps
    metrics["mfu"] = None
    figures = bench_figures(metrics)
    assert "loss_slope" not in figures and "mfu_6nd_pct" not in figures
    assert figures["tokens_per_s_p50"] == pytest.approx(750.0)  # the median of 1000 and 500 tokens/s


def test_mfu_fraction_in_the_file_is_percent_in_the_figures() -> None:
    metrics = bench(1, [0.1, 0.2], 0.41)
    metrics["mfu"]["attention_aware"] = 0.005
    figures = bench_figures(metrics)
    assert figures["mfu_6nd_pct"] == pytest.approx(41.0)
    assert figures["mfu_attention_pct"] == pytest.approx(0.5)
    # The metrics file itself is left as it was: a fraction, under names without _pct.
    assert metrics["mfu"] == {"dense_6n": 0.41, "attention_aware": 0.005}


def test_step_time_per_reference_p50_is_the_median_of_the_per_step_ratios() -> None:
    metrics = bench(1, [0.1, 0.2, 0.3, 0.4], None)
    metrics["samples"]["reference_s"] = [0.01, 0.01, 0.02, 0.1]
    # Ratios 10, 20, 15, 4: median 12.5 (the ratio of the medians, 0.25 / 0.015, would be 16.7).
    assert bench_figures(metrics)["step_time_per_reference_p50"] == pytest.approx(12.5)
    bundle = Bundle(path=Path("/r"), env={"machine_profile": "p"}, metrics={2: metrics})
    assert run_figures(bundle)["ws2/step_time_per_reference_p50"] == pytest.approx(12.5)


@pytest.mark.parametrize(
    "reference_s",
    [
        pytest.param(None, id="absent-gpu"),
        pytest.param([], id="empty"),
        pytest.param([0.01, 0.01], id="fewer-than-steps"),
        pytest.param([0.01, 0.01, 0.01, 0.01], id="more-than-steps"),
        pytest.param([0.01, 0.0, 0.01], id="zero"),
    ],
)
def test_per_reference_figures_are_left_out_without_a_reference_for_every_step(
    reference_s: list[float] | None,
) -> None:
    metrics = bench(1, [0.1, 0.2, 0.3], None)
    if reference_s is not None:
        metrics["samples"]["reference_s"] = reference_s
    figures = bench_figures(metrics)
    assert "step_time_per_reference_p50" not in figures
    assert "step_time_per_reference_mean" not in figures
    assert figures["step_time_ms_p50"] == pytest.approx(200.0)
    assert figures["step_time_ms_mean"] == pytest.approx(200.0)


def test_mean_figures_are_the_capped_mean_step_time_and_it_over_the_mean_reference() -> None:
    # One slow step (6x, under the 10x stall cap) moves the mean, which tokens/s follows, not the p50.
    metrics = bench(1, [0.1, 0.1, 0.1, 0.6], None)
    metrics["samples"]["reference_s"] = [0.01, 0.01, 0.02, 0.02]
    figures = bench_figures(metrics)
    assert figures["step_time_ms_p50"] == pytest.approx(100.0)
    assert figures["step_time_ms_mean"] == pytest.approx(225.0)
    assert figures["step_time_per_reference_mean"] == pytest.approx(0.225 / 0.015)
    # A 100x stall counts as 10 median steps.
    stalled = bench_figures(bench(1, [0.1, 0.1, 0.1, 10.0], None))
    assert stalled["step_time_ms_mean"] == pytest.approx(1e3 * (0.3 + 1.0) / 4)
    bundle = Bundle(path=Path("/r"), env={"machine_profile": "p"}, metrics={2: metrics})
    assert run_figures(bundle)["ws2/step_time_ms_mean"] == pytest.approx(225.0)
