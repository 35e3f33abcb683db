"""The `benchgate-suite` pipeline run end to end through kfp.local: two entries, each the one-node gate
pipeline (real torchrun inside), logged to a real `mlflow server`, then the suite gate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchgate.config import parse_config
from benchgate.kfp.suite.pipeline import SUITE_PIPELINE_NAME, suite_pipeline
from benchgate.kfp.suite_entry import checked_entries, entry_parameter, entry_run_key
from benchgate.kit.files import read_json
from benchgate.tracking import client as tracking
from benchgate.tracking.client import TAG_KFP_RUN_ID, TAG_PARENT, TAG_VERDICT, TAG_WORKLOAD
from benchgate.tracking.suite_record import TAG_SUITE_EXIT
from benchgate.tracking.suite_runs import entry_gate_run, suite_run_for_kfp

# kfp.local ignores pod settings and the bench image, and says so for every task.
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*(no effect in the current local runner|non-Python base image).*"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A PASS and a FAIL: the reference GPT (tiny, a variant) and a workload whose loss rises every step,
# which the loss-slope check fails on the first run, without a baseline.
ENTRIES = [
    {
        "name": "gpt-tiny-b4",
        "workload": "benchgate.workloads.gpt:make_workload",
        "args": {"size": "tiny"},
        "variant": {"precision": "fp32", "batch_size": 4},
    },
    {"name": "rising", "workload": "bg_test_workloads:rising_loss"},
]


def test_suite_pipeline_gates_each_entry_under_its_own_key_and_fails_with_the_worst(
    tmp_path: Path, mlflow_server: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from kfp import local

    monkeypatch.chdir(tmp_path)  # outside any git checkout: no A/B against a baseline commit
    experiment = "suite-on-cluster"
    config = {
        "bench": {"device": "cpu"},
        "eval": {"enabled": False},
        "trace": {"enabled": False},
        "tracking": {
            "experiment": experiment,
            "local_dir": str(tmp_path / "mlflow"),
            "spool_dir": str(tmp_path / "spool"),
        },
    }
    root = tmp_path / "root"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=False)
    suite_pipeline()(
        suite_name="models",
        entries=[entry_parameter(e) for e in checked_entries(ENTRIES, "entries")],
        world_size_n=1,
        steps=6,
        warmup=2,
        update_baseline="never",
        baseline_dir=str(tmp_path / "baselines"),
        mlflow_tracking_uri=mlflow_server,
        config=config,
    )
    (run_dir,) = root.glob(f"{SUITE_PIPELINE_NAME}-*")
    # Both entries ran to their verdict, one at a time: their gate tasks did not fail the loop.
    iterations = sorted(run_dir.glob("for-loop-*-iteration-*"))
    assert len(iterations) == 2
    for iteration in iterations:
        assert (iteration / "gate" / "summary").is_file(), iteration
    # The suite gate ran after the loop and failed its task (the KFP UI shows the run red).
    log = ANSI.sub("", capfd.readouterr().out)
    assert "Task 'suite-gate' finished with status FAILURE" in log
    assert log.count("benchgate gate: suite entry") == 2  # the entries' gate tasks said so and passed
    results = run_dir / "suite-gate" / "results"
    record = read_json(results / "suite.json")
    assert record["suite"] == "models" and record["exit_code"] == 1
    rows = {e["name"]: e for e in record["entries"]}
    assert (
        rows["gpt-tiny-b4"]["state"],
        rows["gpt-tiny-b4"]["verdict"],
        rows["gpt-tiny-b4"]["exit_code"],
    ) == (
        "done",
        "PASS",
        0,
    )
    assert (rows["rising"]["verdict"], rows["rising"]["exit_code"]) == ("FAIL", 1)
    assert rows["gpt-tiny-b4"]["args"] == {"size": "tiny", "batch_size": 4}
    suite_md = (results / "suite.md").read_text(encoding="utf-8")
    assert "**gpt-tiny-b4 (PASS)**" in suite_md and "**rising (FAIL)**" in suite_md
    # The Pareto view of a local suite, from the entries' files downloaded from their gate runs.
    assert (results / "pareto.png").read_bytes().startswith(b"\x89PNG")
    assert "gpt-tiny-b4" in (results / "pareto.md").read_text(encoding="utf-8")
    assert sorted(p.name for p in (results / "rising").iterdir()) == [
        "compare.json",
        "compare.md",
        "env.json",
        "metrics-ws1.json",
        "published.json",
    ]

    tracker = tracking.connect(
        parse_config(
            {"tracking": {"uri": mlflow_server, "experiment": experiment, "local_dir": str(tmp_path)}}
        )
    )
    suite_run = tracker.client.get_run(record["mlflow"]["suite_run_id"])
    kfp_run_id = suite_run.data.tags[TAG_KFP_RUN_ID]
    assert suite_run.data.tags[TAG_VERDICT] == "FAIL" and suite_run.data.tags[TAG_SUITE_EXIT] == "1"
    logged = {a.path for a in tracker.client.list_artifacts(suite_run.info.run_id)}
    assert {"suite.json", "suite.md", "pareto.png", "pareto.md"} <= logged
    found = suite_run_for_kfp(tracker, kfp_run_id)
    assert found is not None and found.info.run_id == suite_run.info.run_id
    for name, verdict in (("gpt-tiny-b4", "PASS"), ("rising", "FAIL")):
        # Each entry's gate run has its own key, is stored under the entry's name, and nests under the suite.
        gate_run = entry_gate_run(tracker, entry_run_key(kfp_run_id, name))
        assert gate_run is not None, name
        tags = gate_run.data.tags
        assert (tags[TAG_VERDICT], tags[TAG_WORKLOAD], tags[TAG_PARENT]) == (
            verdict,
            name,
            suite_run.info.run_id,
        )
    # The entry's config went over the pipeline's: the variant's batch size reached the workload.
    setup = read_json(iterations[0] / "capture-env" / "setup" / "config.json")
    assert read_json(iterations[0] / "capture-env" / "setup" / "run.json")["run_key"] == entry_run_key(
        kfp_run_id, "gpt-tiny-b4"
    )
    assert setup["bench"]["workload_args"] == {"size": "tiny", "batch_size": 4}
    assert setup["bench"]["precision"] == "fp32" and setup["bench"]["name"] == "gpt-tiny-b4"
    assert json.loads(json.dumps(setup["eval"]))["enabled"] is False
