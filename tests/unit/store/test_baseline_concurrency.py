"""Many commits are gated at once against one baseline store: real processes promote baselines of one
profile and workload while others read it in a tight loop."""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path
from typing import Any

import pytest
from baseline_runs import PROFILE, write_run

from benchgate.kit.files import read_json, write_json
from benchgate.results.bundle import load_bundle
from benchgate.store.baseline import (
    HISTORY_LENGTH,
    KEEP_VERSIONS,
    baseline_location,
    find_baseline,
    read_meta,
    save_baseline,
)

READERS = 2


def stamped_run(directory: Path, marker: str, step_s: float = 0.1) -> Path:
    """A result directory whose every file carries `marker`, so that a reader handed files of two
    different baselines notices: env.json (as the commit), metrics-ws1.json and eval.json."""
    write_run(directory, step_s=step_s, commit=marker)
    metrics_path = directory / "metrics-ws1.json"
    write_json(metrics_path, read_json(metrics_path) | {"marker": marker})
    write_json(directory / "eval.json", {"perplexity": 10.0, "marker": marker})
    return directory


def writer(store: Path, scratch: Path, number: int, promotions: int, start: Any, results: Any) -> None:
    try:
        start.wait(timeout=60)
        for seq in range(promotions):
            marker = f"w{number}-{seq:02d}"
            run = load_bundle(stamped_run(scratch / marker, marker, step_s=0.1 + seq / 1000))
            save_baseline(run, store, "concurrency test", extra={"marker": marker})
        results.put(("writer", number, None, promotions))
    except BaseException:
        results.put(("writer", number, traceback.format_exc(), 0))


def reader(store: Path, number: int, start: Any, stop: Any, results: Any) -> None:
    reads, last_version = 0, 0
    try:
        start.wait(timeout=60)
        while not stop.is_set():
            bundle = find_baseline(store, PROFILE, "w")
            assert bundle is not None, "found no baseline while one existed"
            marker = bundle.env["git"]["commit"]
            assert bundle.metrics[1]["marker"] == marker, f"metrics of another baseline: {bundle.path}"
            assert bundle.eval is not None and bundle.eval["marker"] == marker, f"eval mixed: {bundle.path}"
            assert bundle.history[-1]["commit"] == marker, f"history of another baseline: {bundle.path}"
            # The link only ever moves forward, so no reader may go back to an older version.
            version = int(bundle.path.name)
            assert version >= last_version, f"went back from version {last_version} to {version}"
            last_version = version
            meta = read_meta(store, PROFILE, "w")
            assert meta is not None, "read_meta found no baseline while one existed"
            assert meta["marker"] == meta["commit"], f"baseline.json mixed: {meta}"
            reads += 1
        results.put(("reader", number, None, reads))
    except BaseException:
        results.put(("reader", number, traceback.format_exc(), reads))


@pytest.mark.parametrize(
    ("writers", "promotions"),
    [
        # More promotions than the history holds: it keeps exactly the newest HISTORY_LENGTH.
        pytest.param(4, 10, id="4x10-history-capped"),
        # As many as the history holds: every single one of them must be in it.
        pytest.param(4, HISTORY_LENGTH // 4, id="4x5-no-entry-lost"),
    ],
)
def test_concurrent_promotions_and_reads(tmp_path: Path, writers: int, promotions: int) -> None:
    store = tmp_path / "store"
    # The first baseline exists before anyone starts: from then on no reader may ever see none.
    save_baseline(
        load_bundle(stamped_run(tmp_path / "seed", "seed")), store, "seed", extra={"marker": "seed"}
    )

    context = multiprocessing.get_context("spawn")
    start, stop, results = context.Barrier(writers + READERS), context.Event(), context.Queue()
    processes = [
        context.Process(target=writer, args=(store, tmp_path / f"runs{i}", i, promotions, start, results))
        for i in range(writers)
    ] + [context.Process(target=reader, args=(store, i, start, stop, results)) for i in range(READERS)]
    for process in processes:
        process.start()
    reports: list[tuple[str, int, str | None, int]] = []
    try:
        while len([r for r in reports if r[0] == "writer"]) < writers:
            reports.append(results.get(timeout=120))
        stop.set()
        while len(reports) < writers + READERS:
            reports.append(results.get(timeout=60))
    finally:
        stop.set()
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    errors = [f"{role} {number}:\n{error}" for role, number, error, _ in reports if error]
    assert not errors, "\n".join(errors)
    assert all(p.exitcode == 0 for p in processes)
    assert all(count > 0 for role, _, _, count in reports if role == "reader"), reports

    history = read_json(baseline_location(store, PROFILE, "w") / "history.json")["runs"]
    commits = [h["commit"] for h in history]
    assert len(commits) == HISTORY_LENGTH
    assert len(set(commits)) == len(commits)
    # Stamped under the lock, so in promotion order.
    stamps = [h["created_unix"] for h in history]
    assert stamps == sorted(stamps)
    for number in range(writers):
        own = [int(c.split("-")[1]) for c in commits if c.startswith(f"w{number}-")]
        # Each writer's newest promotions, none missing in between, its last one included.
        assert own == list(range(promotions - len(own), promotions)), (number, commits)
    if writers * promotions <= HISTORY_LENGTH:
        expected = {f"w{w}-{s:02d}" for w in range(writers) for s in range(promotions)}
        assert set(commits) == expected | ({"seed"} if writers * promotions < HISTORY_LENGTH else set())
    final = find_baseline(store, PROFILE, "w")
    assert final is not None and final.env["git"]["commit"] == commits[-1]
    # Old versions were pruned; no staging directory is left behind.
    versions = sorted(p.name for p in (store / PROFILE / ".w.versions").iterdir())
    assert len(versions) == KEEP_VERSIONS and all(v.isdigit() for v in versions)
    assert int(versions[-1]) == 1 + writers * promotions
