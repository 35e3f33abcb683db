"""bench.name (the name results are stored under) and bench.compile (torch.compile for the timed steps)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness import make_config

from benchgate.errors import ConfigError
from benchgate.measure import fingerprint


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_compile_runs_the_bench_compiled_and_name_is_what_metrics_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    # torch.compile imports setuptools, which puts its vendored packages on sys.path: in this test
    # process that would change what later tests see installed (the fingerprint's package digest).
    monkeypatch.setattr(sys, "path", list(sys.path))

    from benchgate.measure.bench import run_worker

    config = make_config(
        tmp_path,
        bench={
            "workload": "bg_test_workloads:sleepy",
            "name": "sleepy-compiled",
            "compile": True,
            "steps": 4,
            "warmup": 1,
            "drift_reference": False,
        },
    )
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    metrics = run_worker(config, tmp_path / "out")
    assert metrics is not None
    # Dynamo captured the model's graph: the steps ran compiled, not eagerly.
    stats = torch._dynamo.utils.counters["stats"]
    assert stats["unique_graphs"] >= 1 and stats["calls_captured"] >= 1, dict(stats)
    assert metrics["workload"] == "sleepy-compiled"
    assert len(metrics["samples"]["step_time_s"]) == 4


def test_compile_is_part_of_the_config_fingerprint_and_eager_digests_as_before(tmp_path: Path) -> None:
    eager = make_config(tmp_path)
    compiled = make_config(tmp_path, bench={"compile": True})
    # No "compile" key when off: baselines stored before the setting existed keep their digest.
    assert '"compile"' not in fingerprint._config_json(eager)
    assert '"compile":true' in fingerprint._config_json(compiled)
    digests = [fingerprint.capture_fingerprints(c)["config"] for c in (eager, compiled)]
    assert digests[0] != digests[1]


def test_compile_without_warmup_and_an_unsafe_name_are_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"bench\.compile: got True .*bench\.warmup >= 1"):
        make_config(tmp_path, bench={"compile": True, "warmup": 0})
    with pytest.raises(ConfigError, match=r"bench\.name: got '\.\./x'"):
        make_config(tmp_path, bench={"name": "../x"})
