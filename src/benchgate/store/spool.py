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

An entry is checked whole before anything of it is sent (`read_entry`): a truncated or hand-edited file
or a missing file of its bundle is a SpoolEntryError naming the entry, which `sync` reports while it
sends the others. Damaged entries are left where they are. Entries appear and disappear by one rename
each, so a crash while writing or removing one never leaves a half entry that looks damaged.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchgate.errors import BadInputError, SpoolEntryError
from benchgate.kit.diskfaults import writing
from benchgate.kit.files import read_json_object, write_json
from benchgate.results.bundle import Bundle, load_bundle
from benchgate.results.comparison import Comparison

RECORD_FILE = "record.json"
# Files of a result directory that belong in the record; pipeline plumbing, logs and the copy of the
# entry a pipeline task keeps in its results (ARTIFACT_DIR) stay behind.
ARTIFACT_DIR = "spool"
SKIP = {"logs", "pipeline", "error.json", ARTIFACT_DIR}


def write_entry(spool_dir: Path, results: Path, record: dict[str, Any]) -> Path:
    """Copy `results` with `record` into the spool, atomically (a half-written entry never appears).

    A disk that refuses (full, read-only) is a DiskError naming the entry; the staging copy is removed
    and an earlier copy of the same run stays as it was."""
    spool_dir = Path(spool_dir)
    entry = spool_dir / str(record["run_key"])
    with writing("the spool entry", entry):
        spool_dir.mkdir(parents=True, exist_ok=True)
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
            # The same run spooled again: the newer copy wins, and the older one is back if it cannot.
            older = _aside(entry)
            try:
                staging.rename(entry)
            except BaseException:
                if older is not None:
                    older.rename(entry)
                raise
            if older is not None:
                shutil.rmtree(older, ignore_errors=True)
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
    return sorted(entries, key=_age)


def strays(spool_dir: Path) -> list[Path]:
    """Directories in the spool that are not entries: no record.json, and not benchgate's own hidden
    staging. benchgate never leaves one (entries come and go by rename), so each needs a human."""
    spool_dir = Path(spool_dir)
    if not spool_dir.is_dir():
        return []
    return sorted(
        p
        for p in spool_dir.iterdir()
        if p.is_dir() and not p.name.startswith(".") and not (p / RECORD_FILE).exists()
    )


def remove(entry: Path) -> None:
    """Remove a sent entry: renamed out of sight first, so a crash halfway never leaves half an entry."""
    with writing("the spool entry", entry):
        gone = _aside(entry)
    if gone is not None:
        shutil.rmtree(gone, ignore_errors=True)


def _aside(entry: Path) -> Path | None:
    """Rename `entry` to a hidden name beside it (None when there is no entry); sync never reads it."""
    hidden = entry.with_name(f".old-{entry.name}-{uuid.uuid4().hex[:8]}")
    try:
        entry.rename(hidden)
    except FileNotFoundError:
        return None
    return hidden


def _age(entry: Path) -> tuple[float, str]:
    try:
        return (entry / RECORD_FILE).stat().st_mtime, str(entry)
    except FileNotFoundError:  # sent by a concurrent sync meanwhile: it sorts last, and is skipped
        return float("inf"), str(entry)


@dataclass(frozen=True)
class SpooledRun:
    """A spool entry, read and checked: everything `tracking.log_entry` sends, before it sends anything."""

    entry: Path
    record: dict[str, Any]
    bundle: Bundle
    comparison: Comparison
    config: dict[str, Any]


def read_entry(entry: Path) -> SpooledRun:
    """Read and check a whole entry; a damaged one raises SpoolEntryError naming it and what is wrong."""
    entry = Path(entry)
    try:
        record = read_json_object(entry / RECORD_FILE)
        if not isinstance(record.get("run_key"), str) or not record["run_key"]:
            raise ValueError(f"{entry / RECORD_FILE}: run_key is {record.get('run_key')!r}, not a run key")
        for key, required in (("started_unix", True), ("baseline_since_unix", False)):
            value = record.get(key)
            if (required or value is not None) and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise ValueError(f"{entry / RECORD_FILE}: {key} is {value!r}, not a time")
        bundle = load_bundle(entry)
        # Every row complete, every status one the gate knows: else a BadInputError naming the field.
        comparison = Comparison.from_dict(read_json_object(entry / "compare.json"), entry / "compare.json")
        config = read_json_object(entry / "config.json")
    except (BadInputError, ValueError) as e:
        raise SpoolEntryError(f"damaged spool entry {entry}: {e}") from None
    return SpooledRun(entry, record, bundle, comparison, config)


def keep_copy(entry: Path, directory: Path) -> Path:
    """Copy `entry` into `directory` in the spool's layout (`<directory>/<run_key>/`); returns the copy."""
    target = Path(directory) / Path(entry).name
    with writing("the copy of the spool entry", target):
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
