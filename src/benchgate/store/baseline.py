"""The directory baseline store: one baseline per (machine profile, workload).

    <baseline_dir>/<machine_profile>/
        <workload>                  symlink to .<workload>.versions/<NNNNNNNN>, what readers open
        .<workload>.versions/<NNNNNNNN>/{env.json, metrics-ws*.json, eval.json, baseline.json, history.json}
        .<workload>.lock            taken by writers only

Keyed by profile so that a run can only ever find a baseline measured on the same kind of machine.
baseline.json says who wrote it, when and why, and what it is made of (`made_of`: the measured steps,
the world sizes, and the eval on, off or skipped), since every later run is judged against it.
Each promotion also appends the run's p50s to history.json (the last HISTORY_LENGTH runs): the spread
of those run-level figures is the machine's run-to-run noise, by which the screen judges a change.

Many commits are gated at once against one store, and a reader that found no baseline would pass the
gate with "NEW" rows. So a promotion writes a complete new version directory, then repoints the symlink
with one rename: a reader sees the old complete baseline or the new one, never none and never a mix. A
reader resolves the link once and reads every file from that version. The newest KEEP_VERSIONS versions
stay on disk, so a reader that resolved a moment ago still finds its files; one whose version was pruned
all the same retries once. Writers serialize on an exclusive flock of the lock file, from reading the
previous history to repointing the link, so concurrent promotions neither fail nor drop each other's
history entry. Readers never take the lock.

Stores written before versions existed hold a plain <workload> directory: readers read it as it is,
and the first writer moves it into the versions behind a link.
`remove_stored` takes an entry out again, link first (the anchor store's `--clear`: store/anchor.py).

A truncated or edited baseline.json or history.json is a BaselineError naming the file (exit 2), never
an empty history. A disk that refuses a promotion (full, read-only) is a DiskError naming the store
(exit 3): the staging directory is removed and the link still points at the previous, complete version.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from benchgate.errors import BaselineError
from benchgate.kit import stats
from benchgate.kit.diskfaults import writing
from benchgate.kit.files import read_json_object, write_json
from benchgate.results.bundle import METRICS_FILE, Bundle, load_bundle
from benchgate.results.figures import corrected_mean, mean_step_time

HISTORY_LENGTH = 20
KEEP_VERSIONS = 5

T = TypeVar("T")


def made_of(run: Bundle) -> dict[str, Any]:
    """What a run measured, which every later run is judged against once it is the baseline: measured
    steps per world size, the world sizes, and whether it has the eval ("on", "off", or "skipped" when
    the workload has no eval hook)."""
    steps = min(
        int(m["steps"]) if m.get("steps") is not None else len(m["samples"]["step_time_s"])
        for m in run.metrics.values()
    )
    evaluation = "off" if run.eval is None else ("skipped" if "skipped" in run.eval else "on")
    return {"steps": steps, "world_sizes": sorted(run.metrics), "eval": evaluation}


def describe(made: dict[str, Any]) -> str:
    """made_of's answer in words: "60 steps at world sizes 1 and 2, eval on"."""
    sizes = made["world_sizes"]
    where = f"world size {sizes[0]}" if len(sizes) == 1 else "world sizes " + " and ".join(map(str, sizes))
    return f"{made['steps']} steps at {where}, eval {made['eval']}"


def baseline_location(baseline_dir: Path, machine_profile: str, workload: str) -> Path:
    """Where readers find the baseline: a link to its current version (a plain directory in old stores)."""
    return Path(baseline_dir) / machine_profile / workload


def find_baseline(baseline_dir: Path, machine_profile: str, workload: str) -> Bundle | None:
    """The stored baseline for this profile and workload, None if there is none (corrupt ones raise).
    Its path is the version directory it was read from."""
    return _read_current(baseline_location(baseline_dir, machine_profile, workload), load_bundle)


def read_meta(baseline_dir: Path, machine_profile: str, workload: str) -> dict[str, Any] | None:
    """The stored baseline's baseline.json (who, when, why), None if there is none."""
    return _read_current(baseline_location(baseline_dir, machine_profile, workload), _read_meta)


def _read_meta(directory: Path) -> dict[str, Any]:
    path = directory / "baseline.json"
    try:
        return read_json_object(path)
    except ValueError as e:  # names the file
        raise BaselineError(str(e)) from None


def save_baseline(
    run: Bundle,
    baseline_dir: Path,
    reason: str,
    *,
    created_unix: float | None = None,
    history: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Store `run` as its profile's baseline. By default its history extends the previous baseline's;
    a baseline copied from MLflow brings its own (`history`), its marking time and its origin (`extra`).
    Returns the location readers use (see `baseline_location`)."""
    workload = run.workload
    assert workload is not None, "a loaded bundle always has metrics"
    location = baseline_location(baseline_dir, run.machine_profile, workload)
    with writing("the baseline store", location):
        _promote(run, baseline_dir, reason, location, created_unix, history, extra)
    return location


def remove_stored(baseline_dir: Path, machine_profile: str, workload: str) -> bool:
    """Remove what `save_baseline` wrote for this profile and workload (its link and its versions), under
    the writers' lock; False where there is nothing. A plain directory of the old layout and any other
    file are left alone (benchgate may not have written them), and so is the lock file (see `_locked`)."""
    location = baseline_location(baseline_dir, machine_profile, workload)
    versions = location.with_name(f".{workload}.versions")
    if not location.is_symlink() and not versions.is_dir():
        return False
    with writing("the baseline store", location), _locked(location):
        # The link first: from here on readers find nothing, rather than a version being removed.
        removed = location.is_symlink()
        if removed:
            location.unlink()
        for path in [*versions.glob(".staging-*"), *_numbered(versions)]:
            shutil.rmtree(path)
            removed = True
        with contextlib.suppress(OSError):
            versions.rmdir()  # only when empty: whatever else is in it is not ours
    return removed


def _promote(
    run: Bundle,
    baseline_dir: Path,
    reason: str,
    location: Path,
    created_unix: float | None,
    history: list[dict[str, Any]] | None,
    extra: dict[str, Any] | None,
) -> None:
    workload = location.name
    versions = location.with_name(f".{workload}.versions")
    location.parent.mkdir(parents=True, exist_ok=True)
    with _locked(location):
        _adopt_old_layout(location, versions)
        # Read under the lock, so that no other promotion lands between this read and the swap below.
        previous = find_baseline(baseline_dir, run.machine_profile, workload)
        versions.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=versions))
        try:
            for path in run.path.iterdir():
                if path.name in ("env.json", "eval.json") or METRICS_FILE.match(path.name):
                    shutil.copy2(path, staging / path.name)
            meta: dict[str, Any] = {
                "machine_profile": run.machine_profile,
                "workload": workload,
                **made_of(run),
                "commit": run.env.get("git", {}).get("commit"),
                "branch": run.env.get("git", {}).get("branch"),
                "reason": reason,
                "created_unix": time.time() if created_unix is None else created_unix,
                "source": str(run.path.resolve()),
                **(extra or {}),
            }
            write_json(staging / "baseline.json", meta)
            if history is None:
                history = _extended_history(previous.history if previous else [], run, meta)
            write_json(staging / "history.json", {"runs": history})
            version = _next_version(versions)
            staging.rename(version)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _point(location, version)
        _prune(versions)


def _read_current(location: Path, read: Callable[[Path], T]) -> T | None:
    directory = _current(location)
    if directory is None:
        return None
    try:
        return read(directory)
    except (BaselineError, ValueError, FileNotFoundError):
        # Files vanishing from a version the link has moved away from: it was pruned while we read it.
        # Anything else (the link still points here) is a corrupt baseline and is reported as such.
        newer = _current(location)
        if newer is None or newer == directory:
            raise
        return read(newer)


def _current(location: Path) -> Path | None:
    """The directory of the current baseline. Resolved once, so every file is read from one version."""
    directory = location.resolve()
    if (directory / "baseline.json").exists():
        return directory
    # No link only while a writer moves an old-layout directory behind one: then the newest version is
    # the current baseline.
    numbered = _numbered(location.with_name(f".{location.name}.versions"))
    return numbered[-1] if numbered and (numbered[-1] / "baseline.json").exists() else None


def _numbered(versions: Path) -> list[Path]:
    """The complete versions, oldest first (staging directories are not numbered)."""
    try:
        return sorted((p for p in versions.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    except FileNotFoundError:
        return []


def _next_version(versions: Path) -> Path:
    numbered = _numbered(versions)  # only the lock holder numbers: numbers rise in promotion order
    return versions / f"{int(numbered[-1].name) + 1 if numbered else 1:08d}"


@contextlib.contextmanager
def _locked(location: Path) -> Iterator[None]:
    # The lock file is never deleted: deleting it would let two writers lock two different files.
    with open(location.with_name(f".{location.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _point(location: Path, version: Path) -> None:
    """Repoint the link at `version` with one rename: readers see the old target or the new one."""
    link = location.with_name(f".{location.name}.link")  # only the lock holder uses this name
    link.unlink(missing_ok=True)
    # Relative, so the store keeps working when mounted or copied elsewhere.
    os.symlink(Path(version.parent.name) / version.name, link)
    os.replace(link, location)


def _adopt_old_layout(location: Path, versions: Path) -> None:
    """Move a plain <workload> directory from before versions existed behind a link (under the lock)."""
    if location.is_symlink() or not location.is_dir():
        return
    versions.mkdir(exist_ok=True)
    adopted = _next_version(versions)
    # A directory cannot be replaced by a link in one rename. For that instant readers find no link and
    # fall back to the newest version, which is this very directory.
    location.rename(adopted)
    _point(location, adopted)


def _prune(versions: Path) -> None:
    """Drop all but the newest KEEP_VERSIONS versions, and staging left behind by a crashed writer."""
    for path in versions.glob(".staging-*"):  # under the lock: no other writer is staging now
        shutil.rmtree(path, ignore_errors=True)
    for path in _numbered(versions)[:-KEEP_VERSIONS]:
        shutil.rmtree(path, ignore_errors=True)


def _extended_history(
    previous: list[dict[str, Any]], run: Bundle, meta: dict[str, Any]
) -> list[dict[str, Any]]:
    p50 = {str(ws): _run_p50s(m["samples"]) for ws, m in run.metrics.items()}
    runs = [*previous, {"commit": meta["commit"], "created_unix": meta["created_unix"], "p50": p50}]
    return runs[-HISTORY_LENGTH:]


def _run_p50s(samples: dict[str, Any]) -> dict[str, float]:
    """The run-level figures the screen's noise is measured on (the p50s are kept for the report)."""
    p50 = {
        "tokens_per_s": stats.percentile(samples["tokens_per_s"], 50),
        "step_time_s": stats.percentile(samples["step_time_s"], 50),
        "mean_step_time_s": mean_step_time(samples["step_time_s"]),
    }
    steps, reference = samples["step_time_s"], samples.get("reference_s")
    # Step time in units of the drift reference timed next to each step: the host's drift cancels out.
    if reference and len(reference) == len(steps):
        p50["step_time_per_reference"] = stats.percentile(
            [s / r for s, r in zip(steps, reference, strict=True)], 50
        )
        corrected = corrected_mean(samples)
        if corrected is not None:
            p50["mean_step_time_per_reference"] = corrected
    return p50
