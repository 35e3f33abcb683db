"""Telling a fault of this machine's disk from a server that is down, and saying which path it was.

A disk that is full, read-only or not permitted must fail a run with exit 3 naming the path (a
DiskError), never pass for an MLflow outage: an outage is survived on the spool and the cached
baseline, so a disk fault taken for one would silently compare against a stale cache and log nothing.
The two are hard to tell apart by class: `requests`' ConnectionError is an OSError too, and MLflow wraps
what went wrong (an MlflowException around SQLAlchemy around sqlite3). So the test is what the error
says about the disk (`local_fault`): a disk's errno, a file name, a SQLite code for read-only or full.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import requests

from benchgate.errors import BenchgateError, DiskError

# errno values that mean "this machine's disk refused", as opposed to "a server did not answer".
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO})


def is_disk_error(error: BaseException) -> bool:
    """An OSError of the local disk: its errno says so, or it names a file (a network error does not)."""
    if isinstance(error, shutil.Error):
        return True
    return isinstance(error, OSError) and (error.errno in DISK_ERRNOS or error.filename is not None)


def disk_reason(error: BaseException) -> str:
    """Why the disk refused: "No space left on device", "Read-only file system", ..."""
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list) and error.args[0]:
        return str(error.args[0][0][-1])  # copytree's first (source, destination, why)
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def disk_error(error: BaseException, what: str, path: Path | str) -> DiskError:
    """'cannot write <what> <path>: <reason>', with the file that failed where it is not `path` itself
    (nor a hidden temporary file benchgate was about to rename into place)."""
    # shutil's copies name the source in `filename` and the destination, which the disk refused, in
    # `filename2`.
    name = str(getattr(error, "filename2", None) or getattr(error, "filename", None) or "")
    where = f" ({name})" if name and name != str(path) and not Path(name).name.startswith(".") else ""
    return DiskError(f"cannot write {what} {path}: {disk_reason(error)}{where}")


@contextlib.contextmanager
def writing(what: str, path: Path | str) -> Iterator[None]:
    """Local writes only inside: any OSError becomes a DiskError naming `what` and `path` (exit 3)."""
    try:
        yield
    except OSError as e:
        raise disk_error(e, what, path) from None


# SQLite's primary result codes for a store its disk refuses: PERM, READONLY, IOERR, FULL, CANTOPEN.
SQLITE_DISK_CODES = frozenset({3, 8, 10, 13, 14})


def local_fault(error: BaseException) -> BaseException | None:
    """The fault of this machine's disk behind `error`, if any, else None (a network or server error).

    MLflow wraps what went wrong (an MlflowException around SQLAlchemy around sqlite3), so the chain of
    causes is searched: an OSError whose errno is a disk's (ENOSPC, EROFS, ...) or, at the top, that names
    a file, or a SQLite error that says read-only, full or cannot open."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, requests.RequestException):
            return None  # a request that failed: the network, whatever errno it carries
        top = cause is error
        if isinstance(cause, OSError) and (is_disk_error(cause) if top else cause.errno in DISK_ERRNOS):
            return cause
        if isinstance(cause, sqlite3.Error) and (getattr(cause, "sqlite_errorcode", 0) & 0xFF) in (
            SQLITE_DISK_CODES
        ):
            return cause
        # `raise ... from None` hides the context: a fault already reported as something else.
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return None


def check_writable(directory: Path) -> None:
    """Create the directory and write one page into it, as SQLite will: a DiskError if the disk refuses."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(b"\0" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as e:
        raise DiskError(f"cannot write MLflow's local store {directory}: {disk_reason(e)}") from None


@contextlib.contextmanager
def local_faults(local_dir: Path | None, entry: Path | None = None) -> Iterator[None]:
    """Inside, a fault of this machine's disk is a DiskError naming the path; anything else passes on.

    The path: the file the OSError names, else the local store (a SQLite error), else the spool entry
    being sent (what is read from this machine when the store is a server)."""
    try:
        yield
    except BenchgateError:
        raise  # already says what went wrong (a DiskError of the baseline store, say)
    except Exception as e:
        fault = local_fault(e)
        if fault is None:
            raise
        if isinstance(fault, sqlite3.Error) and local_dir is not None:
            try:
                check_writable(local_dir)  # the reason the OS gives, where SQLite only says "readonly"
            except DiskError as full:
                raise full from None
        named = getattr(fault, "filename2", None) or getattr(fault, "filename", None)
        if local_dir is not None and (named is None or Path(str(named)).is_relative_to(local_dir)):
            where = named or local_dir
            raise DiskError(f"cannot write MLflow's local store {where}: {disk_reason(fault)}") from None
        where = named or entry or "a local file"
        raise DiskError(f"this machine's disk refused {where}: {disk_reason(fault)}") from None
