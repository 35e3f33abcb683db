"""`benchgate baseline anchor` against a real MLflow server: pin the logged gate run, see it in the store
and in `baseline show`, let a fresh runner's refresh bring it (and the creep rows) in, then clear it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchgate.checks.stage import stage_compare
from benchgate.config import RunConfig
from benchgate.kit.files import read_json
from benchgate.results.comparison import CREEP
from benchgate.store.anchor import find_anchor, read_anchor_meta
from benchgate.tracking.anchor import ANCHOR_TAGS, TAG_ANCHOR_BY, TAG_ANCHOR_REASON
from benchgate.tracking.refresh import refresh_baseline

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def benchgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchgate", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_anchor_pin_show_refresh_and_clear(
    logged_gate_run: dict[str, Any], mlflow_server: str, tmp_path: Path
) -> None:
    config: RunConfig = logged_gate_run["config"]
    client = logged_gate_run["client"]
    run_id = logged_gate_run["parent"].info.run_id
    out_dir: Path = logged_gate_run["outcome"].out_dir
    profile = read_json(out_dir / "env.json")["machine_profile"]
    store = tmp_path / "store"
    settings = tmp_path / "anchor.toml"
    settings.write_text(
        f'[tracking]\nexperiment = "{config.tracking.experiment}"\n[gate]\nbaseline_dir = "{store}"\n'
    )
    common = ["--config", str(settings), "--tracking-uri", mlflow_server]
    try:
        pinned = benchgate("baseline", "anchor", run_id, "--reason", "release 1.0", *common, cwd=tmp_path)
        assert pinned.returncode == 0, pinned.stdout + pinned.stderr
        assert f"anchored run {run_id} (gpt-tiny @ " in pinned.stdout

        # In MLflow: the pin, who and why. In the store: the run's files, and which run they are.
        tags = client.get_run(run_id).data.tags
        assert float(tags["benchgate.anchor"]) > 0 and tags[TAG_ANCHOR_REASON] == "release 1.0"
        assert tags[TAG_ANCHOR_BY]
        anchor = find_anchor(store, profile, "gpt-tiny")
        assert anchor is not None and anchor.metrics[2] == read_json(out_dir / "metrics-ws2.json")
        meta = read_anchor_meta(store, profile, "gpt-tiny")
        assert meta is not None and meta["mlflow_run_id"] == run_id and meta["tracking_uri"] == mlflow_server

        shown = benchgate("baseline", "show", "--profile", profile, *common, cwd=tmp_path)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        anchors = shown.stdout[shown.stdout.index(f"anchors · {profile}") :]
        assert run_id in anchors and "release 1.0" in anchors

        # A fresh runner (empty store): the refresh before compare brings the anchor, and compare adds
        # the creep rows. (A copy of the run: the fixture's own results stay as they are.)
        fresh = config.model_copy(
            update={"gate": config.gate.model_copy(update={"baseline_dir": tmp_path / "fresh"})}
        )
        run_dir = tmp_path / "run"
        shutil.copytree(out_dir, run_dir, ignore=shutil.ignore_patterns("pipeline", "logs", "trace"))
        assert refresh_baseline(fresh, run_dir)["anchor_run_id"] == run_id
        assert find_anchor(tmp_path / "fresh", profile, "gpt-tiny") is not None
        comparison, _, _ = stage_compare(fresh, run_dir)
        creep = [c for c in comparison.checks if c.metric == CREEP]
        assert [c.name for c in creep] == ["tokens/s since anchor (ws=1)", "tokens/s since anchor (ws=2)"]
        assert all(c.status in ("PASS", "INFO") for c in creep)  # the anchor itself, or noise unknown

        cleared = benchgate(
            "baseline",
            "anchor",
            "--clear",
            "--profile",
            profile,
            "--workload",
            "gpt-tiny",
            *common,
            cwd=tmp_path,
        )
        assert cleared.returncode == 0, cleared.stdout + cleared.stderr
        assert f"unpinned in MLflow: {run_id}" in cleared.stdout and "gpt-tiny" in cleared.stdout
        assert not set(ANCHOR_TAGS) & set(client.get_run(run_id).data.tags)
        assert find_anchor(store, profile, "gpt-tiny") is None
        shown = benchgate("baseline", "show", "--profile", profile, *common, cwd=tmp_path)
        assert shown.returncode == 0 and "anchors ·" not in shown.stdout
        # The fresh runner's next refresh removes the anchor MLflow no longer pins.
        assert "anchor_run_id" not in refresh_baseline(fresh, run_dir)
        assert find_anchor(tmp_path / "fresh", profile, "gpt-tiny") is None
    finally:
        for key in ANCHOR_TAGS:  # the session's logged run, as other tests expect it
            if key in client.get_run(run_id).data.tags:
                client.delete_tag(run_id, key)
