"""Fingerprints of what the interleaved A/B decision holds fixed, so the gate knows when it is blind.

A/B runs the base commit (A) and the candidate (B) side by side, but both sides run *this* installed
benchgate, the candidate's configuration and the candidate's installed packages; only the user's
workload code comes from each side's checkout. A slowdown caused by

    - benchgate's own code (its harness, or a workload bundled under `benchgate.workloads`),
    - a dependency bump (torch, numpy, ... or the Python interpreter), or
    - a change of the bench settings that set per-step speed (workload, its arguments, device,
      precision, threads per rank, seed)

is therefore the same on both sides: A/B becomes an A/A comparison and PASSes. Only the comparison with
the stored baseline, measured earlier, can see such a change. Each run records one short digest per
thing A/B holds fixed (env.json "fingerprints", MLflow tags `benchgate.fingerprint.<name>`); when the
baseline's and the current run's differ, an A/B PASS says nothing about that change and the gate can
say so (`differing`, `describe`).

Digests are sha256 over sorted, length-framed bytes: the same inputs give the same value in every
process (no `hash()`, whose value changes with PYTHONHASHSEED) and on every machine.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
from pathlib import Path

from benchgate._version import __version__
from benchgate.config import RunConfig

# The order of `differing` and of the sentence in `describe`: the most common cause first.
NAMES = ("benchgate", "packages", "config")
# Bench settings that change the time of a step. steps, warmup, world_sizes, timeouts, drift_reference
# and peak_tflops change how long or how often it is measured, or what is computed from the times, not
# the speed of a step: a baseline of 60 steps still measures the same steps as a run of 100.
CONFIG_FIELDS = ("workload", "workload_args", "device", "precision", "compile", "threads_per_rank", "seed")
DIGEST_CHARS = 16  # 64 bits: a chance collision between two setups is not a practical concern

_PLAIN_WORDS = {
    "benchgate": "another benchgate (its harness or its bundled workloads)",
    "packages": "other installed packages (or another Python)",
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
    # says (an editable install changes its code without changing its version).
    root = Path(__file__).resolve().parents[1]  # the benchgate package
    parts = [_benchgate_version().encode()]
    for rel in sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")):
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
        "packages": _digest([_interpreter().encode(), *(p.encode() for p in _packages())]),
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
    """One sentence for a compare row's note: which held-fixed things changed since the baseline."""
    if not names:
        return ""
    words = [_PLAIN_WORDS.get(n, f"another {n} fingerprint") for n in names]
    listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
    return (
        f"A/B cannot see this change: the baseline run had {listed}; re-measure the baseline with this setup"
    )
