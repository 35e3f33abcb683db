"""kfp/trusted.py: what a trusted task takes from a task that ran the code under test."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from benchgate.errors import RunFailedError
from benchgate.kfp.trusted import NOT_FROM_USER_CODE, copy_untrusted


def test_regular_files_and_directories_are_copied_and_the_trusted_names_left_out(tmp_path: Path) -> None:
    source, dest = tmp_path / "ab", tmp_path / "publish"
    (source / "ab" / "ws1").mkdir(parents=True)
    (source / "compare.json").write_text("{}")
    (source / "ab" / "ws1" / "ab.json").write_text("{}")
    for name in NOT_FROM_USER_CODE:  # a forged baseline copy, spool entry or published.json
        (source / name).mkdir()
        (source / name / "baseline.json").write_text('{"forged": true}')
    copy_untrusted(source, dest, what="the A/B results", leave_out=NOT_FROM_USER_CODE)
    assert (dest / "compare.json").is_file() and (dest / "ab" / "ws1" / "ab.json").is_file()
    assert not any((dest / name).exists() for name in NOT_FROM_USER_CODE)


@pytest.mark.parametrize("where", ["compare.md", "ab/ws1"])
def test_a_symbolic_link_is_refused_naming_it(tmp_path: Path, where: str) -> None:
    # A link to the trusted pod's credential or volume would be read into the published run.
    secret = tmp_path / "mounted-secret"
    secret.write_text("password")
    source = tmp_path / "ab"
    (source / "ab").mkdir(parents=True)
    os.symlink(secret, source / where)
    refused = re.escape(f"the A/B results: {where} is not a regular file or directory")
    with pytest.raises(RunFailedError, match=refused):
        copy_untrusted(source, tmp_path / "publish", what="the A/B results")


def test_a_fifo_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "ab"
    source.mkdir()
    os.mkfifo(source / "compare.json")
    with pytest.raises(RunFailedError, match=r"compare\.json is not a regular file"):
        copy_untrusted(source, tmp_path / "publish", what="the A/B results")


def _parameters(tmp_path: Path) -> dict[str, object]:
    from benchgate.config import DEFAULT_WORKLOAD

    return {
        "config": {"tracking": {"experiment": "team-a"}},
        "workload": DEFAULT_WORKLOAD,
        "workload_args": '{"hidden": 64}',
        "world_size_n": 1,
        "steps": 5,
        "warmup": 1,
        "tolerances": {"throughput_drop_pct": 5},
        "update_baseline": "auto",
        "baseline_dir": str(tmp_path / "baselines"),
        "mlflow_tracking_uri": "http://mlflow.mlflow:5000",
    }


def test_the_setup_config_the_parameters_make_is_accepted(tmp_path: Path) -> None:
    from benchgate.kfp.params import config_from_parameters
    from benchgate.kfp.trusted import check_setup_config
    from benchgate.kit.files import write_json

    parameters = _parameters(tmp_path)
    write_json(tmp_path / "config.json", config_from_parameters(**parameters).model_dump(mode="json"))  # type: ignore[arg-type]
    check_setup_config(tmp_path, parameters, "")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tracking.uri", "http://attacker.example:5000"),  # the trusted task's credential sent elsewhere
        ("tracking.experiment", "team-b"),
        ("gate.update_baseline", "always"),
        ("gate.tolerances.throughput_drop_pct", 90.0),
    ],
)
def test_a_setup_config_changed_by_user_code_is_refused_naming_the_setting(
    tmp_path: Path, field: str, value: object
) -> None:
    from benchgate.kfp.params import config_from_parameters
    from benchgate.kfp.trusted import check_setup_config
    from benchgate.kit.files import write_json

    parameters = _parameters(tmp_path)
    written = config_from_parameters(**parameters).model_dump(mode="json")  # type: ignore[arg-type]
    *parents, leaf = field.split(".")
    node = written
    for key in parents:
        node = node[key]
    node[leaf] = value
    write_json(tmp_path / "config.json", written)
    with pytest.raises(
        RunFailedError, match=re.escape(f"config.json: {field} is not what the run's parameters")
    ):
        check_setup_config(tmp_path, parameters, "")
