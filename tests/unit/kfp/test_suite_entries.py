"""A suite's entry as the cluster carries it (kfp/suite_entry.py): expanded, decoded, applied."""

from __future__ import annotations

import json

import pytest

from benchgate.errors import ConfigError
from benchgate.kfp.pipeline import validate_pipeline_arguments
from benchgate.kfp.suite_entry import checked_entries, entry_parameter, read_entry
from benchgate.kfp.tasks import run_record

RAW = {
    "name": "gpt-tiny-b8",
    "workload": "benchgate.workloads.gpt:make_workload",
    "args": {"size": "tiny", "dropout": 0.0},
    "variant": {"precision": "bf16", "compile": True, "batch_size": 8},
    "config": {"eval": {"enabled": False}, "bench": {"seed": 7}},
}


def test_an_entry_travels_as_json_with_its_variant_applied_and_its_types_kept() -> None:
    (entry,) = checked_entries([RAW], "entries")
    text = entry_parameter(entry)
    decoded = json.loads(text)
    assert decoded["workload_args"] == {"size": "tiny", "dropout": 0.0, "batch_size": 8}
    assert isinstance(decoded["workload_args"]["batch_size"], int)
    assert isinstance(decoded["workload_args"]["dropout"], float)
    # The eval follows the variant's batch size, as in a local suite (suite/spec.entry_config).
    assert decoded["config"] == {
        "eval": {"enabled": False, "batch_size": 8},
        "bench": {"seed": 7, "precision": "bf16", "compile": True},
    }
    assert read_entry(text)["name"] == "gpt-tiny-b8"


def test_the_entry_goes_over_the_pipelines_parameters_as_the_env_task_applies_it() -> None:
    (entry,) = checked_entries([RAW], "entries")
    config = validate_pipeline_arguments(
        {
            "workload": "my_pkg:other",
            "workload_args": '{"hidden": 64}',
            "warmup": 2,
            "config": {"bench": {"seed": 1, "device": "cpu"}, "trace": {"enabled": False}},
            "suite_entry": entry_parameter(entry),
        }
    )
    bench = config.bench
    assert (bench.workload, bench.name) == ("benchgate.workloads.gpt:make_workload", "gpt-tiny-b8")
    assert bench.workload_args == {"size": "tiny", "dropout": 0.0, "batch_size": 8}
    # The entry's config over the pipeline's: its seed wins, the pipeline's device and trace stay.
    assert (bench.seed, bench.device, bench.precision, bench.compile) == (7, "cpu", "bf16", True)
    assert config.trace.enabled is False and config.eval.enabled is False
    assert config.eval.batch_size == 8


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("not json", "suite_entry: got 'not json' (expected one entry as a JSON object"),
        (
            '{"name": "x"}',
            'suite_entry: got \'{"name": "x"}\' (expected a JSON object of exactly name, workload',
        ),
        (
            json.dumps(
                {"name": "../up", "workload": "m:f", "workload_args": {}, "variant": {}, "config": {}}
            ),
            "suite_entry[0] '../up': name: got '../up'",
        ),
        (
            json.dumps(
                {"name": "a", "workload": "m:f", "workload_args": {}, "variant": {}, "config": {"out": "x"}}
            ),
            "suite_entry[0] 'a': config.out: set by the suite's --out",
        ),
    ],
)
def test_a_bad_suite_entry_parameter_is_refused_naming_it(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        read_entry(text)
    assert named in str(refused.value)


def test_each_entry_of_a_kfp_run_has_its_own_run_key() -> None:
    record = run_record("4f1c-uuid", "benchgate-suite-abc", "gpt-tiny-b8")
    assert record["run_key"] == "4f1c-uuid-gpt-tiny-b8" and record["suite_entry"] == "gpt-tiny-b8"
    assert record["kfp_run_id"] == "4f1c-uuid"
    assert "suite_entry" not in run_record("4f1c-uuid", "benchgate-abc")
