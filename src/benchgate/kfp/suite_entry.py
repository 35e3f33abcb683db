"""A suite's entries as the cluster carries them: one JSON object in a string per entry, the gate
pipeline's `suite_entry` parameter (so this module sits beside the gate pipeline, which reads it; the
suite pipeline in kfp/suite/ writes it).

The suite pipeline takes its entries as `entries: list` of JSON strings and hands each, whole, to one
gate pipeline as `suite_entry` (kfp.local 2.17 passes a loop item's subfield as a literal placeholder
string, and KFP turns the numbers inside a dict parameter into floats: a string keeps 512 an int, as
the gate pipeline's `workload_args` does). One entry:

    {"name": "gpt-tiny-bf16", "workload": "benchgate.workloads.gpt:make_workload",
     "workload_args": {"size": "tiny", "batch_size": 8}, "variant": {"precision": "bf16"},
     "config": {"bench": {"precision": "bf16"}, "eval": {"enabled": false}}}

`config` is the entry's own config table with its variant applied (precision -> bench.precision,
compile -> bench.compile, batch_size -> eval.batch_size), `workload_args` its args with the variant's
batch_size: the same expansion as a local suite's (`suite.spec.entry_config`), so an entry is gated
alike here and on a cluster. `variant` is kept as written, for suite.json. In the env task the entry
goes over the pipeline's own parameters (`apply_entry`): its workload and arguments replace the
pipeline's, its config goes over the pipeline's `config`, and bench.name is the entry's name, under
which its results are stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from benchgate.config import shown
from benchgate.errors import ConfigError
from benchgate.kfp.params import workload_args_parameter
from benchgate.suite.spec import (
    RESERVED_ENTRY_CONFIG,
    SUITE_OUTPUTS,
    SuiteEntry,
    SuiteSpec,
    has_setting,
    merged_tables,
    validation_text,
)

ENTRY_KEYS = ("name", "workload", "workload_args", "variant", "config")


def entry_object(entry: SuiteEntry) -> dict[str, Any]:
    """One checked entry, expanded as the cluster carries it (module docstring)."""
    args = dict(entry.args)
    variant = entry.variant.model_dump(exclude_none=True)
    if "batch_size" in variant:
        args["batch_size"] = variant["batch_size"]
    bench = {key: variant[key] for key in ("precision", "compile") if key in variant}
    overrides: dict[str, Any] = {"bench": bench} if bench else {}
    if "batch_size" in variant:
        # The eval follows the variant's batch size, as a local suite's entries do (suite/spec.py).
        overrides["eval"] = {"batch_size": variant["batch_size"]}
    config = merged_tables(entry.config, overrides) if overrides else dict(entry.config)
    return {
        "name": entry.name,
        "workload": entry.workload,
        "workload_args": args,
        "variant": variant,
        "config": config,
    }


def entry_parameter(entry: SuiteEntry) -> str:
    """One item of the suite pipeline's `entries`: the expanded entry as JSON text."""
    expanded = entry_object(entry)
    # The arguments' own check (an int too long for JSON, say) names workload_args.
    workload_args_parameter(expanded["workload_args"])
    return json.dumps(expanded, sort_keys=True)


def checked_entries(raw: Sequence[Any], where: str) -> list[SuiteEntry]:
    """Entries as written (suite.toml's [[entries]] tables, a BenchmarkRun's spec.suite.entries), each
    checked as a local suite checks it; a ConfigError names `<where>[i] 'name'`, the field and value.

    A local suite runs the good entries and reports the bad one; a cluster refuses the whole suite
    before submitting, as nothing on the cluster is worth starting for a suite with a typo."""
    if not raw:
        raise ConfigError(f"{where}: none (a suite needs at least one entry)")
    entries: list[SuiteEntry] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw):
        name = item.get("name") if isinstance(item, Mapping) else None
        label = f"{where}[{index}] {name!r}" if isinstance(name, str) else f"{where}[{index}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{label}: got {shown(item)} (expected a table of name, workload, ...)")
        try:
            entry = SuiteEntry.model_validate(dict(item))
        except ValidationError as e:
            raise ConfigError(f"{label}: {validation_text(e, SuiteEntry)}") from None
        if entry.name in seen:
            raise ConfigError(
                f"{label}: name: got {entry.name!r}, the name of {where}[{seen[entry.name]}] too (each "
                "entry's name keys its own baseline and results)"
            )
        if entry.name in SUITE_OUTPUTS:
            raise ConfigError(f"{label}: name: got {entry.name!r} (the name of a file the suite writes)")
        seen[entry.name] = index
        for dotted, owner in RESERVED_ENTRY_CONFIG.items():
            if has_setting(entry.config, dotted):
                raise ConfigError(f"{label}: config.{dotted}: set by {owner}, not in config")
        entries.append(entry)
    return entries


def spec_entries(spec: SuiteSpec) -> list[SuiteEntry]:
    """A loaded suite file's entries, every one runnable; else a ConfigError naming the first that is
    not (its own message: `entries[i] 'name': field: got ...`)."""
    for planned in spec.entries:
        if planned.entry is None:
            raise ConfigError(f"{spec.path}: {planned.error}")
    return [planned.entry for planned in spec.entries if planned.entry is not None]


def read_entry(text: str) -> dict[str, Any]:
    """The `suite_entry` parameter decoded and checked; a ConfigError names it and what is wrong."""
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ConfigError(
            f"suite_entry: got {shown(text)} (expected one entry as a JSON object: {e})"
        ) from None
    if not isinstance(decoded, dict) or set(decoded) != set(ENTRY_KEYS):
        raise ConfigError(
            f"suite_entry: got {shown(text)} (expected a JSON object of exactly {', '.join(ENTRY_KEYS)}, "
            "as `benchgate submit --suite` writes it)"
        )
    raw = {
        "name": decoded["name"],
        "workload": decoded["workload"],
        "args": decoded["workload_args"],
        "config": decoded["config"],
    }
    (entry,) = checked_entries([raw], "suite_entry")
    return {**decoded, "name": entry.name}


def apply_entry(parameters: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """The env task's parameters (those of `params.config_from_parameters`) with `entry` over them:
    its workload and arguments instead of the pipeline's, its config over the pipeline's, its name as
    bench.name."""
    config = parameters.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"config: got {shown(config)} (expected a dict shaped like the TOML file's tables)")
    merged = merged_tables(config, entry["config"])
    merged = merged_tables(merged, {"bench": {"name": entry["name"]}})
    return {
        **parameters,
        "config": merged,
        "workload": entry["workload"],
        "workload_args": workload_args_parameter(entry["workload_args"]),
    }


def entry_run_key(kfp_run_id: str, name: str) -> str:
    """The MLflow key of one entry's gate run: the KFP run's id alone would be every entry's."""
    return f"{kfp_run_id}-{name}"
