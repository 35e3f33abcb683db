"""Comparable or refused, on bundles made from one real quick bench: each mismatching side is a copy of
that run with one field edited."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import make_config

from benchgate.checks.comparable import check_comparable, check_profiles
from benchgate.errors import BaselineError
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import stage_bench
from benchgate.measure.stage import stage_env
from benchgate.results.bundle import Bundle, load_bundle

pytestmark = pytest.mark.slow

GPU_PROFILE = "H100-80GB-HBM3x8_drv550_cu12.4_torch2.4.0_nccl2.21"

Edit = Callable[[Path], None]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real ws=1 bench of the sleepy workload, with the env.json of the same machine."""
    root = tmp_path_factory.mktemp("comparable")
    out = root / "run"
    config = make_config(root, bench={"steps": 6, "warmup": 1})
    stage_env(out)
    stage_bench(config, 1, out)
    return out


def variant(real_run: Path, tmp_path: Path, name: str, *edits: Edit) -> Path:
    """A copy of the real run with `edits` applied to its files."""
    directory = tmp_path / name
    shutil.copytree(real_run, directory)
    for edit in edits:
        edit(directory)
    return directory


def set_fields(file: str, **changes: Any) -> Edit:
    def edit(directory: Path) -> None:
        data = read_json(directory / file)
        data.update(changes)
        write_json(directory / file, data)

    return edit


def drop_fields(file: str, *keys: str) -> Edit:
    def edit(directory: Path) -> None:
        data = read_json(directory / file)
        for key in keys:
            del data[key]
        write_json(directory / file, data)

    return edit


def add_world_size_2(directory: Path) -> None:
    data = read_json(directory / "metrics-ws1.json")
    data.update(world_size=2, tokens_per_step_global=2 * data["tokens_per_step_per_rank"])
    write_json(directory / "metrics-ws2.json", data)


def test_real_run_records_what_is_checked(real_run: Path) -> None:
    metrics = read_json(real_run / "metrics-ws1.json")
    assert metrics["device"] == "cpu"
    assert metrics["precision"] == "fp32"
    assert metrics["tokens_per_step_global"] == 64
    assert metrics["threads_per_rank"] == 1
    assert (metrics["steps"], metrics["warmup"]) == (6, 1)
    # The worker's profile is the env stage's: check_profiles passes on a run made on one machine.
    check_profiles(load_bundle(real_run))


def test_same_run_settings_are_comparable(real_run: Path, tmp_path: Path) -> None:
    baseline = load_bundle(real_run)
    current = load_bundle(variant(real_run, tmp_path, "current"))
    assert check_comparable(baseline, current) == []


def test_world_size_only_this_run_has_is_not_refused(real_run: Path, tmp_path: Path) -> None:
    current = load_bundle(variant(real_run, tmp_path, "current", add_world_size_2))
    assert sorted(current.metrics) == [1, 2]
    assert check_comparable(load_bundle(real_run), current) == []


@pytest.mark.parametrize(
    ("edits", "field", "baseline_value", "current_value"),
    [
        pytest.param(
            [
                set_fields("env.json", machine_profile=GPU_PROFILE),
                set_fields("metrics-ws1.json", machine_profile=GPU_PROFILE),
            ],
            "machine profile",
            None,  # the real run's profile, read from its env.json
            GPU_PROFILE,
            id="machine-profile",
        ),
        pytest.param(
            [set_fields("metrics-ws1.json", workload="other")], "workload", "sleepy", "other", id="workload"
        ),
        pytest.param(
            [set_fields("metrics-ws1.json", device="NVIDIA H100 80GB HBM3")],
            "device",
            "cpu",
            "NVIDIA H100 80GB HBM3",
            id="device-type",
        ),
        pytest.param(
            [set_fields("metrics-ws1.json", precision="bf16")], "precision", "fp32", "bf16", id="precision"
        ),
        pytest.param(
            [set_fields("metrics-ws1.json", tokens_per_step_global=128)],
            "tokens_per_step_global",
            64,
            128,
            id="tokens-per-step",
        ),
        pytest.param(
            [set_fields("metrics-ws1.json", threads_per_rank=4)],
            "threads_per_rank",
            1,
            4,
            id="threads-per-rank",
        ),
    ],
)
def test_mismatch_is_refused_naming_field_values_and_baseline(
    real_run: Path,
    tmp_path: Path,
    edits: list[Edit],
    field: str,
    baseline_value: Any,
    current_value: Any,
) -> None:
    baseline = load_bundle(real_run)
    current = load_bundle(variant(real_run, tmp_path, "current", *edits))
    if baseline_value is None:
        baseline_value = baseline.machine_profile
    with pytest.raises(BaselineError) as info:
        check_comparable(baseline, current)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert f"baseline {real_run}" in message
    assert field in message
    assert repr(baseline_value) in message and repr(current_value) in message
    if field not in ("machine profile", "workload"):
        assert f"metrics-ws1.json has {field}={baseline_value!r}, this run has {current_value!r}: " in message
        assert "not comparable" in message


def test_world_size_that_differs_from_the_file_name_is_refused(real_run: Path, tmp_path: Path) -> None:
    # load_bundle already refuses such a file; a Bundle built by other means is checked again.
    baseline = load_bundle(real_run)
    current = load_bundle(variant(real_run, tmp_path, "current"))
    current.metrics[1]["world_size"] = 2
    with pytest.raises(BaselineError) as info:
        check_comparable(baseline, current)
    assert info.value.exit_code == 2
    assert f"baseline {real_run}: metrics-ws1.json has world_size=1, this run has 2: not comparable" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("edits", "note"),
    [
        pytest.param(
            [set_fields("metrics-ws1.json", steps=30)],
            "ws=1: steps differ (baseline 6, this run 30): p50s compare, but tails and CIs are not like "
            "for like",
            id="steps",
        ),
        pytest.param(
            [set_fields("metrics-ws1.json", warmup=5)],
            "ws=1: warmup differs (baseline 1, this run 5): early measured steps of one run may still be "
            "warming up",
            id="warmup",
        ),
        pytest.param(
            [drop_fields("metrics-ws1.json", "threads_per_rank", "device")],
            "ws=1: this run's metrics-ws1.json does not record device, threads_per_rank (an older file): "
            "unknown, so not checked",
            id="unknown-device-and-threads",
        ),
    ],
)
def test_difference_that_does_not_prevent_comparison_is_noted(
    real_run: Path, tmp_path: Path, edits: list[Edit], note: str
) -> None:
    current = load_bundle(variant(real_run, tmp_path, "current", *edits))
    assert check_comparable(load_bundle(real_run), current) == [note]


def test_field_the_baseline_lacks_is_unknown_not_refused(real_run: Path, tmp_path: Path) -> None:
    # An older baseline without threads_per_rank, against a run with a different thread count.
    baseline = load_bundle(
        variant(real_run, tmp_path, "baseline", drop_fields("metrics-ws1.json", "threads_per_rank"))
    )
    current = load_bundle(
        variant(real_run, tmp_path, "current", set_fields("metrics-ws1.json", threads_per_rank=4))
    )
    assert check_comparable(baseline, current) == [
        "ws=1: the baseline's metrics-ws1.json does not record threads_per_rank (an older file): "
        "unknown, so not checked"
    ]


@pytest.mark.parametrize("role", ["current", "baseline"])
def test_metrics_file_from_another_machine_is_refused(real_run: Path, tmp_path: Path, role: str) -> None:
    mixed = load_bundle(
        variant(
            real_run,
            tmp_path,
            "mixed",
            add_world_size_2,
            set_fields("metrics-ws2.json", machine_profile=GPU_PROFILE),
        )
    )
    profile = mixed.machine_profile
    with pytest.raises(BaselineError) as info:
        check_profiles(mixed)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert message.startswith(f"{tmp_path / 'mixed'}: metrics-ws2.json records machine profile ")
    assert repr(GPU_PROFILE) in message and f"env.json records {profile!r}" in message
    # check_comparable checks both runs' own files before comparing them.
    clean = load_bundle(real_run)
    pair: tuple[Bundle, Bundle] = (clean, mixed) if role == "current" else (mixed, clean)
    with pytest.raises(BaselineError, match=r"metrics-ws2\.json records machine profile"):
        check_comparable(*pair)
