"""The anchor store: one pinned run per (machine profile, workload), which creep is measured from.

A per-commit gate judges each commit against the one before it, and every PASS becomes the next
baseline: five 1.5% slowdowns in a row each PASS a 5% tolerance and add up to 7%. The anchor is a run
that stays put (a release, a chosen older baseline), pinned with `benchgate baseline anchor RUN_ID`;
compare judges every run against it too (checks/creep.py).

    <baseline_dir>/.anchors/<machine_profile>/
        <workload>                  symlink to .<workload>.versions/<NNNNNNNN>, what readers open
        .<workload>.versions/<NNNNNNNN>/{env.json, metrics-ws*.json, eval.json, baseline.json, history.json}
        .<workload>.lock            taken by writers only

It is the baseline store's layout under its own root, written by the same code (store/baseline.py): a
complete new version, then the link repointed with one rename, so a reader sees the old anchor or the
new one, never a mix. `.anchors` starts with a dot, which no machine profile does (results/bundle.py),
so it can never be taken for a profile's directory. baseline.json says which MLflow run was pinned, by
whom, when (`created_unix`: the pin's time, so a newer pin is told from an older one) and where that
MLflow is (`tracking_uri`); history.json is empty: the noise a change is judged by is the baseline
store's (the machine's run-to-run noise), not the anchor's.

Only what `save_anchor` wrote is removed by `clear_anchor` (`benchgate baseline anchor --clear`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchgate.errors import BadInputError, BaselineError
from benchgate.results.bundle import Bundle
from benchgate.store.baseline import (
    baseline_location,
    find_baseline,
    read_meta,
    remove_stored,
    save_baseline,
)

ANCHOR_DIR = ".anchors"


def anchor_root(baseline_dir: Path) -> Path:
    """The anchor store beside the baselines: a baseline store of its own, under `baseline_dir`."""
    return Path(baseline_dir) / ANCHOR_DIR


def anchor_location(baseline_dir: Path, machine_profile: str, workload: str) -> Path:
    """Where readers find the anchor of this profile and workload (a link to its current version)."""
    return baseline_location(anchor_root(baseline_dir), machine_profile, workload)


def find_anchor(baseline_dir: Path, machine_profile: str, workload: str) -> Bundle | None:
    """The pinned anchor of this profile and workload, None if there is none (a corrupt one raises).

    An anchor cleared while it was being read is none: `--clear` takes the link away first, so a
    reader that finds the files gone and no link is told the truth, not an error."""
    try:
        return find_baseline(anchor_root(baseline_dir), machine_profile, workload)
    except (BaselineError, FileNotFoundError):
        location = anchor_location(baseline_dir, machine_profile, workload)
        if location.is_symlink() or location.with_name(f".{workload}.versions").is_dir():
            raise
        return None


def read_anchor_meta(baseline_dir: Path, machine_profile: str, workload: str) -> dict[str, Any] | None:
    """The anchor's baseline.json (which MLflow run, pinned when, by whom), None if there is none."""
    return read_meta(anchor_root(baseline_dir), machine_profile, workload)


def save_anchor(
    run: Bundle, baseline_dir: Path, reason: str, pinned_unix: float, meta: dict[str, Any]
) -> Path:
    """Store `run` (a pinned run's result files) as the anchor of its profile and workload, replacing any
    earlier one; `meta` goes into its baseline.json (the MLflow run, who pinned it, `tracking_uri`).
    Returns the location readers use."""
    return save_baseline(
        run,
        anchor_root(baseline_dir),
        reason,
        created_unix=pinned_unix,
        history=[],
        extra={"anchor": True, **meta},
    )


def anchored_workloads(baseline_dir: Path, machine_profile: str) -> list[str]:
    """The workloads of this profile that have an anchor in the store, sorted."""
    directory = anchor_root(baseline_dir) / plain_name(machine_profile, "--profile")
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.is_symlink() and not p.name.startswith("."))


def clear_anchor(baseline_dir: Path, machine_profile: str, workload: str | None = None) -> list[str]:
    """Remove the anchor of one workload of this profile (of every workload: `workload` None); returns
    the workloads whose anchor was removed. Nothing but what `save_anchor` wrote is touched, and a name
    that is not a plain directory name ('..', 'a/b') is bad input, never a path to follow."""
    root = anchor_root(baseline_dir)
    directory = root / plain_name(machine_profile, "--profile")
    if workload is not None:
        workloads = [plain_name(workload, "--workload")]
    elif directory.is_dir():
        # Links, and versions a crash left without their link.
        names = {p.name for p in directory.iterdir() if p.is_symlink() and not p.name.startswith(".")}
        names |= {p.name[1 : -len(".versions")] for p in directory.glob(".?*.versions") if p.is_dir()}
        workloads = sorted(names)
    else:
        workloads = []
    return [w for w in workloads if remove_stored(root, machine_profile, w)]


def plain_name(name: str, what: str) -> str:
    """`name` where it is one directory name of the store (as profiles and workloads are), else bad input
    naming `what` (the flag it came from)."""
    if not name or name != Path(name).name or name.startswith(".") or "\\" in name:
        raise BadInputError(
            f"{what}: got {name!r} (expected a name like the ones `benchgate baseline show` lists)"
        )
    return name
