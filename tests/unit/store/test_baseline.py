from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from baseline_runs import PROFILE, metrics, write_run

from benchgate.errors import BaselineError
from benchgate.kit.files import write_json
from benchgate.results.bundle import load_bundle
from benchgate.store.baseline import (
    HISTORY_LENGTH,
    baseline_location,
    find_baseline,
    read_meta,
    save_baseline,
)


def test_baseline_save_then_find_round_trips(tmp_path: Path) -> None:
    run = load_bundle(write_run(tmp_path / "run"))
    assert find_baseline(tmp_path / "store", PROFILE, "w") is None
    location = save_baseline(run, tmp_path / "store", "test")
    assert location == baseline_location(tmp_path / "store", PROFILE, "w")
    found = find_baseline(tmp_path / "store", PROFILE, "w")
    assert found is not None and found.metrics[1]["samples"] == run.metrics[1]["samples"]
    assert found.history[0]["commit"] == "abc"
    # The link, its one version and the writers' lock: no staging or retired copies are left behind.
    assert location.is_symlink()
    assert sorted(p.name for p in location.parent.iterdir()) == [".w.lock", ".w.versions", "w"]
    assert [p.name for p in (location.parent / ".w.versions").iterdir()] == [location.resolve().name]


def test_baseline_history_grows_per_promotion_and_is_capped(tmp_path: Path) -> None:
    for i in range(HISTORY_LENGTH + 3):
        run = load_bundle(write_run(tmp_path / f"run{i}", step_s=0.1 + i / 1000, commit=f"c{i}"))
        save_baseline(run, tmp_path / "store", "test")
    found = find_baseline(tmp_path / "store", PROFILE, "w")
    assert found is not None
    assert len(found.history) == HISTORY_LENGTH
    assert found.history[-1]["commit"] == f"c{HISTORY_LENGTH + 2}"
    assert found.history_figures(1)[-1]["step_time_s"] == pytest.approx(0.122 * 1.02)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        pytest.param(lambda p: p.write_text('{"samples": [0.1, 0.'), "not valid JSON", id="truncated"),
        pytest.param(lambda p: p.write_text("{}"), "schema_version: got", id="empty-object"),
        pytest.param(
            lambda p: p.write_text(p.read_text().replace('"world_size": 1', '"world_size": 2')),
            "file name says 1",
            id="renamed",
        ),
    ],
)
def test_corrupt_baseline_is_a_baseline_error_naming_the_file(
    tmp_path: Path, damage: Any, expected: str
) -> None:
    save_baseline(load_bundle(write_run(tmp_path / "run")), tmp_path / "store", "test")
    path = baseline_location(tmp_path / "store", PROFILE, "w") / "metrics-ws1.json"
    damage(path)
    with pytest.raises(BaselineError) as info:
        find_baseline(tmp_path / "store", PROFILE, "w")
    assert "metrics-ws1.json" in str(info.value)
    assert expected in str(info.value)
    assert info.value.exit_code == 2


def test_corrupt_history_blocks_promotion_with_a_baseline_error(tmp_path: Path) -> None:
    save_baseline(load_bundle(write_run(tmp_path / "run")), tmp_path / "store", "test")
    history = baseline_location(tmp_path / "store", PROFILE, "w") / "history.json"
    history.write_text('{"runs": [')
    with pytest.raises(BaselineError, match=r"history\.json"):
        save_baseline(load_bundle(write_run(tmp_path / "run2")), tmp_path / "store", "test")
    # The old baseline is untouched and no staging directory is left behind.
    assert history.read_text() == '{"runs": ['
    versions = history.parent.parent / ".w.versions"
    assert [p.name for p in versions.iterdir()] == [history.parent.resolve().name]


def test_bad_samples_in_a_result_file_are_rejected(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    bad = metrics()
    bad["samples"]["step_time_s"] = [0.1, -1.0, 0.1]
    write_json(run / "metrics-ws1.json", bad)
    with pytest.raises(BaselineError, match=r"samples\.step_time_s"):
        load_bundle(run)


def test_history_entry_carries_the_drift_corrected_step_time(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run")
    with_reference = metrics()
    steps = with_reference["samples"]["step_time_s"]
    # The reference runs 2x, 4x and 5x faster than the step in turn: the ratios' median is 4.
    with_reference["samples"]["reference_s"] = [s / (2, 4, 5)[i % 3] for i, s in enumerate(steps)]
    write_json(run_dir / "metrics-ws1.json", with_reference)
    write_json(run_dir / "metrics-ws2.json", metrics(world_size=2))
    save_baseline(load_bundle(run_dir), tmp_path / "store", "test")
    found = find_baseline(tmp_path / "store", PROFILE, "w")
    assert found is not None
    p50 = found.history[-1]["p50"]
    assert p50["1"]["step_time_per_reference"] == pytest.approx(4.0)
    assert p50["1"]["step_time_s"] == pytest.approx(0.102)
    assert found.history_figures(1)[-1]["step_time_per_reference"] == pytest.approx(4.0)
    # The screen's figures: the mean step time (no step near the 10x stall cap here), and it in units
    # of the mean reference time.
    assert p50["1"]["mean_step_time_s"] == pytest.approx(sum(steps) / len(steps))
    reference = with_reference["samples"]["reference_s"]
    assert p50["1"]["mean_step_time_per_reference"] == pytest.approx(sum(steps) / sum(reference))
    assert found.history_figures(1)[-1]["mean_step_time_per_reference"] == pytest.approx(
        sum(steps) / sum(reference)
    )
    # A world size whose run timed no reference keeps only the plain figures.
    assert set(p50["2"]) == {"tokens_per_s", "step_time_s", "mean_step_time_s"}
    assert p50["2"]["mean_step_time_s"] == pytest.approx(0.102)


def test_old_layout_directory_is_read_then_moved_behind_a_link_on_the_next_save(tmp_path: Path) -> None:
    store = tmp_path / "store"
    location = baseline_location(store, PROFILE, "w")
    # What the store looked like before versions: the baseline's files straight in <profile>/<workload>.
    write_run(location, commit="old")
    write_json(location / "baseline.json", {"commit": "old", "reason": "before versions"})
    write_json(location / "history.json", {"runs": [{"commit": "old", "created_unix": 1.0, "p50": {}}]})
    found = find_baseline(store, PROFILE, "w")
    assert found is not None and found.env["git"]["commit"] == "old"
    assert read_meta(store, PROFILE, "w") == {"commit": "old", "reason": "before versions"}

    assert save_baseline(load_bundle(write_run(tmp_path / "run", commit="new")), store, "test") == location
    assert location.is_symlink()
    versions = store / PROFILE / ".w.versions"
    assert sorted(p.name for p in versions.iterdir()) == ["00000001", "00000002"]
    assert (versions / "00000001" / "baseline.json").exists()  # the old baseline, kept as a version
    found = find_baseline(store, PROFILE, "w")
    assert found is not None and found.path == (versions / "00000002").resolve()
    assert [h["commit"] for h in found.history] == ["old", "new"]
    meta = read_meta(store, PROFILE, "w")
    assert meta is not None and meta["commit"] == "new"


def test_the_baseline_compare_screened_against_reaches_the_ab_tasks_empty_store(tmp_path: Path) -> None:
    # Without a volume each task's store is pod-local: compare hands its baseline (the version
    # directory) to A/B in its results, and A/B puts it into its own store as it was.
    from benchgate.kfp.pod_stores import SCREENED_BASELINE, restore_baseline

    save_baseline(load_bundle(write_run(tmp_path / "run")), tmp_path / "compare-store", "branch main")
    screened = find_baseline(tmp_path / "compare-store", PROFILE, "w")
    assert screened is not None
    compared = tmp_path / "compare-results"
    shutil.copytree(screened.path, compared / SCREENED_BASELINE)
    restore_baseline(compared, tmp_path / "ab-store")
    restored = find_baseline(tmp_path / "ab-store", PROFILE, "w")
    assert restored is not None
    assert restored.metrics == screened.metrics and restored.history == screened.history
    assert read_meta(tmp_path / "ab-store", PROFILE, "w") == read_meta(
        tmp_path / "compare-store", PROFILE, "w"
    )
    restore_baseline(tmp_path / "nothing-handed-over", tmp_path / "other-store")
    assert find_baseline(tmp_path / "other-store", PROFILE, "w") is None
