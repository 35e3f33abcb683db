"""The `baseline` task: the profile's newest baseline from MLflow, cached into an artifact for eval.

The eval task runs the code under test and holds no tracking credential (docs/kubernetes.md, "Who
holds the tracking credential"), yet its band decides whether more seeds run (measure/seeds.py), which
needs the stored baseline's eval. This trusted task, benchgate's code only, reads MLflow for it and
hands eval the store entry in its artifact; eval reads it there and never reaches MLflow.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from benchgate.kfp.params import task_stores
from benchgate.kfp.task_harness import load_setup, reporting_errors, stage

# In the baseline task's artifact: a directory store holding at most the profile's one baseline.
STORE_DIR = "store"
# Written by the env task into the setup: the workload's stored name (the workload's own `name` when
# the config gives none), so that this task need not import the code under test to learn it.
WORKLOAD_NAME_FILE = "workload-name.json"


def stored_workload_name(setup_dir: Path) -> str:
    """The workload name the env task recorded; a missing or malformed record is a clear error."""
    from benchgate.errors import RunFailedError
    from benchgate.kit.files import read_json

    path = setup_dir / WORKLOAD_NAME_FILE
    name = read_json(path).get("workload") if path.is_file() else None
    # Written by a task that ran the code under test: only a plain path segment is used.
    if not isinstance(name, str) or not name or "/" in name or name in {".", ".."}:
        raise RunFailedError(f"{WORKLOAD_NAME_FILE}: workload: got {name!r}, expected a workload name")
    return name


def baseline_task(setup_dir: str, baseline_pvc: str, out_dir: str) -> str:
    """Cache MLflow's newest baseline of the run's profile and workload, and copy the store's entry for
    them (MLflow's, or the store's own while MLflow is unreachable) into `out_dir`/store. Returns the
    sentence the log shows."""
    from benchgate.store.baseline import baseline_location
    from benchgate.tracking.refresh import cache_newest_baseline

    with reporting_errors("baseline", out_dir):
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        configured, env = load_setup(setup_dir)
        config = task_stores(configured, baseline_pvc)
        profile = env.get("machine_profile")
        workload = stored_workload_name(Path(setup_dir))
        store = out / STORE_DIR
        store.mkdir(exist_ok=True)
        if not profile:
            said = "no machine profile in env.json: no baseline looked up"
        else:
            with stage("baseline"):
                said = cache_newest_baseline(config, profile, workload)
                location = baseline_location(config.gate.baseline_dir, profile, workload)
                if location.is_dir():
                    target = baseline_location(store, profile, workload)
                    shutil.copytree(location, target, symlinks=True, dirs_exist_ok=True)
        print(f"benchgate baseline: {said}", flush=True)
        return said
