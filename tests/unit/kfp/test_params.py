from pathlib import Path
from typing import Any

import pytest

from benchgate.config import RunConfig, parse_config
from benchgate.errors import ConfigError
from benchgate.kfp.params import (
    CLUSTER_BASELINE_DIR,
    config_from_parameters,
    parameters_from_config,
    task_stores,
)


def test_pipeline_parameters_describe_the_config_they_came_from(tmp_path: Path) -> None:
    config = parse_config(
        {
            "bench": {"workload": "m:f", "workload_args": {"size": "tiny"}, "steps": 7, "seed": 3},
            "eval": {"enabled": False},
            "gate": {"tolerances": {"throughput_drop_pct": 3.0}, "baseline_dir": str(tmp_path)},
            "tracking": {"local_dir": str(tmp_path / "mlflow"), "spool_dir": str(tmp_path / "spool")},
        }
    )
    arguments = parameters_from_config(config, [1, 4])
    assert arguments["world_size_n"] == 4
    rebuilt = config_from_parameters(**{k: v for k, v in arguments.items()})
    assert (
        rebuilt.model_dump()
        == config.model_copy(
            update={"bench": config.bench.model_copy(update={"world_sizes": [1, 4]})}
        ).model_dump()
    )


def test_named_parameters_win_over_the_config_dict() -> None:
    config = config_from_parameters(
        {"bench": {"steps": 99, "warmup": 1}, "gate": {"tolerances": {"memory_increase_pct": 20.0}}},
        workload="m:f",
        workload_args={},
        world_size_n=1,
        steps=5,
        warmup=2,
        tolerances={"throughput_drop_pct": 3.0},
        update_baseline="never",
        baseline_dir="/b",
        mlflow_tracking_uri="http://mlflow:5000",
    )
    assert (config.bench.steps, config.bench.warmup, config.bench.world_sizes) == (5, 2, [1])
    # tolerances merge: the named parameter's keys over the config's
    assert config.gate.tolerances.throughput_drop_pct == 3.0
    assert config.gate.tolerances.memory_increase_pct == 20.0
    assert config.tracking.uri == "http://mlflow:5000"


def test_a_bad_pipeline_parameter_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"bench.steps: got 0"):
        config_from_parameters(
            {},
            workload="m:f",
            workload_args={},
            world_size_n=2,
            steps=0,
            warmup=2,
            tolerances={},
            update_baseline="auto",
            baseline_dir="/b",
            mlflow_tracking_uri="",
        )


@pytest.mark.parametrize("world_sizes", [[2], [1, 2, 4], [2, 4]])
def test_only_ws1_and_one_ws_n_map_onto_the_pipeline(world_sizes: list[int]) -> None:
    with pytest.raises(ConfigError, match=r"bench\.world_sizes: got"):
        parameters_from_config(parse_config({}), world_sizes)


def test_a_cluster_run_keeps_the_spool_and_embedded_store_under_the_volume_mount() -> None:
    # A run started from the KFP UI passes config={}: relative defaults would vanish with the pod.
    config = config_from_parameters(
        {},
        workload="m:f",
        workload_args={},
        world_size_n=2,
        steps=5,
        warmup=1,
        tolerances={},
        update_baseline="auto",
        baseline_dir="/mnt/benchgate/baselines",
        mlflow_tracking_uri="http://mlflow.example:5000",
    )
    assert config.tracking.spool_dir == Path("/mnt/benchgate/spool")
    assert config.tracking.local_dir == Path("/mnt/benchgate/mlflow")
    assert config.tracking.uri == "http://mlflow.example:5000"


def _cluster_config(config: dict[str, Any]) -> RunConfig:
    return config_from_parameters(
        config,
        workload="m:f",
        workload_args={},
        world_size_n=2,
        steps=5,
        warmup=1,
        tolerances={},
        update_baseline="auto",
        baseline_dir=CLUSTER_BASELINE_DIR,
        mlflow_tracking_uri="",
    )


def _stores(config: RunConfig) -> tuple[Path, Path, Path]:
    return config.gate.baseline_dir, config.tracking.spool_dir, config.tracking.local_dir


def test_with_a_volume_the_tasks_keep_their_stores_under_its_mount(tmp_path: Path) -> None:
    config = _cluster_config({})
    assert task_stores(config, "benchgate-baselines", tmp_path) is config


def test_without_a_volume_the_stores_under_the_mount_point_become_pod_local(tmp_path: Path) -> None:
    # Nothing is mounted at /mnt/benchgate: the cluster defaults move into the pod's scratch directory.
    moved = task_stores(_cluster_config({}), "", tmp_path / "pod")
    assert _stores(moved) == (tmp_path / "pod/baselines", tmp_path / "pod/spool", tmp_path / "pod/mlflow")
    # Everything else is untouched.
    assert moved.model_dump(exclude={"gate": {"baseline_dir"}, "tracking": {"spool_dir", "local_dir"}}) == (
        _cluster_config({}).model_dump(
            exclude={"gate": {"baseline_dir"}, "tracking": {"spool_dir", "local_dir"}}
        )
    )


def test_without_a_volume_paths_elsewhere_stay_as_a_local_run_passes_them(tmp_path: Path) -> None:
    # `benchgate run` passes its persistent directories on this disk (and no baseline_pvc): they stay.
    local = parse_config(
        {
            "gate": {"baseline_dir": str(tmp_path / "b")},
            "tracking": {"local_dir": str(tmp_path / "m"), "spool_dir": str(tmp_path / "s")},
        }
    )
    arguments = parameters_from_config(local, [1, 2])
    assert "baseline_pvc" not in arguments
    config = config_from_parameters(**arguments)
    assert _stores(task_stores(config, "", tmp_path / "pod")) == (
        tmp_path / "b",
        tmp_path / "s",
        tmp_path / "m",
    )
