"""Fuzzing the config loader: TOML files and command-line flags.

Whatever a user writes, the loader returns a RunConfig that can run, or raises ConfigError (exit 2) whose
message names a field; never any other exception. "Can run" is checked as far as the config goes: the
config survives JSON (config.json, the pipeline's parameters) and maps onto pipeline parameters that
the env task validates again.

Documents are generated as Python values and written as TOML by a small emitter below (the real
parser, tomllib, then reads them), so most are valid TOML of the config's shape with values of every
type; garbage text and bytes cover the rest. `derandomize=True`: CI sees the same examples every run,
so a failure here is a change in the code, not a new draw; the examples still span every strategy.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from datetime import datetime
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from benchgate.cli.main import app
from benchgate.config import RunConfig, load_config
from benchgate.config_types import MAX_INT
from benchgate.errors import ConfigError
from benchgate.kfp.params import config_from_parameters, parameters_from_config

FUZZ = settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

# --- values of every type TOML can hold, edge cases first -------------------------------------------

EDGE_INTS = st.sampled_from([0, 1, 2, 3, -1, 2**31, 2**53 - 1, 2**53, 2**63, 2**64, 10**30, -(2**63)])
EDGE_FLOATS = st.sampled_from([0.0, -0.0, 0.5, 1e-300, 1e300, math.inf, -math.inf, math.nan, 5e-324])
TEXT = st.text(max_size=30) | st.sampled_from(["", " ", "auto", "cpu", "m:f", "a:[/b]", "\x00", "ü/ß", ".."])
SCALARS = (
    st.integers()
    | EDGE_INTS
    | st.floats()
    | EDGE_FLOATS
    | st.booleans()
    | TEXT
    | st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31))
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=8,
)


def _fields(model: type[Any], prefix: str = "") -> dict[str, Any]:
    """Dotted field names of the config model: the keys a plausible document uses."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            out.update(_fields(annotation, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = annotation
    return out


ANNOTATIONS = _fields(RunConfig)
FIELDS = sorted(ANNOTATIONS)
# Values a user would plausibly write for some fields, so that many documents are valid configs.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "bench.steps": st.integers(0, 100),
    "bench.warmup": st.integers(-1, 20),
    "bench.world_sizes": st.sampled_from([[1], [1, 2], [2, 1], [1, 8], [2], [1, 2, 4], [], [0, 2]]),
    "bench.device": st.sampled_from(["auto", "cpu", "cuda", "tpu"]),
    "bench.precision": st.sampled_from(["auto", "fp32", "bf16", "fp8"]),
    "bench.seed": st.integers(-1, 2**33),
    "bench.timeout_s": st.floats(0, 1e7),
    "bench.workload": st.sampled_from(["m:f", "pkg.mod:make", "no_colon", "a b:c", ":f"]),
    "bench.workload_args": st.dictionaries(st.text(max_size=5), SCALARS, max_size=3),
    "eval.enabled": st.booleans(),
    "eval.seq_len": st.integers(0, 300),
    "gate.ab.steps": st.integers(0, 50),
    "gate.ab.min_rounds": st.integers(0, 10),
    "gate.ab.max_rounds": st.integers(0, 20),
    "gate.tolerances.throughput_drop_pct": st.floats(-10, 200),
    "gate.tolerances.confidence": st.floats(0, 1.5),
    "gate.update_baseline": st.sampled_from(["auto", "always", "never", "sometimes"]),
    "tracking.enabled": st.booleans(),
    "tracking.max_wait_s": st.floats(-1, 1e8),
    "out": st.sampled_from(["out", "", "results/run-1", "ü"]),
}


def _typed(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of a field's own type (TOML has no null, so None is never one)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _typed(args[0])
    if origin in (Union, UnionType):
        return st.one_of(*(_typed(a) for a in args))
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(_typed(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=5), _typed(args[1]), max_size=3)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        NoneType: st.nothing(),
        bool: st.booleans(),
        int: st.integers(0, 1000) | EDGE_INTS,
        float: st.floats(0, 1e4) | EDGE_FLOATS,
        str: TEXT,
        Path: st.sampled_from(["out", "a/b", "ü", ""]) | TEXT,
    }
    return simple[annotation]


def _nest(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for dotted, value in pairs:
        node = document
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return document


@st.composite
def plausible_documents(draw: st.DrawFn) -> dict[str, Any]:
    """Known fields only, each with a value of its type or one a user would plausibly write."""
    keys = draw(st.lists(st.sampled_from(FIELDS), max_size=10, unique=True))
    return _nest([(k, draw(PLAUSIBLE.get(k, _typed(ANNOTATIONS[k])))) for k in keys])


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A config-shaped document: known dotted fields (and now and then unknown ones) set to values."""
    document: dict[str, Any] = {}
    keys = draw(st.lists(st.sampled_from(FIELDS) | st.text(min_size=1, max_size=12), max_size=8))
    for dotted in keys:
        plausible = PLAUSIBLE.get(dotted)
        value = draw(plausible | VALUES if plausible is not None else VALUES)
        node = document
        *parents, leaf = dotted.split(".") if dotted in FIELDS else [dotted]
        for key in parents:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[leaf] = value
    return document


# --- a small TOML writer: everything tomllib reads back, including the values the config refuses -------


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key)


def _string(text: str) -> str:
    # JSON's escapes are TOML's, except that TOML also wants DEL escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        # Python will not write an int of more than 4300 digits in decimal; TOML's hex has no limit.
        return str(value) if abs(value) < 10**100 else (f"0x{value:x}" if value > 0 else "0")
    if isinstance(value, float):
        return "nan" if math.isnan(value) else {math.inf: "inf", -math.inf: "-inf"}.get(value, repr(value))
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items()) + "}"


def to_toml(document: dict[str, Any]) -> str:
    """Scalars at the top, then one [table] per section (its sub-tables inline)."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    for key, table in document.items():
        if isinstance(table, dict):
            lines.append(f"[{_key(key)}]")
            lines.extend(f"{_key(str(k))} = {_value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


# --- the property ------------------------------------------------------------------------------------


def names_a_field(message: str) -> bool:
    """Every refusal reads `<field>: got <value> (<why>)`, or `--config: ...` for the file itself."""
    return message.startswith("--config: ") or ": got " in message


def assert_runnable_or_refused(
    path: Path | None, overrides: dict[str, Any] | None = None
) -> RunConfig | None:
    try:
        config = load_config(path, overrides)
    except ConfigError as e:
        assert e.exit_code == 2
        assert names_a_field(str(e)), str(e)
        event("refused")
        return None
    event("a valid config")
    # A config that validates survives JSON, as config.json and the pipeline's parameters carry it ...
    assert RunConfig.model_validate_json(config.model_dump_json()) == config
    # ... and maps onto pipeline parameters that the env task validates again.
    world_sizes = config.bench.world_sizes or [1, 2]
    assert (
        config_from_parameters(**parameters_from_config(config, world_sizes)).bench.world_sizes == world_sizes
    )
    for number in _numbers(config.model_dump()):
        assert math.isfinite(number) and (isinstance(number, float) or abs(number) <= MAX_INT)
    return config


def _numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []


@contextlib.contextmanager
def written(text: str | bytes) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        yield path


@FUZZ
@given(plausible_documents() | documents())
@example({"bench": {"steps": 3, "world_sizes": [1, 2]}, "gate": {"ab": {"steps": 3, "min_rounds": 2}}})
@example({"bench": {"steps": 2}})
@example({"bench": 3, "gate": {"tolerances": {"loss_slope_max": math.nan}}})
@example({"bench": {"workload_args": {"n": 10**5000}}})
def test_a_toml_file_loads_as_a_runnable_config_or_a_config_error(document: dict[str, Any]) -> None:
    with written(to_toml(document)) as path:
        assert_runnable_or_refused(path)


@FUZZ
@given(
    plausible_documents() | documents(),
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=12), VALUES, max_size=4),
)
@example({"bench": 3}, {"bench.steps": 10})
@example({}, {"bench.world_sizes": [2, 1]})
def test_flags_over_a_toml_file_load_as_a_runnable_config_or_a_config_error(
    document: dict[str, Any], flags: dict[str, Any]
) -> None:
    # The CLI turns flags into dotted overrides over the file (load_config's second argument).
    with written(to_toml(document)) as path:
        assert_runnable_or_refused(path, flags)


@FUZZ
@given(st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
@example("[bench\nsteps = ")
@example("a = " + "[" * 3000 + "]" * 3000)
@example("[bench]\nsteps = " + "9" * 5000)
def test_garbage_text_is_a_config_error_or_a_config(text: str) -> None:
    with written(text) as path:
        assert_runnable_or_refused(path)


@FUZZ
@given(st.binary(max_size=200))
@example(b'[bench]\nworkload = "caf\xe9:f"\n')
def test_garbage_bytes_are_a_config_error_or_a_config(data: bytes) -> None:
    with written(data) as path:
        assert_runnable_or_refused(path)


# --- flags through the real command line -------------------------------------------------------------

FLAG_VALUES: dict[str, st.SearchStrategy[str]] = {
    "--steps": st.sampled_from(["0", "2", "3", "60", "-1", "1e3", "x", "9" * 5000]),
    "--warmup": st.sampled_from(["0", "5", "-3", "nan"]),
    "--world-sizes": st.sampled_from(["1", "1,2", "2,1", "2", "1,2,4", ",", "1,,2", "one", "1," + "9" * 5000])
    | st.text(max_size=10),
    "--workload": st.sampled_from(["m:f", "a:[/b]", "no_colon", "bg_test_workloads:sleepy"])
    | st.text(max_size=10),
    "--workload-arg": st.sampled_from(
        ["size=tiny", "n=3", "x=NaN", "x=" + "1" * 5000, "x=" + "[" * 2000, "=v", "novalue"]
    )
    | st.text(max_size=10),
    "--device": st.sampled_from(["auto", "cpu", "cuda", "tpu", ""]),
    "--timeout-s": st.sampled_from(["60", "0", "inf", "nan", "1e400", "-1"]),
    "--out": st.sampled_from(["out", "", "ü", "[/x]"]),
    "--baseline-dir": st.sampled_from(["b", "", "\t"]),
    "--tracking-uri": st.text(max_size=10),
}
SWITCHES = [
    "--eval",
    "--no-eval",
    "--trace",
    "--no-trace",
    "--tracking",
    "--no-tracking",
    "--update-baseline",
]


@st.composite
def flag_lists(draw: st.DrawFn) -> list[str]:
    args: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["value", "switch", "garbage"]))
        if kind == "value":
            flag = draw(st.sampled_from(sorted(FLAG_VALUES)))
            args += [flag, draw(FLAG_VALUES[flag])]
        elif kind == "switch":
            args.append(draw(st.sampled_from(SWITCHES)))
        else:
            args.append(draw(st.text(max_size=8)))
    return args


@settings(FUZZ, max_examples=100)
@given(flag_lists())
@example(["--workload", "a:[/b]"])
@example(["--world-sizes", "2"])
@example(["--steps", "2"])
@example(["--workload-arg", "x=" + "1" * 5000])
def test_run_flags_through_the_real_cli_exit_2_naming_what_is_wrong(flags: list[str]) -> None:
    # `--commit` is refused before anything runs or is written (run_gate checks it first), so every
    # flag list ends in exit 2: naming the flag or field that is wrong, or `--commit` when nothing else is.
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        result = CliRunner().invoke(app, ["run", *flags, "--commit", "not-a-sha"], env={"COLUMNS": "500"})
        assert os.listdir(tmp) == [], "nothing may be written before the commit is validated"
    assert result.exit_code == 2, (result.exception, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    error = result.stderr
    assert "Traceback" not in error + result.stdout
    # Either click's own usage error (an unknown option, a value that is not a number) or benchgate's.
    assert "Usage:" in error or "error: " in error, error
    if "error: " in error:
        assert names_a_field(error.split("error: ", 1)[1]), error
