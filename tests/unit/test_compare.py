"""The gate's decisions on synthetic bundles: one row per case, and the refusals."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchgate.compare import (
    MIN_HISTORY,
    compare,
    merge_confirmation,
    noise_bound,
    scaling_efficiency,
    timing_failures,
)
from benchgate.config import Tolerances
from benchgate.errors import BaselineError
from benchgate.results import Bundle

PROFILE = "cpu-Test-x2_torch2.13.0"


def bench(
    ws: int,
    step_s: float,
    seed: int,
    n: int = 60,
    noise: float = 0.02,
    loss_slope: float = -0.01,
    memory_mib: float = 400.0,
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    times = list(step_s * (1 + noise * rng.standard_normal(n)))
    tokens = 512 * ws
    return {
        "workload": "w",
        "world_size": ws,
        "precision": "fp32",
        "tokens_per_step_global": tokens,
        "memory": {"peak_bytes": memory_mib * 2**20},
        "mfu": {"dense_6n": None, "attention_aware": None},
        "samples": {
            "step_time_s": times,
            "tokens_per_s": [tokens / t for t in times],
            "loss": list(3.0 + loss_slope * np.arange(n) + 0.01 * rng.standard_normal(n)),
        },
    }


def evaluation(perplexity: float = 2.4, facts: float = 31.25) -> dict[str, Any]:
    return {
        "settings": {"train_steps": 250, "seed": 1},
        "perplexity": perplexity,
        "probes": {"facts": {"accuracy_pct": facts}, "count": {"accuracy_pct": 0.0}},
    }


def bundle(
    seed: int, step_s: float = 0.1, step_s_ws2: float = 0.11, profile: str = PROFILE, **changes: Any
) -> Bundle:
    result = Bundle(
        path=Path(f"/runs/{seed}"),
        env={"machine_profile": profile},
        metrics={1: bench(1, step_s, seed), 2: bench(2, step_s_ws2, seed + 100)},
        eval=evaluation(),
    )
    for key, value in changes.items():
        if key == "eval":
            result.eval = value
        elif key.startswith("ws"):
            ws = int(key[2])
            result.metrics[ws] = value
    return result


def statuses(baseline: Bundle | None, current: Bundle, tol: Tolerances | None = None) -> dict[str, str]:
    return {c.name: c.status for c in compare(baseline, current, tol or Tolerances()).checks}


def test_compare_same_code_passes() -> None:
    result = compare(bundle(1), bundle(2), Tolerances())
    assert result.verdict == "PASS"
    assert result.exit_code == 0
    assert {c.status for c in result.checks} <= {"PASS", "INFO"}


@pytest.mark.parametrize(
    ("current", "row", "status"),
    [
        pytest.param(bundle(2, step_s=0.12), "tokens/s p50 (ws=1)", "FAIL", id="20pct-slower-throughput"),
        pytest.param(bundle(2, step_s=0.12), "step time p50 (ws=1)", "FAIL", id="20pct-slower-step"),
        pytest.param(bundle(2, step_s=0.103), "tokens/s p50 (ws=1)", "PASS", id="3pct-within-tolerance"),
        pytest.param(bundle(2, step_s=0.08), "tokens/s p50 (ws=1)", "PASS", id="faster-passes"),
        pytest.param(
            bundle(2, ws1=bench(1, 0.1, 2, memory_mib=460)), "peak memory (ws=1)", "WARN", id="memory-15pct"
        ),
        pytest.param(
            bundle(2, ws1=bench(1, 0.1, 2, memory_mib=430)), "peak memory (ws=1)", "PASS", id="memory-7pct"
        ),
        pytest.param(
            bundle(2, ws1=bench(1, 0.1, 2, loss_slope=0.01)), "loss slope (ws=1)", "FAIL", id="loss-rising"
        ),
        pytest.param(bundle(2, step_s_ws2=0.13), "scaling efficiency (1->2)", "WARN", id="scaling-drop"),
        pytest.param(
            bundle(2, eval=evaluation(perplexity=2.45)), "perplexity (held-out)", "FAIL", id="ppl-2pct"
        ),
        pytest.param(
            bundle(2, eval=evaluation(perplexity=2.42)), "perplexity (held-out)", "PASS", id="ppl-1pct"
        ),
        pytest.param(bundle(2, eval=evaluation(facts=25.0)), "probe facts accuracy", "FAIL", id="probe-drop"),
        pytest.param(bundle(2, eval=evaluation(facts=30.0)), "probe facts accuracy", "PASS", id="probe-1pt"),
    ],
)
def test_compare_case(current: Bundle, row: str, status: str) -> None:
    assert statuses(bundle(1), current)[row] == status


def test_compare_fail_sets_verdict_and_exit_code_1() -> None:
    result = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    assert result.verdict == "FAIL"
    assert result.exit_code == 1
    row = next(c for c in result.checks if c.name == "tokens/s p50 (ws=1)")
    assert row.change == pytest.approx(-16.7, abs=1.5)
    assert row.ci_low is not None and row.ci_high is not None and row.ci_low < row.change < row.ci_high
    assert row.p_value is not None and row.p_value < 1e-6


def test_compare_beyond_tolerance_but_too_noisy_is_a_warning() -> None:
    # The same 8 noisy draws (30% spread), all 15% slower: beyond tolerance, but 8 samples a side
    # cannot tell that from noise.
    base = bundle(1, ws1=bench(1, 0.1, 1, n=8, noise=0.3))
    current = bundle(2, ws1=bench(1, 0.115, 1, n=8, noise=0.3))
    row = next(c for c in compare(base, current, Tolerances()).checks if c.name == "step time p50 (ws=1)")
    assert row.change == pytest.approx(15.0)
    assert row.status == "WARN"
    assert "not significant (p=0.083)" in row.note


def test_compare_slowdown_of_only_the_slow_steps_is_a_warning() -> None:
    # Interference: the slower half of the steps got 30% slower, the fast half did not move.
    base = bundle(1)
    current = bundle(1)
    times = sorted(base.metrics[1]["samples"]["step_time_s"])
    slowed = times[:30] + [t * 1.3 for t in times[30:]]
    current.metrics[1] = copy.deepcopy(base.metrics[1])
    current.metrics[1]["samples"]["step_time_s"] = slowed
    current.metrics[1]["samples"]["tokens_per_s"] = [512 / t for t in slowed]
    row = next(c for c in compare(base, current, Tolerances()).checks if c.name == "step time p50 (ws=1)")
    assert row.change is not None and row.change > 5
    assert row.status == "WARN"
    assert "only slow steps slowed (p10 +0.0%)" in row.note


def with_reference(b: Bundle, host_s: float) -> Bundle:
    for metrics in b.metrics.values():
        metrics["samples"]["reference_s"] = [host_s] * len(metrics["samples"]["step_time_s"])
    return b


def test_compare_slower_host_is_not_slower_code() -> None:
    # Steps 20% slower, and the drift reference 20% slower too: the host slowed, not the code.
    base = with_reference(bundle(1), 0.010)
    current = with_reference(bundle(2, step_s=0.12, step_s_ws2=0.132), 0.012)
    row = next(c for c in compare(base, current, Tolerances()).checks if c.name == "step time p50 (ws=1)")
    assert row.status == "WARN"
    assert "the host slowed down too" in row.note
    assert "host +20.0%" in row.note


def test_compare_slower_code_on_a_steady_host_fails() -> None:
    base = with_reference(bundle(1), 0.010)
    current = with_reference(bundle(2, step_s=0.12), 0.010)
    result = compare(base, current, Tolerances())
    row = next(c for c in result.checks if c.name == "tokens/s p50 (ws=1)")
    assert row.status == "FAIL"
    assert "host +0.0%, drift-corrected" in row.note
    assert result.verdict == "FAIL"


def test_compare_noise_floor_from_baseline_history_turns_a_fail_into_a_warning() -> None:
    base = bundle(1)
    # Earlier baseline runs of this profile drifted by +-15%: a 20% slowdown is within that noise.
    base.history = [
        {"p50": {"1": {"step_time_s": s, "tokens_per_s": 512 / s}}} for s in (0.085, 0.1, 0.115, 0.1)
    ]
    row = next(
        c
        for c in compare(base, bundle(2, step_s=0.12), Tolerances()).checks
        if c.name == "step time p50 (ws=1)"
    )
    assert row.status == "WARN"
    assert "within run-to-run noise" in row.note


def test_compare_quiet_history_keeps_the_fail() -> None:
    base = bundle(1)
    base.history = [{"p50": {"1": {"step_time_s": s, "tokens_per_s": 512 / s}}} for s in (0.099, 0.1, 0.101)]
    assert statuses(base, bundle(2, step_s=0.12))["step time p50 (ws=1)"] == "FAIL"


def test_noise_bound_needs_min_history_and_uses_a_prediction_interval() -> None:
    assert noise_bound([1.0] * (MIN_HISTORY - 1), 0.95, higher_is_better=False) is None
    bound = noise_bound([1.0, 1.1, 0.9], 0.95, higher_is_better=False)
    # mean 1.0, sd 0.1, t(0.95, 2) = 2.92, sqrt(1 + 1/3) = 1.155
    assert bound == pytest.approx(1.0 + 2.92 * 0.1 * 1.1547, rel=1e-3)
    assert noise_bound([1.0, 1.1, 0.9], 0.95, higher_is_better=True) == pytest.approx(2.0 - bound)


def test_compare_without_baseline_reports_new_and_passes() -> None:
    result = compare(None, bundle(1), Tolerances())
    assert result.verdict == "PASS"
    assert "no baseline" in result.notes[0]
    assert statuses(None, bundle(1))["tokens/s p50 (ws=1)"] == "NEW"


def test_compare_without_baseline_still_fails_a_rising_loss() -> None:
    result = compare(None, bundle(1, ws1=bench(1, 0.1, 1, loss_slope=0.02)), Tolerances())
    assert result.verdict == "FAIL"


def test_compare_refuses_another_machine_profile() -> None:
    with pytest.raises(BaselineError, match="different machines are never compared") as info:
        compare(
            bundle(1, profile="H100-80GB-HBM3x8_drv550_cu12.4_torch2.4.0_nccl2.21"), bundle(2), Tolerances()
        )
    assert "H100-80GB-HBM3x8" in str(info.value) and PROFILE in str(info.value)


def test_compare_refuses_another_precision() -> None:
    base = bundle(1)
    base.metrics[1] = copy.deepcopy(base.metrics[1]) | {"precision": "bf16"}
    with pytest.raises(BaselineError, match="precision='bf16'"):
        compare(base, bundle(2), Tolerances())


def test_compare_skips_eval_when_settings_differ() -> None:
    other = evaluation()
    other["settings"] = {"train_steps": 10, "seed": 1}
    result = compare(bundle(1, eval=other), bundle(2, eval=evaluation(perplexity=9.0)), Tolerances())
    assert statuses(bundle(1, eval=other), bundle(2))["perplexity (held-out)"] == "NEW"
    assert any("eval settings or device differ" in n for n in result.notes)


def test_compare_skips_eval_run_on_another_device() -> None:
    cpu, gpu = evaluation() | {"device": "cpu"}, evaluation(perplexity=9.0) | {"device": "cuda:0"}
    assert statuses(bundle(1, eval=cpu), bundle(2, eval=gpu))["perplexity (held-out)"] == "NEW"


def test_scaling_efficiency_is_throughput_ratio_over_n() -> None:
    metrics = {
        1: {"samples": {"tokens_per_s": [100.0, 100.0, 100.0]}},
        4: {"samples": {"tokens_per_s": [300.0, 300.0, 300.0]}},
    }
    assert scaling_efficiency(metrics) == (4, pytest.approx(0.75))
    assert scaling_efficiency({1: metrics[1]}) is None


def test_timing_failures_lists_the_world_sizes_to_confirm() -> None:
    result = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    assert timing_failures(result) == [1]
    assert timing_failures(compare(bundle(1), bundle(2), Tolerances())) == []


def test_merge_confirmation_keeps_a_fail_the_second_run_repeats() -> None:
    first = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    second = compare(bundle(1), bundle(3, step_s=0.121), Tolerances())
    merged = merge_confirmation(first, second)
    row = next(c for c in merged.checks if c.name == "step time p50 (ws=1)")
    assert row.status == "FAIL"
    assert "confirmed by a second run (+2" in row.note
    assert merged.verdict == "FAIL"


def test_merge_confirmation_downgrades_a_fail_the_second_run_does_not_repeat() -> None:
    first = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    second = compare(bundle(1), bundle(3, step_s=0.1), Tolerances())
    merged = merge_confirmation(first, second)
    row = next(c for c in merged.checks if c.name == "tokens/s p50 (ws=1)")
    assert row.status == "WARN"
    assert row.note.startswith("not confirmed by a second run (")
    assert "PASS)" in row.note
    assert merged.verdict == "WARN"
    assert merged.exit_code == 0
