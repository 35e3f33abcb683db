"""What a task keeps when its stores are pod-local (no `baseline_pvc`): hand-overs and copies.

Without a volume, the directory store, the spool and MLflow's embedded store of compare and A/B are in
the pod (`params.task_stores`) and go with it. Two things must outlive it: the baseline compare
screened against, which the A/B task (another pod, an empty store) needs, and a run MLflow did not
take. Both travel in the task's results artifact, which KFP keeps in the pipeline root's object store.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from benchgate.config import RunConfig
from benchgate.kit.files import read_json, write_json

# In compare's results when an A/B follows and the stores are pod-local: the baseline it screened against.
SCREENED_BASELINE = "screened-baseline"


def hand_over_baseline(baseline_dir: Path, results: Path) -> None:
    """Put the screened baseline into compare's results, for the A/B task to restore."""
    shutil.copytree(baseline_dir, results / SCREENED_BASELINE, dirs_exist_ok=True)


def publish_and_keep(configured: RunConfig, config: RunConfig, out: Path) -> dict[str, Any]:
    """Publish the final verdict (`config`: the stores this task uses; `configured`: those of config.json).

    A run MLflow did not take stays in the spool, which is on the pod's disk unless a volume holds it,
    so a copy goes into the results artifact too, under spool/<run key>/: the pipeline root's object
    store keeps it, and `benchgate sync --from DIR` sends it from there. Without a tracking URI and a
    volume the embedded MLflow store would be in the pod as well: the run is not logged there, only kept.
    """
    from benchgate.publish.stage import stage_publish
    from benchgate.results.bundle import PUBLISHED_FILE
    from benchgate.store import spool
    from benchgate.tracking import client as tracking

    hold = None
    if tracking.is_local_store(config) and config.tracking.local_dir != configured.tracking.local_dir:
        hold = "no MLflow tracking URI and no baseline_pvc: an embedded MLflow store would go with the pod"
    published = stage_publish(config, out, hold=hold)
    if published.get("spooled"):
        kept = spool.keep_copy(Path(published["spooled"]), out / spool.ARTIFACT_DIR)
        published["kept"] = f"{spool.ARTIFACT_DIR}/{kept.name}"
        write_json(out / PUBLISHED_FILE, published)
    return published


def restore_baseline(compared: Path, baseline_dir: Path) -> None:
    """Put the baseline the compare task screened against into this pod's (empty) store."""
    from benchgate.results.bundle import load_bundle
    from benchgate.store.baseline import save_baseline

    copy = compared / SCREENED_BASELINE
    if not (copy / "baseline.json").is_file():
        return
    meta = read_json(copy / "baseline.json")
    save_baseline(
        load_bundle(copy),
        baseline_dir,
        str(meta["reason"]),
        created_unix=float(meta["created_unix"]),
        history=list(read_json(copy / "history.json")["runs"]),
        extra=meta,
    )
