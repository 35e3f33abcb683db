"""The spool: gate runs written to disk before anything is sent to MLflow, removed once sent.

    <spool_dir>/<run_key>/record.json    run key, KFP run, start time, baseline marking
    <spool_dir>/<run_key>/...            the run's result files (env, config, metrics, eval, compare,
                                         report.html, trace/) exactly as they will appear in MLflow

Every run goes through here, reachable server or not, so there is one way to send a run and a crash
or an outage at any point leaves the run on disk. `benchgate sync` sends whatever is left; sending is
idempotent on the run key (tracking.log_entry), so a run is never logged twice.

A pipeline task's spool is on the pod's disk unless a volume holds it, so the task that publishes also
keeps a copy of an unsent entry in its results artifact, under `spool/<run_key>/` (`keep_copy`): the
object store of the pipeline root outlives the pod. `benchgate sync --from DIR` sends entries found
under such a directory (`found`) and leaves them where they are.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchgate.files import write_json

RECORD_FILE = "record.json"
# Files of a result directory that belong in the record; pipeline plumbing, logs and the copy of the
# entry a pipeline task keeps in its results (ARTIFACT_DIR) stay behind.
ARTIFACT_DIR = "spool"
SKIP = {"logs", "pipeline", "error.json", ARTIFACT_DIR}


def write_entry(spool_dir: Path, results: Path, record: dict[str, Any]) -> Path:
    """Copy `results` with `record` into the spool, atomically (a half-written entry never appears)."""
    spool_dir = Path(spool_dir)
    spool_dir.mkdir(parents=True, exist_ok=True)
    entry = spool_dir / str(record["run_key"])
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=spool_dir))
    try:
        for path in Path(results).iterdir():
            if path.name in SKIP or path.name.startswith("."):
                continue
            if path.is_dir():
                shutil.copytree(path, staging / path.name)
            else:
                shutil.copy2(path, staging / path.name)
        write_json(staging / RECORD_FILE, record)
        shutil.rmtree(entry, ignore_errors=True)  # the same run spooled again: the newer copy wins
        staging.rename(entry)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return entry


def pending(spool_dir: Path) -> list[Path]:
    """Entries not yet sent, oldest first."""
    spool_dir = Path(spool_dir)
    if not spool_dir.is_dir():
        return []
    entries = [p for p in spool_dir.iterdir() if p.is_dir() and (p / RECORD_FILE).is_file()]
    return sorted(entries, key=lambda p: (p / RECORD_FILE).stat().st_mtime)


def remove(entry: Path) -> None:
    shutil.rmtree(entry, ignore_errors=True)


def keep_copy(entry: Path, directory: Path) -> Path:
    """Copy `entry` into `directory` in the spool's layout (`<directory>/<run_key>/`); returns the copy."""
    target = Path(directory) / Path(entry).name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(entry, target)
    return target


def found(directory: Path) -> list[Path]:
    """Spool entries under `directory`, oldest first: the directory itself if it is one, the entries of
    a spool directory, or those kept under `spool/` of task results at any depth (a downloaded artifact,
    a pipeline root mounted from its object store). Reads only; hidden (staging) directories are skipped.
    """
    entries: list[Path] = []
    for root, dirs, files in os.walk(directory):
        if RECORD_FILE in files:
            entries.append(Path(root))
            dirs.clear()  # an entry's trace/ and the like hold no entries
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(entries, key=lambda p: ((p / RECORD_FILE).stat().st_mtime, str(p)))
