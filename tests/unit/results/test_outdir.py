"""The results directory: benchgate clears only what it wrote, and one run holds a directory at a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchgate.errors import ConfigError
from benchgate.results import outdir


def _tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def _write_run(out: outdir.ResultsDir) -> None:
    """What a run leaves: the names `benchgate run` writes at the top of --out."""
    out.will_write(["pipeline", "logs", "compare.json", "trace"])
    (out.path / "pipeline" / "run-1").mkdir(parents=True)
    (out.path / "logs").mkdir()
    (out.path / "logs" / "pipeline.log").write_text("log\n")
    (out.path / "compare.json").write_text("{}\n")
    (out.path / "trace").mkdir()
    (out.path / "trace" / "host.pt.trace.json").write_text("{}\n")


def test_a_new_directory_is_created_marked_and_cleared_run_after_run(tmp_path: Path) -> None:
    path = tmp_path / "results"
    with outdir.claimed(path) as out:
        out.clear()
        _write_run(out)
    marker = json.loads((path / outdir.MARKER).read_text())
    assert marker == {"written_by": "benchgate", "entries": ["compare.json", "logs", "pipeline", "trace"]}
    with outdir.claimed(path) as out:
        out.clear()
        assert _tree(path) == {outdir.MARKER, outdir.LOCK}


def test_a_non_empty_directory_benchgate_did_not_create_is_refused_and_untouched(tmp_path: Path) -> None:
    # `--out .` in a user's project: their own trace/ and compare.json must survive.
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "mine.json").write_text("{}")
    (tmp_path / "compare.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("x")
    before = _tree(tmp_path)
    with pytest.raises(ConfigError) as info, outdir.claimed(tmp_path):
        pass
    message = str(info.value)
    assert message.startswith(f"out: {tmp_path} is not empty (compare.json, notes.txt, trace)")
    assert "was not created by benchgate" in message
    assert info.value.exit_code == 2
    assert _tree(tmp_path) == before


def test_what_a_user_adds_to_a_results_directory_is_never_cleared(tmp_path: Path) -> None:
    with outdir.claimed(tmp_path / "out") as out:
        out.clear()
        _write_run(out)
    (tmp_path / "out" / "my-analysis.ipynb").write_text("{}")
    with outdir.claimed(tmp_path / "out") as out:
        out.clear()
    assert _tree(tmp_path / "out") == {outdir.MARKER, outdir.LOCK, "my-analysis.ipynb"}


def test_a_run_refuses_to_write_over_a_name_it_does_not_own(tmp_path: Path) -> None:
    with outdir.claimed(tmp_path / "out") as out:
        out.clear()
        (tmp_path / "out" / "trace").mkdir()  # the user's, made after benchgate claimed the directory
        with pytest.raises(ConfigError, match=r"already holds trace, which benchgate did not write"):
            out.will_write(["trace/host.json", "compare.json"])
    assert (tmp_path / "out" / "trace").is_dir()


def test_a_damaged_marker_is_named_and_nothing_is_cleared(tmp_path: Path) -> None:
    (tmp_path / "compare.json").write_text("{}")
    (tmp_path / outdir.MARKER).write_text('{"entries": ["compare.js')
    with (
        pytest.raises(ConfigError, match=rf"out: {tmp_path / outdir.MARKER} is damaged"),
        outdir.claimed(tmp_path),
    ):
        pass
    assert (tmp_path / "compare.json").exists()


def test_marker_entries_cannot_reach_outside_the_directory(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (tmp_path / "precious").write_text("keep")
    (out_dir / outdir.MARKER).write_text(json.dumps({"entries": ["..", "../precious", "/", "."]}))
    with outdir.claimed(out_dir) as out:
        out.clear()
    assert (tmp_path / "precious").read_text() == "keep"


def test_a_results_directory_from_before_the_marker_is_adopted(tmp_path: Path) -> None:
    # The layout benchgate wrote before it marked its directories: logs/pipeline.log and pipeline/.
    (tmp_path / "pipeline" / "run").mkdir(parents=True)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "pipeline.log").write_text("")
    for name in ("compare.json", "metrics-ws1.json", "report.html", "README.md"):
        (tmp_path / name).write_text("x")
    with outdir.claimed(tmp_path) as out:
        out.clear()
    assert _tree(tmp_path) == {outdir.MARKER, outdir.LOCK, "README.md"}


def test_a_second_run_on_the_same_directory_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    with outdir.claimed(tmp_path / "out") as first:
        first.clear()
        _write_run(first)
        with pytest.raises(ConfigError) as info, outdir.claimed(tmp_path / "out"):
            pass
        assert f"is in use by another benchgate run (pid {os.getpid()}, started " in str(info.value)
        assert info.value.exit_code == 2
        assert (tmp_path / "out" / "compare.json").exists()  # the first run's results are untouched
    with outdir.claimed(tmp_path / "out"):  # released on exit
        pass


HOLDER = """
import sys, time
from pathlib import Path
from benchgate.results import outdir
with outdir.claimed(Path(sys.argv[1])) as out:
    out.clear()
    out.will_write(["compare.json"])
    (out.path / "compare.json").write_text("{}")
    print("claimed", flush=True)
    time.sleep(600)
"""


def test_the_lock_of_a_run_killed_by_sigkill_is_released(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "out")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "claimed"
        busy = rf"in use by another benchgate run \(pid {holder.pid}, "
        with pytest.raises(ConfigError, match=busy), outdir.claimed(tmp_path / "out"):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    finally:
        holder.kill()
    started = time.monotonic()
    with outdir.claimed(tmp_path / "out") as out:
        assert out.owned == {"compare.json"}  # the killed run's marker still names what it wrote
        out.clear()
    assert time.monotonic() - started < 1
    assert not (tmp_path / "out" / "compare.json").exists()


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("x")
    with pytest.raises(ConfigError, match=r"exists and is not a directory"), outdir.claimed(tmp_path / "out"):
        pass
