"""The results directory (`--out`): benchgate only ever clears what it wrote there, one run at a time.

A run replaces the previous run's results in its `--out`, so that nothing stale is judged or gathered.
Two rules keep that from destroying anything else:

- **Ownership.** benchgate writes into a directory only if it is new, empty, or carries the marker
  `.benchgate-out.json` that benchgate left there; the marker lists every top-level entry benchgate
  wrote. Clearing removes exactly those entries, so a file a user added later stays, and a non-empty
  directory benchgate did not create (`--out .`, a home directory) is refused with exit 2.
- **One run at a time.** A run holds an exclusive `flock` on `.benchgate-out.lock` for its whole life;
  a second run with the same `--out` is refused at once (exit 2, naming the holder's pid) instead of
  clearing the first run's files under it. The kernel drops the lock when its holder dies, even by
  `kill -9`, so a crashed run never blocks the next one.

The marker is updated before anything is written under a new name, so even a run killed half-way
leaves a marker that covers what it wrote.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from benchgate.errors import ConfigError
from benchgate.kit.files import read_json, write_json

MARKER = ".benchgate-out.json"
LOCK = ".benchgate-out.lock"
_OWN_FILES = {MARKER, LOCK}
# What a results directory of benchgate before the marker existed held: such a directory is adopted
# (its entries of these names count as benchgate's) rather than refused after an upgrade.
_LEGACY_SIGNATURE = ("logs/pipeline.log", "pipeline")
_LEGACY_NAMES = (
    "ab", "trace", "spool", "pipeline", "logs", "errors", "eval.json", "trace.json", "compare.json",
    "compare.md", "env.json", "config.json", "run.json", "report.html", "tracking.json", "published.json",
)  # fmt: skip


class ResultsDir:
    """An owned, locked `--out` directory; use `claimed()` to get one."""

    def __init__(self, path: Path, owned: set[str]) -> None:
        self.path = path
        self.owned = owned

    def clear(self, keep: Iterable[str] = ()) -> None:
        """Remove what the previous run wrote here (and nothing else), but the top-level names in
        `keep`, which stay ours (an incremental suite's entries measured before)."""
        kept = {Path(name).parts[0] for name in keep} & self.owned
        for name in sorted(self.owned - kept):
            entry = self.path / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
        self.owned = kept
        self._save()

    def will_write(self, names: Iterable[str]) -> None:
        """Record top-level names before writing them, so a killed run's files are still known as ours."""
        names = {Path(name).parts[0] for name in names}
        foreign = sorted(n for n in names - self.owned if (self.path / n).exists())
        if foreign:
            raise ConfigError(
                f"out: {self.path} already holds {', '.join(foreign)}, which benchgate did not write; "
                "move it away or pass another --out"
            )
        if names - self.owned:
            self.owned |= names
            self._save()

    def _save(self) -> None:
        write_json(self.path / MARKER, {"written_by": "benchgate", "entries": sorted(self.owned)})


@contextlib.contextmanager
def claimed(path: Path) -> Iterator[ResultsDir]:
    """Claim `path` for one run: create or adopt it, lock it, and yield it (the lock is held until exit)."""
    path = Path(path).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"out: {path} exists and is not a directory") from None
    owned = _owned_entries(path)
    with open(path / LOCK, "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            raise ConfigError(
                f"out: {path} is in use by another benchgate run ({holder}); wait for it to finish or "
                "pass another --out"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        lock.flush()
        results = ResultsDir(path, owned)
        results._save()
        yield results  # closing the file releases the lock


def _owned_entries(path: Path) -> set[str]:
    """The top-level entries benchgate wrote in `path`; ConfigError if it is someone else's directory."""
    entries = {p.name for p in path.iterdir()} - _OWN_FILES
    marker = path / MARKER
    if marker.exists():
        try:
            recorded: Any = read_json(marker)
            listed = recorded["entries"]
            if not (isinstance(listed, list) and all(isinstance(n, str) for n in listed)):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                f"out: {marker} is damaged; benchgate cannot tell what it wrote in {path}. "
                "Check the directory by hand, then delete the marker or pass another --out"
            ) from None
        # A name with a separator or a dot path could reach outside the directory; never trust one.
        return {n for n in listed if n and "/" not in n and n not in (".", "..")} & entries
    if not entries:
        return set()
    if all((path / sign).exists() for sign in _LEGACY_SIGNATURE):
        return entries & set(_LEGACY_NAMES) | {p.name for p in path.glob("metrics-ws*.json")}
    shown = ", ".join(sorted(entries)[:5]) + (", …" if len(entries) > 5 else "")
    raise ConfigError(
        f"out: {path} is not empty ({shown}) and was not created by benchgate; benchgate clears its "
        "results directory before each run, so pass a new or empty --out"
    )
