from __future__ import annotations

from pathlib import Path

import pytest

from benchgate.config import RunConfig, load_config
from benchgate.errors import ConfigError


def test_config_defaults_are_valid_and_match_the_documented_tolerances() -> None:
    config = load_config()
    tol = config.gate.tolerances
    assert (tol.throughput_drop_pct, tol.memory_increase_pct) == (5, 10)
    ab = config.gate.ab
    assert (ab.min_rounds, ab.max_rounds, ab.max_seconds) == (4, 12, 600)
    assert (tol.perplexity_increase_pct, tol.probe_accuracy_drop_points) == (1.5, 2)
    assert tol.scaling_efficiency_drop_points == 5
    assert config.bench.workload == "benchgate.workloads.gpt:make_workload"
    assert config.bench.timeout_s > 0


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param({"bench.steps": 0}, "bench.steps: got 0", id="zero-steps"),
        pytest.param({"bench.steps": -5}, "bench.steps: got -5", id="negative-steps"),
        pytest.param({"bench.warmup": -1}, "bench.warmup: got -1", id="negative-warmup"),
        pytest.param({"bench.workload": "no_colon"}, "bench.workload: got 'no_colon'", id="workload-spec"),
        pytest.param({"bench.world_sizes": [0, 2]}, "bench.world_sizes: got [0, 2]", id="world-size-zero"),
        pytest.param({"bench.world_sizes": [2, 2]}, "must be distinct", id="world-size-duplicate"),
        pytest.param({"bench.timeout_s": 0}, "bench.timeout_s: got 0", id="timeout-zero"),
        pytest.param({"bench.device": "tpu"}, "bench.device: got 'tpu'", id="device"),
        pytest.param(
            {"gate.tolerances.throughput_drop_pct": -3},
            "gate.tolerances.throughput_drop_pct: got -3",
            id="negative-tolerance",
        ),
        pytest.param(
            {"gate.tolerances.throughput_drop_pct": 150},
            "gate.tolerances.throughput_drop_pct: got 150",
            id="tolerance-over-100",
        ),
        pytest.param({"gate.tolerances.confidence": 1.2}, "gate.tolerances.confidence: got 1.2", id="conf"),
        pytest.param({"gate.tolerances.throughput_drop": 5}, "throughput_drop: got 5", id="typo-key"),
        pytest.param({"eval.train_steps": 0}, "eval.train_steps: got 0", id="eval-steps"),
    ],
)
def test_config_bad_value_names_field_and_value(overrides: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert expected in str(info.value)
    assert info.value.exit_code == 2


def test_config_file_is_read_and_flags_override_it(tmp_path: Path) -> None:
    path = tmp_path / "bench.toml"
    path.write_text("[bench]\nsteps = 7\nwarmup = 3\n[gate.tolerances]\nthroughput_drop_pct = 2.5\n")
    config = load_config(path, {"bench.steps": 11})
    assert config.bench.steps == 11
    assert config.bench.warmup == 3
    assert config.gate.tolerances.throughput_drop_pct == 2.5


def test_config_file_missing_or_malformed_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[bench\nsteps = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_config_round_trips_through_json() -> None:
    config = load_config(overrides={"bench.world_sizes": [2, 1], "bench.workload_args": {"size": "tiny"}})
    again = RunConfig.model_validate_json(config.model_dump_json())
    assert again == config
    assert again.bench.world_sizes == [1, 2]
