from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchgate.config import MAX_SEED, MIN_STEPS, RunConfig, load_config
from benchgate.errors import ConfigError
from benchgate.kfp.params import config_from_parameters
from benchgate.kfp.pipeline import validate_pipeline_arguments


def test_config_defaults_are_valid_and_match_the_documented_tolerances() -> None:
    config = load_config()
    tol = config.gate.tolerances
    assert (tol.throughput_drop_pct, tol.memory_increase_pct) == (5, 10)
    ab = config.gate.ab
    assert (ab.min_rounds, ab.max_rounds, ab.max_seconds) == (4, 27, 600)
    assert (ab.min_measured_s, ab.pin_cores) == (2.0, True)
    assert config.gate.on_unknown == "fail"
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
    config = load_config(overrides={"bench.world_sizes": [1, 2], "bench.workload_args": {"size": "tiny"}})
    again = RunConfig.model_validate_json(config.model_dump_json())
    assert again == config
    assert again.bench.world_sizes == [1, 2]


# What the runner needs, refused at the edge: each value below used to validate and then fail minutes
# later (or never run as asked).
@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {"bench.steps": 2},
            "bench.steps: got 2 (Input should be greater than or equal to 3)",
            id="2-steps",
        ),
        pytest.param(
            {"bench.steps": True}, "bench.steps: got True (Value error, expected a number", id="bool"
        ),
        pytest.param({"gate.ab.steps": 2}, "gate.ab.steps: got 2 (Input should be greater", id="ab-steps"),
        pytest.param({"gate.ab.min_rounds": 1}, "gate.ab.min_rounds: got 1", id="ab-one-round"),
        pytest.param(
            {"gate.ab.min_rounds": 6, "gate.ab.max_rounds": 4},
            "gate.ab.max_rounds: got 4 (Value error, must be >= gate.ab.min_rounds (6))",
            id="ab-budget",
        ),
        pytest.param(
            {"bench.world_sizes": [2]}, "bench.world_sizes: got [2] (Value error, expected [1] or", id="ws-2"
        ),
        pytest.param({"bench.world_sizes": [1, 2, 4]}, "bench.world_sizes: got [1, 2, 4]", id="ws-three"),
        pytest.param({"bench.world_sizes": [2, 4]}, "bench.world_sizes: got [2, 4]", id="ws-no-1"),
        pytest.param({"bench.world_sizes": []}, "needs at least one world size", id="ws-empty"),
        pytest.param({"bench.world_sizes": [1, True]}, "bench.world_sizes.1: got True", id="ws-bool"),
        pytest.param(
            {"bench.timeout_s": float("inf")}, "bench.timeout_s: got inf (Input should be a finite", id="inf"
        ),
        pytest.param({"bench.run_timeout_s": 1e300}, "bench.run_timeout_s: got 1e+300", id="huge-timeout"),
        pytest.param({"tracking.max_wait_s": float("nan")}, "tracking.max_wait_s: got nan", id="nan-wait"),
        pytest.param(
            {"gate.tolerances.loss_slope_max": float("nan")}, "loss_slope_max: got nan", id="nan-slope"
        ),
        pytest.param({"bench.seed": 2**40}, "bench.seed: got 1099511627776", id="seed"),
        pytest.param({"eval.seed": 2**40}, "eval.seed: got 1099511627776", id="eval-seed"),
        # A field's own bound holds beside the one every integer has (JSON-safe).
        pytest.param({"tracking.history_runs": 501}, "tracking.history_runs: got 501", id="own-bound"),
        pytest.param(
            {"bench.threads_per_rank": 2**31}, "bench.threads_per_rank: got 2147483648", id="threads"
        ),
        pytest.param({"bench.steps": 2**60}, "bench.steps: got 1152921504606846976", id="past-json"),
        pytest.param(
            {"bench.steps": 10**5000}, "bench.steps: got an integer of 16610 bits", id="5000-digits"
        ),
        pytest.param({"bench.workload": "my bench:make"}, "bench.workload: got 'my bench:make'", id="spec"),
        pytest.param({"bench.workload": "pkg.:make"}, "bench.workload: got 'pkg.:make'", id="spec-dot"),
        pytest.param(
            {"bench.workload_args": {"size": float("nan")}},
            "bench.workload_args: got {'size': nan} (Value error, the value of 'size' must be a string",
            id="arg-nan",
        ),
        pytest.param({"bench.workload_args": {"n": [1]}}, "the value of 'n' must be", id="arg-list"),
        pytest.param({"out": ""}, "out: got '' (Value error, expected a path", id="empty-out"),
        pytest.param({"gate.baseline_dir": "a\x00b"}, "gate.baseline_dir: got 'a\\x00b'", id="nul-path"),
    ],
)
def test_config_refuses_what_the_runner_cannot_run(overrides: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert expected in str(info.value)
    assert info.value.exit_code == 2


def test_the_runners_minimums_are_accepted() -> None:
    config = load_config(
        overrides={
            "bench.steps": MIN_STEPS,
            "bench.warmup": 0,
            "bench.world_sizes": [1, 2],
            "gate.ab.steps": MIN_STEPS,
            "gate.ab.min_rounds": 2,
            "gate.ab.max_rounds": 2,
            "bench.seed": MAX_SEED,
        }
    )
    assert config.bench.world_sizes == [1, 2]
    assert load_config(overrides={"bench.world_sizes": [1]}).bench.world_sizes == [1]


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param(
            "bench = 3\n", "bench: got 3 (expected a table, as bench.warmup is set in it)", id="not-a-table"
        ),
        pytest.param("[bench]\nsteps = " + "1" * 5000 + "\n", "is not valid TOML", id="5000-digit-int"),
        pytest.param("[bench]\nsteps = " + "[" * 2000 + "]" * 2000 + "\n", "nested too deeply", id="deep"),
        pytest.param(
            "[bench]\nsteps = 0x" + "f" * 2000 + "\n", "bench.steps: got an integer of 8000 bits", id="hex"
        ),
        pytest.param("[bench]\nsteps = nan\n", "bench.steps: got nan", id="nan"),
    ],
)
def test_config_file_that_breaks_the_loader_is_a_config_error(
    tmp_path: Path, document: str, expected: str
) -> None:
    path = tmp_path / "bench.toml"
    path.write_text(document)
    with pytest.raises(ConfigError) as info:
        load_config(path, {"bench.warmup": 1})  # a flag over the file, as `--warmup 1` is
    assert expected in str(info.value)


def test_config_path_that_cannot_be_read_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--config: cannot read .*Is a directory"):
        load_config(tmp_path)
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'[bench]\nworkload = "caf\xe9:make"\n')
    with pytest.raises(ConfigError, match=r"--config: cannot read .*latin1.toml.*utf-8"):
        load_config(latin1)


# The pipeline's parameters are a second edge: `benchgate submit --param`, the KFP UI and a BenchmarkRun
# fill them in, and the env task (and, before submitting, the CLI and the controller) validate them.
PARAMETERS: dict[str, Any] = {
    "config": {},
    "workload": "m:f",
    "workload_args": {},
    "world_size_n": 2,
    "steps": 5,
    "warmup": 1,
    "tolerances": {},
    "update_baseline": "auto",
    "baseline_dir": "/b",
    "mlflow_tracking_uri": "",
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"steps": 2}, "bench.steps: got 2", id="steps"),
        pytest.param({"world_size_n": 0}, "world_size_n: got 0 (expected an integer >= 1)", id="ws-0"),
        pytest.param({"world_size_n": "8"}, "world_size_n: got '8' (expected an integer >= 1)", id="ws-text"),
        pytest.param({"world_size_n": True}, "world_size_n: got True", id="ws-bool"),
        pytest.param({"config": []}, "config: got [] (expected a dict", id="config-list"),
        pytest.param({"config": {"bench": 3}}, "config.bench: got 3 (expected a dict", id="bench-int"),
        pytest.param(
            {"config": {"gate": {"tolerances": "x"}}}, "config.gate.tolerances: got 'x'", id="tol-str"
        ),
        pytest.param({"tolerances": [1]}, "tolerances: got [1] (expected a dict", id="tolerances-list"),
        pytest.param(
            {"config": {"bench": {"world_sizes": [1, 2, 4]}}},
            "bench.world_sizes: got [1, 2, 4]",
            id="config-ws",
        ),
    ],
)
def test_pipeline_parameters_are_checked_for_type_and_value(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_parameters(**{**PARAMETERS, **changes})
    assert expected in str(info.value)


def test_submit_checks_its_arguments_against_the_pipelines_defaults() -> None:
    # Only what was passed; the rest is the compiled pipeline's defaults (60 steps, world_size_n 8).
    config = validate_pipeline_arguments({"commit": "a" * 40, "repository": "https://x/y.git", "warmup": 3})
    assert (config.bench.steps, config.bench.warmup, config.bench.world_sizes) == (60, 3, [1, 8])
    with pytest.raises(ConfigError, match=r"bench\.steps: got 1 "):
        validate_pipeline_arguments({"commit": "a" * 40, "steps": 1})


def test_the_controller_refuses_a_run_spec_the_runner_cannot_run() -> None:
    from benchgate.controller.spec.resources import BenchmarkRunSpec, parse_spec, pipeline_arguments
    from benchgate.kfp.run_request import pipeline_parameter_names

    spec = {"commit": "a" * 40, "repository": "https://example.com/x.git", "steps": 2}
    # The CRD's schema and the controller's model share the runner's minimum (3 steps).
    with pytest.raises(ConfigError, match=r"spec\.steps: got 2 \(Input should be greater than or equal to 3"):
        parse_spec(BenchmarkRunSpec, spec)
    accepted = parse_spec(BenchmarkRunSpec, {**spec, "steps": 3})
    assert pipeline_arguments(accepted, "", pipeline_parameter_names())["steps"] == 3
