"""A run's key figures under the names MLflow, history and plots share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchgate.compare import Check, Comparison
from benchgate.figures import bench_figures, run_figures
from benchgate.results import Bundle


def bench(ws: int, step_s: list[float], mfu: float | None) -> dict[str, Any]:
    tokens = 100 * ws
    return {
        "samples": {"step_time_s": step_s, "tokens_per_s": [tokens / t for t in step_s]},
        "memory": {"peak_bytes": 3 * 2**20},
        "mfu": {"dense_6n": mfu, "attention_aware": None},
        "loss_slope": {"slope": -0.5},
    }


def test_run_figures_names_and_values() -> None:
    bundle = Bundle(
        path=Path("/r"),
        env={"machine_profile": "p"},
        metrics={1: bench(1, [0.1, 0.2, 0.3], 41.0), 2: bench(2, [0.25, 0.25, 0.25], None)},
        eval={"perplexity": 1.5, "probes": {"facts": {"accuracy_pct": 50.0}}},
    )
    comparison = Comparison("p", "w", None, checks=[Check("a", "", 1.0, status="FAIL")])
    figures = run_figures(bundle, comparison)
    assert figures["ws1/step_time_ms_p50"] == pytest.approx(200.0)
    assert figures["ws1/tokens_per_s_p50"] == pytest.approx(500.0)
    assert figures["ws1/peak_memory_mib"] == pytest.approx(3.0)
    assert figures["ws1/mfu_6nd_pct"] == 41.0
    # No MFU where it is unknown (CPU): absent, not zero.
    assert "ws2/mfu_6nd_pct" not in figures and "ws1/mfu_attention_pct" not in figures
    # tokens/s(2) / (2 x tokens/s(1)) = 800 / (2 x 500)
    assert figures["scaling_efficiency_pct"] == pytest.approx(80.0)
    assert figures["eval/perplexity"] == 1.5 and figures["eval/probe_facts_accuracy_pct"] == 50.0
    assert figures["gate/checks_fail"] == 1.0 and figures["gate/exit_code"] == 1.0


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
