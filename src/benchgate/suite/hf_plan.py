"""`benchgate suite plan --hf KEY=VALUE ...`: a suite file with one entry per model type of a Hugging Face
family, for a coverage suite (docs/suites.md, "Every model type of a family").

    benchgate suite plan --hf task=masked-lm size=tiny

writes suite.toml: [suite] named after the family and its arguments, `incremental = true` (a type
already measured in the suite's --out with this machine profile and the same settings is skipped:
suite/incremental.py), and an [[entries]] table for every model type transformers maps in that family
(workloads/hf/tasks.py), each with the arguments given plus its `model_type`, named as the workload
names itself (`hf-bert-masked-lm-tiny`). A type whose arguments the workload refuses is still planned:
its entry is refused when the suite runs, with the reason, and the coverage report lists it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from benchgate.errors import BenchgateError, ConfigError

HF_WORKLOAD = "benchgate.workloads.hf:make_workload"
BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def hf_entries(args: dict[str, Any], only: Sequence[str] = ()) -> tuple[str, list[dict[str, Any]]]:
    """The suite's name and its entries: every model type of `args`' family (`task`, causal-lm by
    default), or those of `only`. A ConfigError names a bad family, size or type."""
    from benchgate.workloads.hf.sizes import SIZES
    from benchgate.workloads.hf.spec import parse_spec, task_named, workload_name
    from benchgate.workloads.hf.tasks import DEFAULT_TASK

    if "model_type" in args or "config" in args:
        raise ConfigError(
            "--hf: model_type and config are the entries' own: give the family's arguments only"
        )
    try:
        task = task_named(args.get("task", DEFAULT_TASK))
    except BenchgateError as e:
        raise ConfigError(f"--hf {e}") from None
    size = args.get("size")
    if size is not None and size not in SIZES:
        raise ConfigError(f"--hf size: got {size!r}; expected one of {', '.join(SIZES)}")
    unknown = sorted(set(only) - set(task.types))
    if unknown:
        raise ConfigError(f"--types: {unknown[0]!r} is not a {task.name} model type of transformers")
    types = [t for t in sorted(task.types) if not only or t in only]
    entries = []
    for model_type in types:
        entry_args = {**args, "task": task.name, "model_type": model_type}
        try:
            name = workload_name(parse_spec(entry_args))
        except BenchgateError:  # planned all the same: the suite refuses it with the reason
            name = "-".join(["hf", model_type, task.name, *([str(size)] if size else [])])
        entries.append({"name": name, "workload": HF_WORKLOAD, "args": entry_args})
    settings = [
        *([str(size)] if size else []),
        *(f"{k}{args[k]}" for k in sorted(args) if k not in ("task", "size")),
    ]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(["hf", task.name, *settings])), entries


def _value(value: Any) -> str:
    """A TOML value: strings, integers, floats and booleans (what workload arguments are)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a TOML basic string


def _table(values: dict[str, Any]) -> str:
    keys = (k if BARE_KEY.match(k) else json.dumps(k) for k in values)
    return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in zip(keys, values.values(), strict=True)) + " }"


def suite_toml(name: str, entries: list[dict[str, Any]], command: str, config: str | None = None) -> str:
    """The suite file's text (a header comment says how it was made)."""
    lines = [
        f"# {command}",
        f"# {len(entries)} entries, one per model type; rerun the command to pick up new ones.",
        "[suite]",
        f"name = {_value(name)}",
        *([f"config = {_value(config)}"] if config else []),
        "incremental = true   # skip types measured in --out with this machine profile and settings",
    ]
    for entry in entries:
        lines += [
            "",
            "[[entries]]",
            f"name = {_value(entry['name'])}",
            f"workload = {_value(entry['workload'])}",
            f"args = {_table(entry['args'])}",
        ]
    return "\n".join(lines) + "\n"
