"""The eval stage is bit-for-bit repeatable; the gzipped trace opens in torch-tb-profiler's own loader."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchgate.errors import ConfigError
from benchgate.measure.evaluate import stage_eval
from benchgate.measure.trace import stage_trace

TINY = {"workload_args": {"size": "tiny"}, "workload": "benchgate.workloads.gpt:make_workload"}


def _numbers(result: dict[str, object]) -> str:
    kept = {k: v for k, v in result.items() if k != "wall_s"}
    # Each seed's own wall time is a time, not a figure of the eval.
    kept["seeds"] = [{k: v for k, v in seed.items() if k != "wall_s"} for seed in result["seeds"]]
    return json.dumps(kept, sort_keys=True)


@pytest.mark.slow
def test_eval_is_bit_for_bit_repeatable(config_factory, tmp_path: Path) -> None:
    config = config_factory(bench=TINY, eval={"enabled": True, "train_steps": 30})
    first = stage_eval(config, tmp_path / "a.json")
    second = stage_eval(config, tmp_path / "b.json")
    assert _numbers(first) == _numbers(second)
    assert first["perplexity"] == second["perplexity"]  # exact float equality, not approx
    assert 1.0 < first["perplexity"] < 256.0
    assert set(first["probes"]) == {"facts", "count", "echo"}
    assert json.loads((tmp_path / "a.json").read_text())["perplexity"] == first["perplexity"]


@pytest.mark.slow
def test_eval_changes_when_the_training_changes(config_factory, tmp_path: Path) -> None:
    base = stage_eval(config_factory(bench=TINY, eval={"train_steps": 20}), tmp_path / "a.json")
    other = stage_eval(config_factory(bench=TINY, eval={"train_steps": 20, "seed": 7}), tmp_path / "b.json")
    assert base["perplexity"] != other["perplexity"]


def test_eval_is_skipped_with_a_reason_for_workloads_without_the_hook(config_factory, tmp_path: Path) -> None:
    result = stage_eval(config_factory(), tmp_path / "eval.json")
    assert "no eval hook" in result["skipped"]


def test_eval_seq_len_longer_than_the_model_is_a_config_error(config_factory, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"eval\.seq_len: got 4096"):
        stage_eval(config_factory(bench=TINY, eval={"seq_len": 4096}), tmp_path / "eval.json")


@pytest.mark.slow
def test_trace_loads_in_torch_tb_profiler_with_the_step_ranges(config_factory, tmp_path: Path) -> None:
    from torch_tb_profiler.io import Cache
    from torch_tb_profiler.profiler.loader import RunLoader

    summary = stage_trace(config_factory(bench=TINY), tmp_path / "trace")
    assert len(summary["files"]) == 1, "repeat=1 must give exactly one trace file"
    written = tmp_path / "trace" / summary["files"][0]
    assert written.name.endswith(".pt.trace.json.gz")
    raw = gzip.decompress(written.read_bytes())
    # Gzipped to a small fraction of the JSON (a tenth or less for this trace).
    assert written.stat().st_size < len(raw) / 5
    trace = json.loads(raw)
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"data", "forward", "loss", "backward", "optimizer_step"} <= names

    run = RunLoader("benchgate", str(tmp_path / "trace"), Cache()).load()
    assert list(run.profiles) == [("gpt-tiny-ws1", "1")]
    profile = run.profiles[("gpt-tiny-ws1", "1")]
    assert {"Overview", "Operator", "Trace"} <= {v.display_name for v in profile.views}
    assert len(profile.overview["steps"]["rows"]) == 3  # the schedule's active steps
    assert "aten::mm" in {op["name"] for op in profile.operation_table_by_name["data"]}
