"""The smallest bench the config accepts (bench.steps = MIN_STEPS, no warmup), run for real under torchrun:
one the rest of the gate can judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchgate.config import MIN_STEPS


@pytest.mark.slow
def test_a_run_at_the_minimum_steps_benches_loads_and_compares(config_factory: Any, tmp_path: Path) -> None:
    # The smallest bench the config accepts is one the rest of the gate can judge: the result loader
    # (at least 2 samples) and the loss-slope check (3 points), with itself as the baseline.
    from benchgate.checks.compare import compare
    from benchgate.measure.launch import stage_bench
    from benchgate.measure.stage import stage_env
    from benchgate.results.bundle import load_bundle

    config = config_factory(bench={"steps": MIN_STEPS, "warmup": 0})
    out = tmp_path / "run"
    stage_bench(config, 1, out)
    stage_env(out)
    bundle = load_bundle(out)
    checks = {c.name: c for c in compare(bundle, bundle, config.gate.tolerances).checks}
    assert len(bundle.metrics[1]["samples"]["loss"]) == MIN_STEPS
    assert checks["loss slope (ws=1)"].baseline is not None
