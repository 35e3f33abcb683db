"""Fingerprints of what the interleaved A/B holds fixed, so the gate can tell the code from its setup.

A/B runs the base commit (A) and the candidate (B) side by side, but both sides run *this* installed
benchgate, the candidate's configuration and the candidate's installed packages; only the user's
workload code comes from each side's checkout. A slowdown caused by

    - benchgate's own code (its harness, or a workload bundled under `benchgate.workloads`),
    - a dependency bump (torch, numpy, ... or the Python interpreter), or
    - a change of the bench settings that set per-step speed (workload, its arguments, device,
      precision, threads per rank, seed)

is therefore the same on both sides: A/B compares the code alone. Each run records one short digest
per thing A/B holds fixed (env.json "fingerprints", MLflow tags `benchgate.fingerprint.<name>`); where
the baseline's and the current run's differ, the A/B decision still stands for the code, and the setup's
own change is measured apart (ab/environment.py: the base side of the A/B against the stored baseline).

What each digest covers, so that a change the timed process never sees does not count:

    benchgate   the files of benchgate's harness and bundled workloads (`measure/`, `workloads/`: the
                code that starts, times and trains) and benchgate's version; not the CLI, the
                publishing, tracking, pipeline or operator code, which never runs in the timed process.
    packages    the interpreter and the distributions behind the modules the bench process imported
                (`record_loaded`, written by the bench worker into metrics-ws<N>.json "loaded"; the
                union over the run's world sizes, `of_run`). A distribution installed beside them that
                the bench never imports (the `hf` extra under the GPT workload) changes nothing. A run
                whose metrics lack that record (written before it existed) keeps env.json's digest,
                taken of every installed distribution; two runs are compared by the loaded sets only
                where both recorded them (`compared`), so older baselines still compare.
    config      the bench settings that set the speed of a step (CONFIG_FIELDS).

Digests are sha256 over sorted, length-framed bytes: the same inputs give the same value in every
process (no `hash()`, whose value changes with PYTHONHASHSEED) and on every machine.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchgate._version import __version__
from benchgate.config import RunConfig
from benchgate.results.bundle import Bundle

# The order of `differing` and of the sentence in `describe`: the most common cause first.
NAMES = ("benchgate", "packages", "config")
# Bench settings that change the time of a step. steps, warmup, world_sizes, timeouts, drift_reference
# and peak_tflops change how long or how often it is measured, or what is computed from the times, not
# the speed of a step: a baseline of 60 steps still measures the same steps as a run of 100.
CONFIG_FIELDS = ("workload", "workload_args", "device", "precision", "compile", "threads_per_rank", "seed")
DIGEST_CHARS = 16  # 64 bits: a chance collision between two setups is not a practical concern
# benchgate's folders that run in the timed process: the bench worker and its helpers, the workloads.
HARNESS = ("measure", "workloads")
# The bench worker's record of what it imported, in metrics-ws<N>.json (record_loaded).
LOADED = "loaded"

# The first words of `describe`: a row's note that the run's setup is not its baseline run's.
SETUP_CHANGED = "the setup differs from the baseline run's"
_PLAIN_WORDS = {
    "benchgate": "another benchgate (its harness or its bundled workloads)",
    "packages": "other packages loaded by the bench (or another Python)",
    "config": "another bench configuration (workload, its arguments, device, precision, compile, threads, "
    "seed)",
}
_SEPARATORS = re.compile(r"[-_.]+")


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        # Length-framed, so that ["ab", "c"] and ["a", "bc"] never hash alike.
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:DIGEST_CHARS]


def _benchgate_version() -> str:
    try:
        return importlib.metadata.version("benchgate")
    except importlib.metadata.PackageNotFoundError:  # imported from a source tree, not installed
        return __version__


def _source_parts() -> list[bytes]:
    # The code that actually runs: the imported package's files, whatever the distribution's metadata
    # says (an editable install changes its code without changing its version). Only the folders the
    # timed process runs (HARNESS): a change to the CLI or the report is no change of the measurement.
    root = Path(__file__).resolve().parents[1]  # the benchgate package
    parts = [_benchgate_version().encode()]
    files = (p for folder in HARNESS for p in (root / folder).rglob("*.py"))
    for rel in sorted(p.relative_to(root).as_posix() for p in files):
        parts += [rel.encode(), (root / rel).read_bytes()]
    return parts


def _header(dist: importlib.metadata.Distribution) -> tuple[str | None, str | None]:
    # Name and Version from the metadata file's header lines. `dist.metadata` parses the whole file
    # (long descriptions included) with the email parser: ~1 ms a distribution, 6x slower than this
    # for the ~150 of a torch + mlflow environment. Header fields are never folded for these two.
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    name = version = None
    for line in text.splitlines():
        if not line:  # the end of the header
            break
        key, _, value = line.partition(":")
        if key == "Name" and name is None:
            name = value.strip()
        elif key == "Version" and version is None:
            version = value.strip()
    return name, version


def _packages() -> list[str]:
    """Sorted `name==version` of the importable distributions."""
    seen: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name, version = _header(dist)
        if not name:  # a broken or half-removed install: nothing to name it by
            continue
        key = _SEPARATORS.sub("_", name).lower()
        # distributions() walks sys.path in order; the first of a name is the one imports find.
        seen.setdefault(key, version or "")
    return sorted(f"{name}=={version}" for name, version in seen.items())


def _interpreter() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


def _packages_digest(python: str, packages: list[str]) -> str:
    # The interpreter first, then sorted name==version: the layout capture_fingerprints always used.
    return _digest([python.encode(), *(p.encode() for p in sorted(set(packages)))])


def _config_json(config: RunConfig) -> str:
    settings = config.bench.model_dump(mode="json", include=set(CONFIG_FIELDS))
    if not settings["compile"]:
        # An eager run digests as it did before bench.compile existed: stored baselines still match.
        del settings["compile"]
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


def capture_fingerprints(config: RunConfig) -> dict[str, str]:
    """One 16-hex-character digest per thing A/B holds fixed: benchgate, packages, config."""
    return {
        "benchgate": _digest(_source_parts()),
        # A new interpreter changes speed as a package bump does, and A/B runs both sides on it too.
        "packages": _packages_digest(_interpreter(), _packages()),
        "config": _digest([_config_json(config).encode()]),
    }


def fingerprint_details(config: RunConfig) -> dict[str, str]:
    """What the digests were taken of, readable, for messages: versions, package count, config JSON."""
    return {
        "benchgate_version": _benchgate_version(),
        "python": _interpreter(),
        "packages": str(len(_packages())),
        "config": _config_json(config),
    }


def differing(baseline: dict[str, str] | None, current: dict[str, str] | None) -> list[str]:
    """The fingerprints recorded on both sides whose values differ, known names first in NAMES order.

    A run recorded before fingerprints existed has none: unknown is not "different", so a side that is
    None or empty, or a name one side lacks, yields nothing.
    """
    if not baseline or not current:
        return []
    shared = set(baseline) & set(current)
    # Names a later benchgate may add still count, after the known ones, in a fixed order.
    ordered = [n for n in NAMES if n in shared] + sorted(shared - set(NAMES))
    return [n for n in ordered if baseline[n] != current[n]]


def describe(names: list[str]) -> str:
    """One clause for a row's note: which held-fixed things changed since the baseline run."""
    if not names:
        return ""
    words = [_PLAIN_WORDS.get(n, f"another {n} fingerprint") for n in names]
    listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
    return f"{SETUP_CHANGED}: the baseline run had {listed}"


def loaded_distributions(
    modules: Iterable[str],
    providers: Mapping[str, Sequence[str]],
    version: Callable[[str], str | None],
) -> list[str]:
    """Sorted `name==version` of the distributions that provide the top-level `modules`.

    `providers`: top-level import name -> distribution names (importlib.metadata.
    packages_distributions()); `version`: a distribution's installed version, None where it is gone.
    Names are normalised as `_packages` does; benchgate is left out (its own digest covers it), and so
    is a module no distribution provides (the standard library, the code under test)."""
    found: dict[str, str] = {}
    for module in modules:
        for dist in providers.get(module, ()):
            key = _SEPARATORS.sub("_", dist).lower()
            if key == "benchgate" or key in found:
                continue
            installed = version(dist)
            if installed is not None:
                found[key] = installed
    return sorted(f"{name}=={v}" for name, v in found.items())


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _module_root(module: object) -> str | None:
    where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", None) or []), None)
    return str(Path(where).resolve()) if where else None


def record_loaded(source_paths: Sequence[str] = ()) -> dict[str, Any]:
    """What this process has imported, for its metrics file ("loaded"): the interpreter and the
    distributions behind its top-level modules. Modules imported from `source_paths` are the code under
    test, which A/B takes from each side's checkout, so their distribution (an editable install of the
    user's project) does not count. Costs about half a second (packages_distributions reads every
    distribution's file list): the bench takes it after its timed steps."""
    roots = [Path(p).resolve() for p in source_paths]
    modules = []
    for name, module in list(sys.modules.items()):
        if "." in name:
            continue
        root = _module_root(module)
        if root is not None and any(Path(root).is_relative_to(r) for r in roots):
            continue
        modules.append(name)
    providers = importlib.metadata.packages_distributions()
    return {
        "python": _interpreter(),
        "packages": loaded_distributions(modules, providers, _installed_version),
    }


def _loaded_records(metrics: Iterable[dict[str, Any]]) -> list[dict[str, Any]] | None:
    records = [m.get(LOADED) for m in metrics]
    if not records or not all(isinstance(r, dict) and isinstance(r.get("packages"), list) for r in records):
        return None  # a launch without the record (a run written before it existed): not known
    return [r for r in records if isinstance(r, dict)]


def loaded_packages(metrics: Iterable[dict[str, Any]]) -> tuple[str, list[str]] | None:
    """The interpreter and the union of the distributions every bench launch of a run loaded (each
    metrics-ws<N>.json's "loaded"); None where a launch did not record them."""
    records = _loaded_records(metrics)
    if records is None:
        return None
    return str(records[0].get("python", "")), sorted({str(p) for r in records for p in r["packages"]})


def of_run(run: Bundle) -> dict[str, str] | None:
    """The run's fingerprints with "packages" taken of what its benches loaded, where they recorded it;
    env.json's as they are otherwise (None where it has none)."""
    prints = run.env.get("fingerprints")
    if not isinstance(prints, dict):
        return None
    loaded = loaded_packages(run.metrics.values())
    if loaded is None or "packages" not in prints:
        return dict(prints)
    return {**prints, "packages": _packages_digest(*loaded)}


def compared(baseline: Bundle, current: Bundle) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """Both runs' fingerprints as they are compared: of what the benches loaded where both runs
    recorded it (`of_run`), else env.json's on both sides (a baseline from before the record existed
    digested every installed distribution, and so did this run's env stage)."""
    runs = (baseline, current)
    if all(loaded_packages(run.metrics.values()) is not None for run in runs):
        return of_run(baseline), of_run(current)
    base, cur = baseline.env.get("fingerprints"), current.env.get("fingerprints")
    return (dict(base) if isinstance(base, dict) else None), (dict(cur) if isinstance(cur, dict) else None)
