"""suite.toml, read and checked: the [suite] table, and each [[entries]] table as a planned gate run.

Two kinds of mistake, handled apart (docs/suites.md):

- The file itself or its [suite] table (not TOML, no name, a config file that does not load): a
  ConfigError naming the file and the field. Nothing runs (exit 2).
- One entry (a duplicate or unusable name, an unknown variant key, a bad variant value, a per-entry
  config that does not validate): that entry's error, naming `entries[i] '<name>'`, the field and the
  value. The suite still runs the other entries and exits 2 at the end, so one typo does not cost the
  results of every other entry.

`entry_config` builds an entry's RunConfig in a fixed order: the [suite] config file, the entry's own
`config` table over it, then its workload and arguments, its variant (precision -> bench.precision,
which the eval follows too; compile -> bench.compile; batch_size -> the workload argument batch_size and
eval.batch_size, so that the eval trains each variant on its own batches), bench.name = the entry's
name (its own baseline and history, even when two entries share a workload), and
out = <suite out>/<entry name>. The command line's settings (tracking) go over all of them.
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from benchgate.config import STORED_NAME, RunConfig, parse_config, shown
from benchgate.config_types import Bool, Int
from benchgate.errors import ConfigError

NAME_RULE = "up to 200 letters, digits, '.', '_' or '-', starting with a letter or digit"
# The suite's own files in its --out, beside the entries' directories: no entry may be named as one.
SUITE_OUTPUTS = ("suite.json", "suite.md", "pareto.png", "pareto.md", "suite.html")
# Keys of an entry's `config` table that the entry sets itself, or that must be one for the whole suite
# (its gate runs nest under one MLflow parent, in one experiment).
RESERVED_ENTRY_CONFIG = {
    "bench.workload": "the entry's workload",
    "bench.workload_args": "the entry's args",
    "bench.name": "the entry's name",
    "out": "the suite's --out",
    "tracking": "the [suite] config file (one MLflow experiment for the whole suite)",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _stored_name(value: str) -> str:
    if not STORED_NAME.fullmatch(value):
        raise ValueError(f"expected {NAME_RULE}")
    return value


class SuiteTable(_Strict):
    """The [suite] table."""

    name: str = Field(description="The suite's name: its MLflow parent's, and its tag benchgate.suite.")
    config: str | None = Field(None, description="A benchgate config file every entry starts from.")
    family: Literal["bonferroni", "none"] = Field(
        "bonferroni",
        description="How the suite holds its family-wise false FAIL (suite/family.py): bonferroni splits "
        "each entry's error budget over the suite's timing decisions; none keeps each entry's and states "
        "the bound that leaves.",
    )

    incremental: Bool = Field(
        False,
        description="Skip the entries whose results in --out were measured with this machine profile and "
        "the same settings (suite/incremental.py); a coverage suite's (`benchgate suite plan --hf`).",
    )

    _name = field_validator("name")(_stored_name)


class Variant(_Strict):
    """How an entry's workload is run; every key is optional."""

    precision: Literal["auto", "fp32", "bf16"] | None = None
    compile: Bool | None = None
    batch_size: Int | None = Field(None, gt=0)


class SuiteEntry(_Strict):
    """One [[entries]] table: a gate run of one workload, with its arguments and variant."""

    name: str
    workload: str
    args: dict[str, Any] = Field(default_factory=dict)
    variant: Variant = Field(default_factory=Variant)
    config: dict[str, Any] = Field(default_factory=dict)

    _name = field_validator("name")(_stored_name)


@dataclass(frozen=True)
class PlannedEntry:
    """An entry as written, and either its checked form or why it cannot run."""

    index: int
    raw: dict[str, Any]
    # What suite.json and the table call it, unique in the suite: its name where that is usable (and
    # then its results directory, <out>/<name>), else `entries[i]`.
    name: str
    entry: SuiteEntry | None = None
    error: str | None = None

    @property
    def where(self) -> str:
        """How messages name the entry: `entries[1] 'gpt-tiny-bf16'`."""
        return _where(self.index, self.raw)


def _where(index: int, raw: Any) -> str:
    name = raw.get("name") if isinstance(raw, dict) else None
    return f"entries[{index}] {name!r}" if isinstance(name, str) else f"entries[{index}]"


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    path: Path
    # The [suite] config file's tables (validated on their own), or {} without one.
    config: dict[str, Any] = field(default_factory=dict)
    config_path: Path | None = None
    entries: list[PlannedEntry] = field(default_factory=list)
    family: Literal["bonferroni", "none"] = "bonferroni"
    incremental: bool = False


def load_suite(path: Path) -> SuiteSpec:
    """Read and check `path`; a ConfigError for the file or its [suite] table, entries planned one by one."""
    path = Path(path)
    data = _read_toml(path, "suite file")
    unknown = sorted(set(data) - {"suite", "entries"})
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown table (a suite file has [suite] and [[entries]])")
    if not isinstance(data.get("suite"), dict):
        raise ConfigError(f'{path}: suite: missing (a [suite] table with name = "..." comes first)')
    try:
        table = SuiteTable.model_validate(data["suite"])
    except ValidationError as e:
        raise ConfigError(f"{path}: {validation_text(e, SuiteTable, 'suite')}") from None
    config: dict[str, Any] = {}
    config_path = None
    if table.config is not None:
        config_path = (path.parent / table.config).resolve()
        config = _read_toml(config_path, f"{path}: suite.config")
        try:
            parse_config(config)
        except ConfigError as e:
            raise ConfigError(f"{path}: suite.config {config_path}: {e}") from None
    raw_entries = data.get("entries", [])
    if not isinstance(raw_entries, list) or not raw_entries:
        raise ConfigError(f"{path}: entries: none (add one [[entries]] table per workload and variant)")
    planned: list[PlannedEntry] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_entries):
        entry = _plan(index, raw, seen)
        planned.append(entry)
    return SuiteSpec(
        table.name, path.resolve(), config, config_path, planned, table.family, table.incremental
    )


def _plan(index: int, raw: Any, seen: dict[str, int]) -> PlannedEntry:
    """One entry checked; `seen` holds the names given so far (name -> index), and gets this one's."""
    table = raw if isinstance(raw, dict) else {}
    written = table.get("name")
    usable = (
        isinstance(written, str)
        and STORED_NAME.fullmatch(written) is not None
        and written not in seen
        and written not in SUITE_OUTPUTS
    )
    name = str(written) if usable else f"entries[{index}]"
    entry, error = _checked(index, raw, seen)
    seen.setdefault(name, index)
    return PlannedEntry(index, table, name, entry, error)


def _checked(index: int, raw: Any, seen: dict[str, int]) -> tuple[SuiteEntry | None, str | None]:
    """The entry, or why it cannot run (naming it, the field and the value)."""
    where = _where(index, raw)
    if not isinstance(raw, dict):
        return None, f"{where}: got {shown(raw)} (expected a table)"
    try:
        entry = SuiteEntry.model_validate(raw)
    except ValidationError as e:
        return None, f"{where}: {validation_text(e, SuiteEntry)}"
    if entry.name in seen:
        return None, (
            f"{where}: name: got {entry.name!r}, the name of entries[{seen[entry.name]}] too "
            "(each entry's name keys its own baseline and results)"
        )
    if entry.name in SUITE_OUTPUTS:
        return None, f"{where}: name: got {entry.name!r} (a file the suite writes)"
    for dotted, owner in RESERVED_ENTRY_CONFIG.items():
        if has_setting(entry.config, dotted):
            return None, f"{where}: config.{dotted}: set by {owner}, not in config"
    return entry, None


def entry_config(
    spec: SuiteSpec, planned: PlannedEntry, out_root: Path, overrides: Mapping[str, Any] | None = None
) -> RunConfig:
    """The RunConfig of one runnable entry (module docstring: the order); a ConfigError names it."""
    entry = planned.entry
    if entry is None:
        raise ConfigError(planned.error or f"{planned.where}: not runnable")
    data = merged_tables(spec.config, entry.config)
    bench = data.setdefault("bench", {})
    args = dict(entry.args)
    variant = entry.variant
    if variant.batch_size is not None:
        args["batch_size"] = variant.batch_size
        # The eval trains the model afresh on its own windows: on the variant's batch size too, or every
        # batch size of a workload would get the one perplexity (measure/evaluate.py follows the precision).
        if isinstance(data.setdefault("eval", {}), dict):
            data["eval"]["batch_size"] = variant.batch_size
    bench.update(workload=entry.workload, workload_args=args, name=entry.name)
    if variant.precision is not None:
        bench["precision"] = variant.precision
    if variant.compile is not None:
        bench["compile"] = variant.compile
    data["out"] = str(Path(out_root) / entry.name)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            *parents, leaf = dotted.split(".")
            node = data
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = value
    try:
        return parse_config(data)
    except ConfigError as e:
        raise ConfigError(f"{planned.where}: {e}") from None


def shown_entry(planned: PlannedEntry) -> dict[str, Any]:
    """What suite.json says of an entry as written: workload, args, variant (JSON-safe, as the file had)."""
    raw = planned.raw

    def json_safe(value: Any, empty: Any) -> Any:
        try:
            return json.loads(json.dumps(value, default=str))
        except (TypeError, ValueError):
            return empty

    workload = raw.get("workload")
    return {
        "workload": workload if isinstance(workload, str) else None,
        "args": json_safe(raw["args"], {}) if isinstance(raw.get("args"), dict) else {},
        "variant": json_safe(raw["variant"], {}) if isinstance(raw.get("variant"), dict) else {},
    }


def validation_text(error: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """pydantic's errors as `field: got value (why)`, an unknown key naming the keys that are allowed."""
    lines = []
    for item in error.errors():
        location = [prefix, *(str(p) for p in item["loc"])] if prefix else [str(p) for p in item["loc"]]
        where = ".".join(location) or "entry"
        why = item["msg"]
        if item["type"] == "extra_forbidden":
            owner = Variant if item["loc"][0] == "variant" and model is SuiteEntry else model
            why = f"unknown key; expected one of: {', '.join(owner.model_fields)}"
        elif item["type"] == "missing":
            lines.append(f"{where}: missing")
            continue
        lines.append(f"{where}: got {shown(item.get('input'))} ({why})")
    return "; ".join(lines)


def has_setting(table: Mapping[str, Any], dotted: str) -> bool:
    """Whether `table` (shaped like the TOML file) sets `dotted`, e.g. "bench.workload"."""
    node: Any = table
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


def merged_tables(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over`'s keys over a deep copy of `base`, table by table."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged_tables(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what}: file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what}: cannot read {path} ({e})") from None
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{what}: {path} is not valid TOML ({e})") from None
