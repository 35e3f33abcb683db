"""MLflow tracking without a server: URIs, waits, params, the spool, system metrics, history rows."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import pytest
from harness import free_port
from mlflow.entities import Metric, Run, RunData, RunInfo, RunTag

from benchgate.config import parse_config
from benchgate.errors import BadInputError
from benchgate.kfp.tasks import run_record
from benchgate.measure.sysmetrics import SystemSampler
from benchgate.results.bundle import Bundle
from benchgate.results.figures import run_figures
from benchgate.store import spool
from benchgate.tracking import client as tracking
from benchgate.tracking import read as tracking_read
from benchgate.tracking import record as tracking_record


def test_tracking_uri_is_the_config_then_the_environment_then_the_local_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = parse_config({"tracking": {"local_dir": str(tmp_path / "m")}})
    assert tracking.resolve_uri(local) == f"sqlite:///{tmp_path / 'm' / 'mlflow.db'}"
    assert tracking.is_local_store(local)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://from-env:5000")
    assert tracking.resolve_uri(local) == "http://from-env:5000"
    explicit = parse_config({"tracking": {"uri": "http://from-config:5000"}})
    assert tracking.resolve_uri(explicit) == "http://from-config:5000"
    assert not tracking.is_local_store(explicit)


def test_an_unreachable_server_is_given_up_on_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = parse_config({"tracking": {"uri": f"http://127.0.0.1:{free_port()}", "max_wait_s": 2}})
    started = time.monotonic()
    with pytest.raises(tracking.TrackingUnavailable, match="unreachable") as caught:
        tracking.connect(config)
    elapsed = time.monotonic() - started
    assert 1.0 <= caught.value.waited_s <= 2.5
    assert elapsed < 4


def test_config_becomes_dotted_params_cut_to_mlflows_limit() -> None:
    params = tracking_record.flatten_params(
        {"bench": {"steps": 60, "workload_args": {"size": "tiny"}, "world_sizes": [1, 2]}, "x": "y" * 7000}
    )
    assert params["bench.steps"] == "60"
    assert params["bench.workload_args.size"] == "tiny"
    assert params["bench.world_sizes"] == "[1, 2]"
    assert len(params["x"]) == tracking_record.MAX_PARAM_LENGTH


@pytest.mark.parametrize("value", ["it's", "a\\b"])
def test_a_value_that_cannot_be_searched_for_is_bad_input_naming_it(value: str) -> None:
    with pytest.raises(BadInputError, match="workload: got"):
        tracking.quoted(value, "workload")


def test_run_key_is_the_kfp_run_id_or_a_fresh_one_outside_kfp() -> None:
    assert run_record("4f1c-uuid", "benchgate-abc")["run_key"] == "4f1c-uuid"
    outside = run_record("{{$.pipeline_job_uuid}}", "{{$.pipeline_job_name}}")
    assert outside["kfp_run_id"] == "" and outside["kfp_run_name"] == ""
    assert len(outside["run_key"]) == 32 and outside["run_key"] != run_record("", "")["run_key"]


def test_spool_entry_holds_the_results_and_record_without_pipeline_plumbing(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "trace").mkdir(parents=True)
    (results / "trace" / "a.pt.trace.json").write_text("{}")
    (results / "compare.json").write_text("{}")
    (results / "pipeline").mkdir()
    (results / "logs").mkdir()
    entry = spool.write_entry(tmp_path / "spool", results, {"run_key": "k1"})
    assert sorted(p.name for p in entry.iterdir()) == ["compare.json", "record.json", "trace"]
    assert spool.pending(tmp_path / "spool") == [entry]
    # A staging directory left by a crash is not an entry.
    (tmp_path / "spool" / ".k2.tmp").mkdir()
    assert spool.pending(tmp_path / "spool") == [entry]
    spool.remove(entry)
    assert spool.pending(tmp_path / "spool") == []


def test_system_sampler_series_align_with_their_times() -> None:
    calls = {"n": 0}

    def late_probe() -> dict[str, float]:
        calls["n"] += 1
        return {"late": 1.0} if calls["n"] > 1 else {}

    sampler = SystemSampler(0.05, [lambda: {"steady": 2.0}, late_probe])
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    result = sampler.result()
    n = len(result["t_s"])
    assert n >= 3 and result["t_s"] == sorted(result["t_s"])
    assert len(result["series"]["steady"]) == len(result["series"]["late"]) == n
    assert math.isnan(result["series"]["late"][0]) and result["series"]["late"][-1] == 1.0


def test_real_probes_read_cpu_and_memory() -> None:
    sampler = SystemSampler(0.05)
    sampler.start()
    time.sleep(0.15)
    sampler.stop()
    series = sampler.result()["series"]
    assert 0 <= series["cpu_utilization_percentage"][-1] <= 100 * (os.cpu_count() or 1)
    assert series["system_memory_usage_megabytes"][-1] > 0


def logged_run(figures: dict[str, float], start_ms: int, commit: str) -> Run:
    """A finished gate run as MLflow hands it back: `figures` as its metrics."""
    info = RunInfo(f"run-{commit}", "0", "user", "FINISHED", start_ms, start_ms + 1000, "active")
    metrics = [Metric(k, v, start_ms, 0) for k, v in figures.items()]
    return Run(info, RunData(metrics=metrics, tags=[RunTag(tracking.TAG_COMMIT, commit)]))


def bench_metrics(ws: int, step_s: list[float], reference_s: list[float] | None) -> dict[str, Any]:
    samples: dict[str, Any] = {"step_time_s": step_s, "tokens_per_s": [64 * ws / t for t in step_s]}
    if reference_s is not None:
        samples["reference_s"] = reference_s
    return {"samples": samples, "memory": {"peak_bytes": 2**20}, "mfu": {"dense_6n": 0.25}}


def test_history_from_runs_reads_back_the_figures_the_parent_run_logs() -> None:
    cpu = Bundle(
        path=Path("/r"),
        env={"machine_profile": "p"},
        metrics={
            1: bench_metrics(1, [0.1, 0.2, 0.3], [0.01, 0.02, 0.01]),
            2: bench_metrics(2, [0.2, 0.2, 0.2], None),  # no drift reference (e.g. GPU): left out
        },
    )
    newer = logged_run(run_figures(cpu), 2_000_000, "b" * 40)
    older = logged_run({"ws1/tokens_per_s_p50": 100.0, "ws1/step_time_ms_p50": 640.0}, 1_000_000, "a" * 40)
    rows = tracking_read.history_from_runs([newer, older])
    assert [row["commit"] for row in rows] == ["a" * 40, "b" * 40]  # oldest first
    assert rows[0]["p50"] == {"1": {"tokens_per_s": 100.0, "step_time_s": pytest.approx(0.64)}}
    p50 = rows[1]["p50"]
    # Ratios 10, 10, 30: median 10; the same keys as the directory store's history.json. The mean
    # step time 0.2 s over the mean reference 0.04/3 s: 15.
    assert p50["1"] == {
        "tokens_per_s": pytest.approx(320.0),
        "step_time_s": pytest.approx(0.2),
        "step_time_per_reference": pytest.approx(10.0),
        "mean_step_time_s": pytest.approx(0.2),
        "mean_step_time_per_reference": pytest.approx(15.0),
    }
    assert p50["2"] == {
        "tokens_per_s": pytest.approx(640.0),
        "step_time_s": pytest.approx(0.2),
        "mean_step_time_s": pytest.approx(0.2),
    }
    assert rows[1]["created_unix"] == 2000.0 and rows[1]["mlflow_run_id"] == f"run-{'b' * 40}"


def test_history_from_runs_gives_the_screen_its_mean_figures_not_the_p50s() -> None:
    # One 6x step in four: mean 0.225 s, p50 0.1 s; the reference's mean 0.015 s.
    run = Bundle(
        path=Path("/r"),
        env={"machine_profile": "p"},
        metrics={1: bench_metrics(1, [0.1, 0.1, 0.1, 0.6], [0.01, 0.01, 0.02, 0.02])},
    )
    rows = tracking_read.history_from_runs([logged_run(run_figures(run), 1_000_000, "d" * 40)])
    figures = rows[0]["p50"]["1"]
    assert figures["step_time_s"] == pytest.approx(0.1)
    assert figures["mean_step_time_s"] == pytest.approx(0.225)
    assert figures["mean_step_time_per_reference"] == pytest.approx(15.0)


def test_history_point_keeps_logged_mfu_in_percent() -> None:
    bundle = Bundle(path=Path("/r"), env={"machine_profile": "p"}, metrics={1: bench_metrics(1, [0.1], None)})
    point = tracking_read.history_point(logged_run(run_figures(bundle), 1_000_000, "c" * 40))
    assert point.figures["ws1/mfu_6nd_pct"] == pytest.approx(25.0)  # the file's 0.25, converted once
