"""The CLI's two consoles, its one way to fail, and the help conventions every command module follows.

Help is plain text (no rich markup), so a help string's `[tracking]` or `[gate.ab]` prints as written.
Every value option names its value in capitals (PATH, FILE, DIR, TEXT, N, SECONDS, KEY=VALUE, 1,2),
never a type in brackets; every option says its default, and where the default comes from the config
(`benchgate run`'s flags override it) the help says which key (`config_default`); every command ends
with its exit codes (`exit_codes`) and takes -h as well as --help (`APP_SETTINGS`).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand

from benchgate.config import RunConfig
from benchgate.errors import (
    EXIT_BAD_INPUT,
    EXIT_PASS,
    EXIT_REGRESSION,
    EXIT_RUN_FAILED,
    EXIT_UNKNOWN,
    BenchgateError,
    ConfigError,
)

# CI logs are not terminals; rich would wrap the verdict table at 80 columns there.
console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

# For every typer.Typer of the CLI: plain help (rich markup would eat "[tracking]"), -h and --help.
APP_SETTINGS: dict[str, Any] = {
    "rich_markup_mode": None,
    # Up to 120 columns where the terminal has them: command summaries are not cut at 80.
    "context_settings": {"help_option_names": ["-h", "--help"], "max_content_width": 120},
    "add_completion": False,
    "pretty_exceptions_enable": False,
}


def fail(exc: BenchgateError) -> NoReturn:
    """Print the error as one line (no traceback for a user's mistake) and exit with its code."""
    # The message quotes what the user passed, which may look like markup ("[/b]" would raise).
    errors.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
    raise typer.Exit(exc.exit_code)


def exit_codes(*codes: tuple[int, str]) -> str:
    """A command's epilog: its exit codes, one a line (the \\b keeps click from joining the lines)."""
    return "\b\nExit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in codes)


# The codes most commands share; a command lists its own where they mean more.
OK = (EXIT_PASS, "done")
BAD_INPUT = (EXIT_BAD_INPUT, "bad input: a flag, the config file or a named file has a bad value")
RUN_FAILED = (EXIT_RUN_FAILED, "it failed: MLflow unreachable, or a disk refused a write")
# The gate's verdict as an exit code (`benchgate run`, `compare`, `submit`).
GATE_CODES = (
    (EXIT_PASS, "PASS or WARN (and UNKNOWN where gate.on_unknown = neutral)"),
    (EXIT_REGRESSION, "FAIL: a regression"),
    (EXIT_BAD_INPUT, "bad input: a flag, the config file, the workload or a baseline (named)"),
    (EXIT_RUN_FAILED, "the run itself failed (a rank crashed or hung, a disk refused a write)"),
    (EXIT_UNKNOWN, "UNKNOWN: the timing was not resolved; the printed next step decides it"),
)


def config_default(dotted: str, shown: str | None = None) -> str:
    """The help's default of a flag that overrides config key `dotted` (e.g. "bench.steps"): the built-in
    value, read from benchgate.config, and the key a --config file sets it with. `shown`: words for a
    default that is no plain value (None meaning "decided at run time")."""
    section, _, key = dotted.rpartition(".")
    value: Any = RunConfig()
    for part in dotted.split("."):
        value = getattr(value, part)
    if shown is None:
        shown = _plain_value(value)
    where = f"[{section}] {key}" if section else f"the config's {key}"
    return f"[default: {shown} (from {where})]"


def _plain_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict | list | tuple):
        return ",".join(map(str, value)) if value else "none"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value) if value not in ("", None) else "none"


class _PlainArgument(TyperArgument):
    """A positional argument as click writes one: its metavar alone (DIR, RUN_ID), in the usage line
    and in the help, instead of "{name}" and a type in angle brackets."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        return name if self.required else f"[{name}]"

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


class PlainCommand(TyperCommand):
    """A command whose positional arguments read as click writes them (see _PlainArgument); pass it as
    `cls=` to a command that has any."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if type(param) is TyperArgument:
                # Same fields, other help methods: the instance is re-classed, not rebuilt.
                param.__class__ = _PlainArgument


def option(*decls: str, text: str, metavar: str | None = None, default: str | None = None) -> Any:
    """A typer.Option in the conventions above; `default`: the words of a default typer cannot show
    (none, an environment variable), printed as typer prints its own."""
    shown = f"  [default: {default}]" if default is not None else ""
    return typer.Option(*decls, metavar=metavar, help=f"{text}{shown}")


def config_option(
    *decls: str, text: str, key: str, metavar: str | None = None, shown: str | None = None
) -> Any:
    """An option of `benchgate run` that overrides config key `key`: its default is the config's."""
    return typer.Option(*decls, metavar=metavar, help=f"{text}  {config_default(key, shown)}")


def parse_pairs(pairs: list[str], flag: str) -> dict[str, Any]:
    """KEY=VALUE pairs (`run --workload-arg`, `submit --param`), each value JSON where it parses."""
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag}: got {pair!r}, expected KEY=VALUE")
        try:
            # Numbers and booleans keep their type (512 an int, 512.0 a float); NaN and Infinity are not
            # JSON, and stay the text they are, as does anything else that is not JSON.
            parsed[key] = json.loads(raw, parse_constant=_not_json)
        except (ValueError, RecursionError):  # not JSON, an int past 4300 digits, nesting too deep
            # Taken as the text it is; the config or the pipeline's parameters then judge it.
            parsed[key] = raw
    return parsed


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


# The KFP experiment of the commands that submit with --submit (backfill, bisect).
SubmitExperimentOption = Annotated[
    str,
    typer.Option(envvar="KFP_EXPERIMENT", metavar="NAME", help="With --submit: the KFP experiment."),
]
# The workload flags of every command that runs a workload (run, backfill, bisect): one definition.
WorkloadFactoryOption = Annotated[
    str | None, config_option(metavar="MODULE:FUNCTION", text="Workload factory.", key="bench.workload")
]
WorkloadArgOption = Annotated[
    list[str] | None,
    config_option(
        "--workload-arg",
        metavar="KEY=VALUE",
        text="An argument of the workload factory; repeatable.",
        key="bench.workload_args",
    ),
]
# The MLflow flags of every command that runs a gate or an A/B (run, bisect).
TrackingUriOption = Annotated[
    str | None,
    config_option(
        metavar="URI",
        text="MLflow tracking URI.",
        key="tracking.uri",
        shown="MLFLOW_TRACKING_URI, else the local store",
    ),
]
TrackingOption = Annotated[
    bool | None, config_option("--tracking/--no-tracking", text="Log to MLflow.", key="tracking.enabled")
]
