"""Inputs keep the type they were written with, and nothing is changed or dropped without a word.

Workload arguments travel from every entry point (a --workload-arg flag, the TOML file, the pipeline's
parameters, a BenchmarkRun) to the factory with their types: 512 an int, "512" a string. Numbers and
switches in the config are strict (no "10" for 10), world sizes are taken as given, and the result
listing, the eval and the baseline policy say what they did. All pure and fast: the real config
models, the real protobuf Struct that KFP carries dict parameters in, the real compiled pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from google.protobuf import json_format, struct_pb2
from typer.testing import CliRunner

from benchgate.checks.stage import eval_skipped
from benchgate.cli.main import app
from benchgate.cli.run_output import result_files
from benchgate.cli.terminal import parse_pairs
from benchgate.config import RunConfig, load_config, parse_config
from benchgate.config_types import Bool, Float, Int
from benchgate.errors import ConfigError
from benchgate.kfp.params import config_from_parameters, parameters_from_config
from benchgate.kfp.pipeline import validate_pipeline_arguments
from benchgate.kfp.run_request import build_arguments, pipeline_parameter_names
from benchgate.publish.policy import held_back
from benchgate.results.bundle import Bundle
from benchgate.workloads.contract import missing_eval_hook

REPO = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"
# One argument of each type, and a string that looks like a number.
TYPED_ARGS: dict[str, Any] = {"hidden": 512, "tag": "512", "dropout": 0.25, "scale": 2.0, "tied": True}


def through_struct(value: dict[str, Any]) -> dict[str, Any]:
    """What KFP makes of a dict parameter: a protobuf Struct, in which every number is a double."""
    struct = struct_pb2.Struct()
    struct.update(value)
    return dict(json_format.MessageToDict(struct))


# --- workload arguments, end to end ---------------------------------------------------------------


def test_workload_arg_flags_keep_json_types_and_never_read_numbers_from_text() -> None:
    parsed = parse_pairs(
        ["hidden=512", "dropout=0.25", "tied=true", 'tag="512"', "size=tiny", "x=NaN", "y=Infinity"],
        "--workload-arg",
    )
    assert parsed == {"hidden": 512, "dropout": 0.25, "tied": True, "tag": "512", "size": "tiny"} | {
        "x": "NaN",
        "y": "Infinity",
    }
    assert type(parsed["hidden"]) is int and type(parsed["tag"]) is str


def test_toml_workload_args_keep_their_types(tmp_path: Path) -> None:
    path = tmp_path / "bench.toml"
    path.write_text(
        '[bench.workload_args]\nhidden = 512\ntag = "512"\ndropout = 0.25\nscale = 2.0\ntied = true\n'
    )
    args = load_config(path).bench.workload_args
    assert args == TYPED_ARGS
    assert [type(args[k]) for k in TYPED_ARGS] == [int, str, float, float, bool]


def test_pipeline_parameters_carry_workload_args_as_json_with_ints_intact() -> None:
    config = parse_config({"bench": {"workload_args": TYPED_ARGS}, "eval": {"train_steps": 50}})
    arguments = parameters_from_config(config, [1, 2])
    assert isinstance(arguments["workload_args"], str)
    assert "workload_args" not in arguments["config"]["bench"]
    # Every dict parameter goes through a Struct, as on KFP and kfp.local: 50 arrives as 50.0 there.
    carried: dict[str, Any] = {
        k: through_struct(v) if isinstance(v, dict) else v for k, v in arguments.items()
    }
    assert carried["config"]["eval"]["train_steps"] == 50.0
    rebuilt = config_from_parameters(**carried)
    assert rebuilt.bench.workload_args == TYPED_ARGS
    assert [type(rebuilt.bench.workload_args[k]) for k in TYPED_ARGS] == [int, str, float, float, bool]
    assert rebuilt.eval.train_steps == 50 and type(rebuilt.eval.train_steps) is int
    assert rebuilt.bench == config.bench.model_copy(update={"world_sizes": [1, 2]})
    assert (rebuilt.eval, rebuilt.trace, rebuilt.gate.tolerances, rebuilt.gate.ab) == (
        config.eval,
        config.trace,
        config.gate.tolerances,
        config.gate.ab,
    )


def test_a_kfp_ui_user_fills_in_workload_args_as_json() -> None:
    config = validate_pipeline_arguments(
        {"workload_args": '{"hidden": 512, "tag": "512"}', "world_size_n": 2}
    )
    assert config.bench.workload_args == {"hidden": 512, "tag": "512"}
    assert type(config.bench.workload_args["hidden"]) is int
    # The compiled pipeline a KFP UI user fills in: a string parameter that says what it takes.
    spec = yaml.safe_load_all((REPO / "pipelines" / "benchgate.yaml").read_text())
    parameter = next(iter(spec))["root"]["inputDefinitions"]["parameters"]["workload_args"]
    assert parameter["parameterType"] == "STRING" and parameter["defaultValue"] == "{}"
    assert "JSON object" in parameter["description"] and "512 is an int" in parameter["description"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("[512]", "workload_args: got '[512]' (expected a JSON object", id="a-list"),
        pytest.param("hidden=512", "workload_args: got 'hidden=512' (expected a JSON object", id="not-json"),
        pytest.param(512, "workload_args: got 512 (expected a JSON object", id="a-number"),
        pytest.param(
            '{"n": NaN}', "bench.workload_args: got {'n': nan} (Value error, the value of 'n'", id="nan"
        ),
        pytest.param('{"n": [1]}', "the value of 'n' must be a string, a boolean", id="nested"),
    ],
)
def test_bad_workload_args_parameter_names_it(value: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_pipeline_arguments({"workload_args": value})
    assert expected in str(info.value) and info.value.exit_code == 2


def test_workload_args_in_the_config_parameter_are_refused_not_dropped() -> None:
    # They would arrive as floats (a Struct), and the named parameter used to replace them unseen.
    with pytest.raises(ConfigError, match=r"config\.bench\.workload_args: got \{'hidden': 512\} \(set the "):
        validate_pipeline_arguments({"config": through_struct({"bench": {"workload_args": {"hidden": 512}}})})


def test_submit_sends_a_workload_args_param_as_json() -> None:
    parsed = parse_pairs(['workload_args={"hidden": 512, "tag": "512"}'], "--param")
    arguments = build_arguments(SHA, "https://example.com/x.git", "", parsed, pipeline_parameter_names())
    assert json.loads(arguments["workload_args"]) == {"hidden": 512, "tag": "512"}
    assert validate_pipeline_arguments(arguments).bench.workload_args == {"hidden": 512, "tag": "512"}


def test_a_benchmark_run_keeps_yaml_types_of_workload_args() -> None:
    from benchgate.controller.spec.resources import BenchmarkRunSpec, parse_spec, pipeline_arguments

    manifest = f"""
commit: {SHA}
repository: https://example.com/x.git
workloadArgs:
  hidden: 512
  tag: "512"
  dropout: 0.25
  scale: 2.0
  tied: true
"""
    spec = parse_spec(BenchmarkRunSpec, yaml.safe_load(manifest))
    arguments = pipeline_arguments(spec, "", pipeline_parameter_names())
    sent = json.loads(arguments["workload_args"])
    assert sent == TYPED_ARGS
    assert [type(sent[k]) for k in TYPED_ARGS] == [int, str, float, float, bool]
    # Its own numbers are numbers too: a quoted "10" is no count of steps.
    with pytest.raises(ConfigError, match=r"spec\.steps: got '10' \(Input should be a valid integer"):
        parse_spec(BenchmarkRunSpec, yaml.safe_load(manifest) | {"steps": "10"})


# --- strict numbers and switches in the TOML file -------------------------------------------------


def _validators(annotation: Any) -> set[Any]:
    """The before-validators anywhere in a field's annotation (Int | None, list[Int], ...)."""
    found = {getattr(m, "func", None) for m in getattr(annotation, "__metadata__", ())}
    for arg in get_args(annotation):
        found |= _validators(arg)
    return found


KINDS = {get_args(kind)[1].func: kind for kind in (Int, Float, Bool)}


def _typed_fields(model: type[Any], prefix: str = "") -> dict[str, Any]:
    """Dotted name -> Int, Float or Bool for every numeric and boolean field of the config."""
    found: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            found.update(_typed_fields(annotation, f"{prefix}{name}."))
            continue
        funcs = _validators(annotation) | {getattr(m, "func", None) for m in info.metadata}
        for func, kind in KINDS.items():
            if func in funcs:
                found[f"{prefix}{name}"] = kind
    return found


TYPED_FIELDS = _typed_fields(RunConfig)
# The value each kind takes, and what a user might write for it instead.
WRONG = {Int: ['"10"', "10.0", "true"], Float: ['"0.5"', "false"], Bool: ['"true"', "1", '"yes"']}


def test_every_numeric_and_boolean_field_is_strict() -> None:
    # A new field without Int, Float or Bool would escape the checks below.
    numeric = {"bench.steps", "bench.seed", "gate.tolerances.confidence", "gate.ab.max_seconds"}
    boolean = {"eval.enabled", "trace.enabled", "tracking.enabled", "bench.drift_reference"}
    assert numeric | boolean <= set(TYPED_FIELDS), sorted(TYPED_FIELDS)
    assert len(TYPED_FIELDS) >= 35


@pytest.mark.parametrize(
    ("field", "written"),
    [(f, w) for f, kind in sorted(TYPED_FIELDS.items(), key=lambda kv: kv[0]) for w in WRONG[kind]],
)
def test_toml_value_of_the_wrong_type_is_refused_naming_field_and_value(
    tmp_path: Path, field: str, written: str
) -> None:
    *table, key = field.split(".")
    path = tmp_path / "bench.toml"
    path.write_text((f"[{'.'.join(table)}]\n" if table else "") + f"{key} = {written}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    shown = repr(yaml.safe_load(written)) if written.startswith('"') else written.replace("true", "True")
    shown = shown.replace("false", "False")
    assert str(info.value).startswith(f"{field}: got {shown} ("), str(info.value)
    assert info.value.exit_code == 2


def test_toml_steps_as_a_string_exits_2_from_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "bench.toml"
    path.write_text('[bench]\nsteps = "10"\n')
    result = CliRunner().invoke(
        app, ["run", "--config", str(path), "--out", str(tmp_path / "out")], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2
    assert "bench.steps: got '10' (Value error, expected a number, got a string" in result.output
    assert not (tmp_path / "out").exists()


# --- world sizes as given ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("2,1", "--world-sizes: got '2,1' (expected each world size once, in increasing order, e.g. 1,2)"),
        ("1,1", "--world-sizes: got '1,1' (expected each world size once"),
        ("1,2,4", "bench.world_sizes: got [1, 2, 4] (Value error, expected [1] or [1, N]"),
    ],
)
def test_world_sizes_flag_is_taken_as_given(tmp_path: Path, flag: str, expected: str) -> None:
    result = CliRunner().invoke(
        app, ["run", "--world-sizes", flag, "--out", str(tmp_path / "out")], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2
    assert expected in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_world_sizes_in_the_file_are_taken_as_given(tmp_path: Path) -> None:
    path = tmp_path / "bench.toml"
    path.write_text("[bench]\nworld_sizes = [2, 1]\n")
    with pytest.raises(ConfigError, match=r"^bench\.world_sizes: got \[2, 1\] \(.*increasing order"):
        load_config(path)
    assert load_config(overrides={"bench.world_sizes": [1, 2]}).bench.world_sizes == [1, 2]


# --- what the run says it did -----------------------------------------------------------------------


def test_results_line_lists_only_what_the_run_left(tmp_path: Path) -> None:
    (tmp_path / "compare.json").write_text("{}")
    (tmp_path / "metrics-ws1.json").write_text("{}")
    assert result_files(tmp_path) == "compare.json, metrics-ws*.json"
    (tmp_path / "eval.json").write_text('{"skipped": "no logits"}')
    assert result_files(tmp_path) == "compare.json, metrics-ws*.json, eval.json (skipped)"
    (tmp_path / "eval.json").write_text('{"perplexity": 3.1}')
    (tmp_path / "trace").mkdir()
    assert result_files(tmp_path) == "compare.json, metrics-ws*.json, eval.json, trace/"


def run_bundle(steps: int, evaluation: dict[str, Any] | None) -> Bundle:
    metrics = {"workload": "w", "steps": steps, "samples": {"step_time_s": [0.1] * steps}}
    return Bundle(path=Path("/runs/x"), env={}, metrics={1: metrics, 2: metrics}, eval=evaluation)


def test_auto_policy_holds_back_a_run_that_measured_less_than_the_baseline() -> None:
    from benchgate.store.baseline import describe, made_of

    trial = made_of(run_bundle(10, None))
    assert trial == {"steps": 10, "world_sizes": [1, 2], "eval": "off"}
    assert describe(trial) == "10 steps at world sizes 1 and 2, eval off"
    full = made_of(run_bundle(60, {"perplexity": 3.0}))
    short = made_of(run_bundle(10, {"perplexity": 3.0}))
    assert "eval off" in str(held_back(trial, None))  # not even as the first baseline
    assert held_back(short, full) == "the run measured 10 steps, fewer than the current baseline's 60"
    assert held_back(full, short) is None and held_back(short, None) is None
    # A workload without the eval hook can never have an eval: that does not hold it back.
    assert held_back(made_of(run_bundle(60, {"skipped": "no logits"})), full) is None


def test_a_skipped_eval_says_so_and_why() -> None:
    class NoLogits:
        name = "w"

    class NoLength:
        name = "w"

        def logits(self, model: Any, tokens: Any) -> Any:
            return tokens

    assert "has no `logits` method" in str(missing_eval_hook(NoLogits()))  # type: ignore[arg-type]
    assert "has `logits` but no `eval_seq_len`" in str(missing_eval_hook(NoLength()))  # type: ignore[arg-type]
    on, off = parse_config({}), parse_config({"eval": {"enabled": False}})
    assert eval_skipped(on, run_bundle(10, {"skipped": "no logits"})) == "eval skipped: no logits"
    assert str(eval_skipped(off, run_bundle(10, None))).startswith("eval skipped: eval.enabled is false")
    assert eval_skipped(on, run_bundle(10, {"perplexity": 3.0})) is None
