"""`benchgate policy check`: a dry run of the controller's admission with the chart's values, on real
files and the real chart values.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from benchgate.cli.main import app
from benchgate.cli.policy import CHART_DIR, chart_values
from benchgate.controller.decide.admin_policy import Policy
from benchgate.controller.decide.policy_values import merged_values, policy_from_values
from benchgate.errors import EXIT_BAD_INPUT

SHA = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "https://github.com/acme/trainer.git"


def run(namespace: str = "team-a", name: str = "pr-1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "benchgate.dev/v1alpha1",
        "kind": "BenchmarkRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"commit": SHA, "repository": REPOSITORY, **spec},
    }


def schedule(**template: Any) -> dict[str, Any]:
    return {
        "apiVersion": "benchgate.dev/v1alpha1",
        "kind": "BenchmarkSchedule",
        "metadata": {"name": "nightly", "namespace": "team-a"},
        "spec": {"schedule": "0 2 * * *", "runTemplate": {"spec": {"repository": REPOSITORY, **template}}},
    }


def write(tmp_path: Path, name: str, *documents: Any) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return path


def check(*args: str | Path) -> tuple[int, str]:
    done = CliRunner().invoke(app, ["policy", "check", *map(str, args)])
    return done.exit_code, done.output


def test_the_chart_defaults_refuse_a_standard_library_workload(tmp_path: Path) -> None:
    code, output = check(write(tmp_path, "run.yaml", run(workload="os:system")))
    assert code == 2
    assert "refused BenchmarkRun team-a/pr-1" in output
    assert "WorkloadNotAllowed: spec.workload: got 'os:system'" in output


def test_an_admitted_run_exits_0_with_the_deadline_the_chart_gives_it(tmp_path: Path) -> None:
    code, output = check(write(tmp_path, "run.yaml", run()))
    assert (code, output.splitlines()[0]) == (0, "admitted BenchmarkRun team-a/pr-1")
    assert "activeDeadlineSeconds: 21600" in output


def test_values_are_merged_over_the_defaults_and_each_document_checked(tmp_path: Path) -> None:
    values = write(
        tmp_path,
        "values.yaml",
        {
            "policy": {
                "experiments": {"*": ["{namespace}", "{namespace}/*"]},
                "maxActiveDeadlineSeconds": 86400,
            }
        },
    )
    runs = write(
        tmp_path,
        "runs.yaml",
        run(name="ours", mlflowExperiment="team-a/nightly"),
        run(name="theirs", mlflowExperiment="team-b"),
        run(name="slow", mlflowExperiment="team-a", activeDeadlineSeconds=100000, worldSize=16),
    )
    code, output = check(runs, "--values", values)
    assert code == 2
    assert "admitted BenchmarkRun team-a/ours" in output
    assert "ExperimentNotAllowed: spec.mlflowExperiment: got 'team-b'" in output
    # The defaults not overridden stay: maxGpusPerNode 8 refuses worldSize 16.
    assert "DeadlineNotAllowed: spec.activeDeadlineSeconds: got 100000" in output
    assert "WorldSizeExceedsNode: spec.worldSize: got 16" in output


def test_a_schedule_is_checked_by_its_run_template_and_says_so(tmp_path: Path) -> None:
    code, output = check(write(tmp_path, "schedule.yaml", schedule(config={"tracking": {"uri": "http://x"}})))
    assert code == 2
    assert "refused BenchmarkSchedule team-a/nightly" in output
    assert "TrackingUriNotAllowed: spec.config.tracking.uri: got 'http://x'" in output
    assert "placeholder commit" in output and "not checked here" in output
    code, output = check(write(tmp_path, "fine.yaml", schedule()))
    assert code == 0 and "admitted BenchmarkSchedule team-a/nightly" in output


def test_a_spec_the_model_rejects_is_reported(tmp_path: Path) -> None:
    code, output = check(write(tmp_path, "run.yaml", run(worldSize="8")))
    assert code == 2
    assert "refused BenchmarkRun team-a/pr-1: InvalidSpec" in output and "spec.worldSize: got '8'" in output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Pod\nmetadata: {name: x}\n", "kind: got 'Pod'"),
        ("spec: [unclosed\n", "not YAML"),
        ("", "no YAML document"),
    ],
)
def test_a_bad_file_is_a_clear_bad_input_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    code, output = check(path)
    assert code == EXIT_BAD_INPUT
    assert "error:" in output and message in output


def test_a_missing_file_and_bad_values_are_named(tmp_path: Path) -> None:
    code, output = check(tmp_path / "absent.yaml")
    assert code == EXIT_BAD_INPUT and "absent.yaml: cannot be read" in output
    values = write(tmp_path, "values.yaml", {"policy": {"maxCpuRequest": "lots"}})
    code, output = check(write(tmp_path, "run.yaml", run()), "--values", values)
    assert code == EXIT_BAD_INPUT and "maxCpuRequest: got 'lots'" in output


def test_a_default_deadline_past_the_values_maximum_is_named(tmp_path: Path) -> None:
    values = write(tmp_path, "values.yaml", {"policy": {"maxActiveDeadlineSeconds": 3600}})
    code, output = check(write(tmp_path, "run.yaml", run()), "--values", values)
    assert code == EXIT_BAD_INPUT
    assert "defaultActiveDeadlineSeconds: got 21600 (more than maxActiveDeadlineSeconds 3600)" in output


def test_values_merge_as_helm_merges_them() -> None:
    defaults = {"policy": {"repositories": ["a"], "maxGpusPerNode": 8}, "image": {"tag": "1"}}
    merged = merged_values(defaults, {"policy": {"repositories": ["b"], "maxGpusPerNode": None}})
    assert merged == {"policy": {"repositories": ["b"]}, "image": {"tag": "1"}}  # lists replaced, null drops


def test_the_chart_defaults_give_the_documented_policy() -> None:
    assert policy_from_values(chart_values([], CHART_DIR)) == Policy(
        max_gpus_per_node=8, default_active_deadline_seconds=21600
    )
