"""The eval task finds the stored baseline's eval band in the baseline task's artifact, with MLflow
unreachable: eval runs the code under test and holds no tracking credential."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from baseline_runs import write_run
from harness import free_port, make_config

from benchgate.kfp.baseline_task import STORE_DIR, WORKLOAD_NAME_FILE, baseline_task
from benchgate.kfp.tasks import eval_task
from benchgate.kit.files import read_json, write_json
from benchgate.measure.evaluate import stage_eval
from benchgate.results.bundle import load_bundle
from benchgate.store.baseline import baseline_location, save_baseline

PROFILE = "cpu-test"


class Figures:
    def __init__(self) -> None:
        self.logged: dict[str, float] = {}

    def log_metric(self, metric: str, value: float) -> None:
        self.logged[metric] = value


def test_eval_reads_the_band_from_the_artifact_with_mlflow_closed(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: any tracking access fails
    config = make_config(
        tmp_path,
        bench={
            "workload": "benchgate.workloads.gpt:make_workload",
            "workload_args": {"size": "tiny"},
            "name": "w",
        },
        eval={"enabled": True, "train_steps": 2, "seq_len": 32, "batch_size": 8, "seeds": 2},
        tracking={"enabled": True, "uri": closed},
    )
    setup = tmp_path / "setup"
    setup.mkdir()
    write_json(setup / "config.json", config.model_dump(mode="json"))
    write_json(setup / "env.json", {"machine_profile": PROFILE, "source": {}, "base": {}})
    # The baseline task's artifact: a store holding the profile's baseline, with an eval.
    run = write_run(tmp_path / "run", profile=PROFILE)
    # A real eval of these settings, made far better than anything 2 steps learn: out of band.
    alone = stage_eval(config, tmp_path / "alone.json")
    del alone["seeds"]
    write_json(run / "eval.json", {**alone, "perplexity": alone["perplexity"] / 2})
    stored = load_bundle(run)
    artifact = tmp_path / "baseline"
    save_baseline(stored, artifact / STORE_DIR, "test")
    results = tmp_path / "results"
    eval_task(str(setup), str(results), Figures(), baseline_dir=str(artifact))
    got: dict[str, Any] = read_json(results / "eval.json")
    assert got["more_seeds"].startswith("2 seeds: seed 1234 is out of band"), got["more_seeds"]


def test_the_baseline_task_hands_eval_the_volumes_baseline_with_mlflow_closed(tmp_path: Path) -> None:
    # A team without a reachable MLflow keeps its baselines on the volume (baseline_pvc): the trusted
    # baseline task, which mounts it, copies the profile's entry into the artifact eval reads.
    closed = f"http://127.0.0.1:{free_port()}"
    volume = tmp_path / "volume"
    config = make_config(
        tmp_path,
        bench={"name": "w"},
        gate={"baseline_dir": str(volume)},
        tracking={"enabled": True, "uri": closed, "max_wait_s": 1.0},
    )
    setup = tmp_path / "setup"
    setup.mkdir()
    write_json(setup / "config.json", config.model_dump(mode="json"))
    write_json(setup / "env.json", {"machine_profile": PROFILE, "source": {}, "base": {}})
    write_json(setup / WORKLOAD_NAME_FILE, {"workload": "w"})
    save_baseline(load_bundle(write_run(tmp_path / "run", profile=PROFILE)), volume, "test")
    out = tmp_path / "artifact"
    said = baseline_task(str(setup), "team-baselines", str(out))
    copied = baseline_location(out / STORE_DIR, PROFILE, "w")
    assert copied.is_dir() and any(copied.iterdir()), said
