"""The eval by seeds, on real evals of gpt-tiny on CPU: a candidate that only draws the random stream
once more before building the model PASSes, a genuinely worse one FAILs, and extra seeds leave the
first seed's figures bit for bit as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchgate.checks.quality import eval_checks
from benchgate.config import RunConfig
from benchgate.measure.evaluate import stage_eval
from benchgate.results.bundle import Bundle

GPT = "benchgate.workloads.gpt:make_workload"
# Few steps, short windows: a seed costs seconds. This early in training seeds spread ~15% in
# perplexity, so one seed of a neutral change lands far outside the 1.5% tolerance.
FAST = {"train_steps": 40, "seq_len": 32, "batch_size": 8}


def _config(config_factory: Any, workload: str, args: dict[str, Any], **eval_: Any) -> RunConfig:
    config: RunConfig = config_factory(
        bench={"workload": workload, "workload_args": args}, eval={**FAST, **eval_}
    )
    return config


def _statuses(base: dict[str, Any], current: dict[str, Any], config: RunConfig) -> dict[str, str]:
    env = {"machine_profile": "cpu-test"}
    checks = eval_checks(
        Bundle(Path("base"), env, eval=base),
        Bundle(Path("cur"), env, eval=current),
        config.gate.tolerances,
        [],
    )
    return {c.name: c.status for c in checks}


@pytest.mark.slow
def test_a_neutral_draw_passes_and_a_worse_model_fails(config_factory: Any, tmp_path: Path) -> None:
    # The baseline draws once more before its weights; the candidate (the reference GPT) does not.
    base = stage_eval(_config(config_factory, "bg_eval_workloads:extra_draw", {}), tmp_path / "base.json")
    neutral_config = _config(config_factory, GPT, {"size": "tiny"})
    neutral = stage_eval(neutral_config, tmp_path / "neutral.json", baseline_eval=base)
    # Its first seed alone is far out of band (a deterministic threshold FAILed it), so three ran.
    assert neutral["more_seeds"].startswith("3 seeds: seed 1234 is out of band")
    assert [s["seed"] for s in neutral["seeds"]] == [1234, 1235, 1236]
    assert neutral["perplexity"] > 1.015 * base["perplexity"]
    got = _statuses(base, neutral, neutral_config)
    assert got == {
        "perplexity (held-out)": "PASS",
        "probe count accuracy": "PASS",
        "probe echo accuracy": "PASS",
        "probe facts accuracy": "PASS",
    }
    # A tenth of the learning rate: the same steps learn far less, on every seed.
    worse_config = _config(config_factory, GPT, {"size": "tiny", "lr": 3e-4})
    worse = stage_eval(worse_config, tmp_path / "worse.json", baseline_eval=base)
    assert len(worse["seeds"]) == 3
    assert _statuses(base, worse, worse_config)["perplexity (held-out)"] == "FAIL"


def test_extra_seeds_leave_the_first_seed_bit_identical(config_factory: Any, tmp_path: Path) -> None:
    config = _config(config_factory, GPT, {"size": "tiny"}, train_steps=2, seeds=2)
    alone = stage_eval(config, tmp_path / "alone.json")
    assert alone["more_seeds"].startswith("one seed: no machine profile given")
    assert all(len(p["items"]) == p["total"] for p in alone["probes"].values())
    # A baseline far better than anything 2 steps learn: the first seed is out of band.
    stored = {**alone, "perplexity": alone["perplexity"] / 2}
    del stored["seeds"]
    more = stage_eval(config, tmp_path / "more.json", baseline_eval=stored)
    assert [s["seed"] for s in more["seeds"]] == [1234, 1235]
    assert more["perplexity"] == alone["perplexity"]  # exact: the first seed is the same model
    assert more["probes"] == alone["probes"]
    first = {k: v for k, v in more["seeds"][0].items() if k != "wall_s"}
    assert first == {k: v for k, v in alone["seeds"][0].items() if k != "wall_s"}
    assert more["seeds"][1]["perplexity"] != alone["perplexity"]
