"""The trusted side of the pipelines: tasks that run benchgate's own code only, and how they take in
what the user-code tasks wrote.

The tasks that run the code under test (components.USER_CODE_COMPONENTS: env, the benches, eval,
trace, A/B, bisect) hold no tracking credential and mount no baseline volume, so the code under test
cannot write a baseline, a history entry or another experiment's runs. Whatever they decide reaches
MLflow through a task of this kind, which reads their artifact as untrusted input: regular files and
directories only (a symbolic link could point at the credential or the volume this pod has), each
result parsed by its loader (`load_comparison`, `read_json`), nothing imported, evaluated or unpickled.
The run's settings are the env task's config.json, which compare accepts only as what the pipeline's
parameters make (`check_setup_config`), and publish then reads from compare's copy.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchgate.errors import RunFailedError
from benchgate.kfp.params import task_stores
from benchgate.kfp.pod_stores import SCREENED_BASELINE, publish_and_keep, restore_baseline
from benchgate.kfp.task_harness import load_setup, reporting_errors, stage
from benchgate.kit.files import read_json

# What the A/B task (user code) may not hand the publisher: the baseline copy and the spool are the
# trusted compare's or the publisher's own, published.json says what the publisher did.
NOT_FROM_USER_CODE = frozenset({SCREENED_BASELINE, "spool", "published.json"})
# What the A/B task rewrites of compare's results: its decision replaces the screen's. Everything else
# compare gathered (setup, bench, eval, trace, tracking.json) is taken from compare's artifact.
DECIDED_BY_AB = frozenset({"compare.json", "compare.md"})


def copy_untrusted(
    source: Path,
    dest: Path,
    *,
    what: str,
    leave_out: frozenset[str] = frozenset(),
    copy_function: Callable[[str, str], object] = shutil.copyfile,
) -> None:
    """Copy the regular files and directories under `source` (a user-code task's artifact) into `dest`
    with `copy_function`, leaving out the top-level names in `leave_out`. A symbolic link, device, socket
    or pipe is refused with an error naming it: a trusted pod following one (to /proc/self/environ, say)
    could copy its own credential into the run's published artifacts."""
    for root, dirs, files in os.walk(source, followlinks=False):
        here = Path(root)
        rel_root = here.relative_to(source)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d not in leave_out]
            files = [f for f in files if f not in leave_out]
        for name in (*dirs, *files):
            path = here / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise RunFailedError(
                    f"{what}: {path.relative_to(source)} is not a regular file or directory; a trusted "
                    "task reads only those from a task that ran the code under test"
                )
        (dest / rel_root).mkdir(parents=True, exist_ok=True)
        for name in files:
            copy_function(str(here / name), str(dest / rel_root / name))


def check_setup_config(bundle: Path, parameters: dict[str, Any], suite_entry: str) -> None:
    """Refuse a config.json in `bundle` that is not what the run's `parameters` (and `suite_entry`)
    make: the env task that wrote it ran the code under test, which could otherwise loosen the
    tolerances, force a baseline update or send this task's credential to another tracking server."""
    from benchgate.kfp.params import config_from_parameters
    from benchgate.kfp.suite_entry import apply_entry, read_entry

    entry = read_entry(suite_entry) if suite_entry else None
    expected = config_from_parameters(**(apply_entry(parameters, entry) if entry else parameters))
    wanted = json.loads(json.dumps(expected.model_dump(mode="json")))
    written = read_json(bundle / "config.json")
    if written != wanted:
        where = _first_difference(wanted, written, "")
        raise RunFailedError(
            f"config.json: {where or 'the whole file'} is not what the run's parameters make; the env "
            "task, which ran the code under test, changed the run's settings"
        )


def _first_difference(wanted: Any, written: Any, path: str) -> str:
    """The dotted name of the first setting where `written` differs from `wanted`."""
    if isinstance(wanted, dict) and isinstance(written, dict):
        for key in sorted(set(wanted) | set(written)):
            if wanted.get(key, ...) != written.get(key, ...):
                return _first_difference(wanted.get(key), written.get(key), f"{path}.{key}" if path else key)
    return path


def publish_task(
    setup_dir: str, compared_dir: str, decided_dir: str, baseline_pvc: str, results_dir: str
) -> None:
    """Publish the A/B task's verdict: report, baseline policy, MLflow parent and child runs, spool copy.

    The bundle is compare's results (trusted) with the A/B's decision (compare.json, compare.md) and
    its own files over them; compare.json is parsed before anything is published, and the publish
    stage judges it as it would compare's. `baseline_pvc`: the volume mounted for the stores, or "" for
    pod-local ones, which then start from the baseline compare screened against (its hand-over)."""
    from benchgate.results.comparison import load_comparison

    with reporting_errors("publish", results_dir):
        out = Path(results_dir)
        out.mkdir(parents=True, exist_ok=True)
        copy_untrusted(Path(decided_dir), out, what="the A/B results", leave_out=NOT_FROM_USER_CODE)
        for path in Path(compared_dir).iterdir():
            if path.name in DECIDED_BY_AB or path.name == SCREENED_BASELINE:
                continue
            target = out / path.name
            if path.is_dir():
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                shutil.copy2(path, target)
        # compare's copy of the setup: checked against the run's parameters there.
        configured, _ = load_setup(compared_dir)
        config = task_stores(configured, baseline_pvc)
        if config.gate.baseline_dir != configured.gate.baseline_dir:
            restore_baseline(Path(compared_dir), config.gate.baseline_dir)
        comparison = load_comparison(out / "compare.json")
        print(f"benchgate publish: the A/B's verdict {comparison.verdict}", flush=True)
        with stage("publish"):
            publish_and_keep(configured, config, out)
