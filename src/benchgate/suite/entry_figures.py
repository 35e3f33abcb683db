"""A suite's output directory read back: suite.json, and the figures the Pareto view needs from each
finished entry's own result directory (read with results/bundle.py, as compare reads them).

    tokens/s     the run's tokens/s (results/figures.RUN_TOKENS_PER_S), at one world size for every entry,
                 with the relative width of its step rates' p50 interval (the metrics' p50_ci_low/high)
                 as its measured spread; images/s or clips/s where the workloads count those
                 (their `unit`), and only the entries of the most common unit are plotted: one axis
    perplexity   eval.json's, absent where the entry ran without eval or its workload has no eval hook,
                 and refused where the eval did not measure the entry's variant: another precision than
                 the bench's, or other batches than the variant's batch_size (an eval written before
                 evals followed them; `perplexity_missing` says which)
    peak memory  metrics-ws<N>.json's memory.peak_bytes, at the same world size as tokens/s

suite.json is checked for the fields read here only; the suite runner owns the rest of it.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchgate.errors import BadInputError, ConfigError
from benchgate.kit.files import read_json_object
from benchgate.results.bundle import Bundle, Name, load_bundle
from benchgate.results.figures import RUN_TOKENS_PER_S, bench_figures, counted_unit, rate_name

SUITE_FILE = "suite.json"
OTHER_UNIT = "it counts"  # how the reason of an entry left off the plot for its unit begins
_SHORT = reprlib.Repr()
_SHORT.maxstring = 60


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: Name
    state: Literal["pending", "running", "done", "skipped", "error"]
    out: str
    verdict: str | None = None
    error: str | None = None
    variant: dict[str, Any] = Field(default_factory=dict)


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
    tokens_per_s_spread_pct: float | None = None
    perplexity_missing: str | None = None


@dataclass(frozen=True)
class SuiteFigures:
    suite: str
    directory: Path
    entries: list[EntryFigures]
    # The world size every plotted entry is read at, or None where the entries share none (then each is
    # read at its own largest, and the axis says so).
    common_world_size: int | None
    rate: str = "tokens/s"  # the plotted entries' speed, named after what their steps count


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


def spread_pct(summary: dict[str, Any]) -> float | None:
    """Half the width of a p50's interval, in percent of the p50 (a metrics file's `tokens_per_s`)."""
    values = [summary.get(key) for key in ("p50", "p50_ci_low", "p50_ci_high")]
    numbers = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if len(numbers) != 3 or numbers[0] <= 0:
        return None
    p50, low, high = numbers
    return 100.0 * abs(high - low) / 2.0 / p50


def eval_mismatch(variant: dict[str, Any], bench_precision: Any, evaluation: dict[str, Any]) -> str | None:
    """Why `evaluation` (an eval.json) is not a measurement of the entry's variant, or None where it is.

    An eval trains the model afresh (measure/evaluate.py): at the bench's precision, on batches of
    eval.batch_size, which a suite sets to the variant's batch_size. Evals written before either was
    followed ran in fp32 and on eval.batch_size alone; such a perplexity would give an fp32 figure to a
    bf16 entry, and the one figure to every batch size."""
    settings = evaluation.get("settings") or {}
    ran_in = settings.get("precision", "fp32")  # said only where it is not fp32
    if isinstance(bench_precision, str) and ran_in != bench_precision:
        return f"no perplexity of this variant (its eval ran in {ran_in}, its bench in {bench_precision})"
    batch = variant.get("batch_size")
    if isinstance(batch, int) and settings.get("batch_size") != batch:
        return (
            f"no perplexity of this variant (its eval trained on batches of {settings.get('batch_size')}, "
            f"the variant's batch_size is {batch})"
        )
    return None


def _figures(entry: _Entry, out: Path, bundle: Bundle, world_size: int) -> EntryFigures:
    metrics = bundle.metrics[world_size]
    evaluation: dict[str, Any] = bundle.eval or {}
    perplexity = evaluation.get("perplexity")
    missing = None
    if perplexity is not None:
        missing = eval_mismatch(entry.variant, metrics.get("precision"), evaluation)
    return EntryFigures(
        name=entry.name,
        state=entry.state,
        verdict=entry.verdict,
        out=out,
        world_size=world_size,
        tokens_per_s=bench_figures(metrics)[RUN_TOKENS_PER_S],
        perplexity=None if perplexity is None or missing else float(perplexity),
        peak_memory_bytes=float(metrics["memory"]["peak_bytes"]),
        tokens_per_s_spread_pct=spread_pct(metrics.get("tokens_per_s") or {}),
        perplexity_missing=missing,
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
        if entry.state not in ("done", "skipped"):  # skipped: measured before, its results kept
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
    unit = plotted_unit(bundles, skipped)
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
    return SuiteFigures(suite.suite, directory, entries, common, rate_name({"unit": unit}))


def _unit(bundle: Bundle) -> str:
    return counted_unit(bundle.metrics[max(bundle.metrics)])


def plotted_unit(bundles: dict[str, Bundle], skipped: dict[str, str]) -> str:
    """The unit most entries count (the first entry's on a tie). Entries of another move from `bundles`
    to `skipped`: a suite of images and clips per second would put two measures on one axis."""
    units = [_unit(bundle) for bundle in bundles.values()]
    most = max(units, key=units.count)  # max keeps the first of equal counts
    for name, bundle in list(bundles.items()):
        unit = _unit(bundle)
        if unit != most:
            skipped[name] = f"{OTHER_UNIT} {unit} per step, the plotted entries {most}: not on one axis"
            del bundles[name]
    return most
