"""A suite's output directory read back: suite.json, and the figures the Pareto view needs from each
finished entry's own result directory (read with results/bundle.py, as compare reads them).

    tokens/s     p50 over the measured steps (results/figures.py), at one world size for every entry
    perplexity   eval.json's, absent where the entry ran without eval or its workload has no eval hook
    peak memory  metrics-ws<N>.json's memory.peak_bytes, at the same world size as tokens/s

suite.json is checked for the fields read here only; the suite runner owns the rest of it.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from benchgate.errors import BadInputError, ConfigError
from benchgate.kit.files import read_json_object
from benchgate.results.bundle import Bundle, Name, load_bundle
from benchgate.results.figures import bench_figures

SUITE_FILE = "suite.json"
_SHORT = reprlib.Repr()
_SHORT.maxstring = 60


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: Name
    state: Literal["pending", "running", "done", "error"]
    out: str
    verdict: str | None = None
    error: str | None = None


class _Suite(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    suite: Name
    entries: list[_Entry]


@dataclass(frozen=True)
class EntryFigures:
    """One entry of suite.json with what its directory holds. `skipped` says why an entry has no figures
    (not finished, or its results unreadable); `world_size` is the one tokens/s and memory were read at."""

    name: str
    state: str
    verdict: str | None
    out: Path
    world_size: int | None = None
    tokens_per_s: float | None = None
    perplexity: float | None = None
    peak_memory_bytes: float | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class SuiteFigures:
    suite: str
    directory: Path
    entries: list[EntryFigures]
    # The world size every plotted entry is read at, or None where the entries share none (then each is
    # read at its own largest, and the axis says so).
    common_world_size: int | None


def _describe(error: ValidationError) -> str:
    item = error.errors()[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"])
    where = where.removeprefix(".")  # the file's own path to the field: entries[2].state
    found = "nothing" if item["type"] == "missing" else _SHORT.repr(item["input"])
    return f"{where}: got {found} ({item['msg'].removeprefix('Value error, ')})"


def read_suite(directory: Path) -> _Suite:
    """suite.json of `directory`, checked; ConfigError (exit 2) naming the file and the bad field."""
    path = Path(directory) / SUITE_FILE
    if not path.exists():
        raise ConfigError(f"{path}: file not found (`benchgate suite run --out DIR` writes it into DIR)")
    try:
        data = read_json_object(path)
    except ValueError as e:  # it names the file: unreadable, not JSON, not an object
        raise ConfigError(str(e)) from None
    try:
        suite = _Suite.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{path}: {_describe(e)}") from None
    names = [entry.name for entry in suite.entries]
    for i, entry in enumerate(suite.entries):
        if entry.name in names[:i]:
            raise ConfigError(f"{path}: entries[{i}].name: got {entry.name!r} (more than one entry has it)")
        out = (Path(directory) / entry.out).resolve()
        if not out.is_relative_to(Path(directory).resolve()):
            raise ConfigError(
                f"{path}: entries[{i}].out: got {_SHORT.repr(entry.out)} "
                f"(expected a directory inside {directory})"
            )
    return suite


def choose_world_size(bundles: list[Bundle]) -> int | None:
    """The largest world size that every bundle ran, or None where they share none.

    Entries are compared with each other, never with themselves at another world size: tokens/s at ws=2
    is two ranks' throughput, so an entry run at [1, 2] would look twice as fast as one run at [1] if each
    were read at its own largest. The largest shared one is what a suite run with one [bench] world_sizes
    gives every entry alike, and it includes the cost of communication that ws=1 hides.
    """
    shared = set.intersection(*(set(b.metrics) for b in bundles)) if bundles else set()
    return max(shared) if shared else None


def _figures(entry: _Entry, out: Path, bundle: Bundle, world_size: int) -> EntryFigures:
    metrics = bundle.metrics[world_size]
    evaluation: dict[str, Any] = bundle.eval or {}
    perplexity = evaluation.get("perplexity")
    return EntryFigures(
        name=entry.name,
        state=entry.state,
        verdict=entry.verdict,
        out=out,
        world_size=world_size,
        tokens_per_s=bench_figures(metrics)["tokens_per_s_p50"],
        perplexity=None if perplexity is None else float(perplexity),
        peak_memory_bytes=float(metrics["memory"]["peak_bytes"]),
    )


def read_suite_figures(directory: Path) -> SuiteFigures:
    """Every entry of the suite in `directory`, with figures for those that finished. An entry that is
    not done, or whose directory cannot be read, is kept with the reason (its row says why it has no
    point); ConfigError (exit 2) naming the directory when no entry has figures at all."""
    directory = Path(directory)
    suite = read_suite(directory)
    bundles: dict[str, Bundle] = {}
    skipped: dict[str, str] = {}
    for entry in suite.entries:
        if entry.state != "done":
            skipped[entry.name] = f"state {entry.state}" + (f": {entry.error}" if entry.error else "")
            continue
        try:
            bundles[entry.name] = load_bundle(directory / entry.out)
        except BadInputError as e:  # a damaged entry costs its own point, not the whole view
            skipped[entry.name] = f"its results cannot be read: {e}"
    if not bundles:
        reasons = "; ".join(f"{name}: {why}" for name, why in skipped.items())
        reasons = reasons or "suite.json lists no entries"
        raise ConfigError(f"{directory}: no finished entry to plot ({reasons})")
    common = choose_world_size(list(bundles.values()))
    entries = []
    for entry in suite.entries:
        out = directory / entry.out
        if entry.name in skipped:
            why = skipped[entry.name]
            entries.append(EntryFigures(entry.name, entry.state, entry.verdict, out, skipped=why))
            continue
        bundle = bundles[entry.name]
        entries.append(_figures(entry, out, bundle, common or max(bundle.metrics)))
    return SuiteFigures(suite.suite, directory, entries, common)
