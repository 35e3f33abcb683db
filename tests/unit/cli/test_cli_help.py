"""Every command's help, as a user reads it: plain metavars, a default on every option, the exit codes,
-h beside --help, and nothing of the source help text lost to markup."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from benchgate import __version__
from benchgate.cli.main import app
from benchgate.config import RunConfig

ROOT = typer.main.get_command(app)
# A word in brackets, as help strings write a config section ([tracking], [gate.ab]).
BRACKETED = re.compile(r"\[[A-Za-z_][\w.]*\]")
# Options that act rather than set something: nothing to default.
ACTIONS = {"--help", "--version"}


def commands(group: Any = ROOT, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    # typer's own click (typer.core): a group is what lists commands.
    yield path, group
    if hasattr(group, "list_commands"):
        ctx = typer.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            yield from commands(command, (*path, name))


ALL = list(commands())
IDS = [" ".join(path) or "benchgate" for path, _ in ALL]


def help_text(path: tuple[str, ...], flag: str = "--help") -> str:
    result = CliRunner().invoke(app, [*path, flag])
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path, _ in ALL}
    assert {"run", "compare", "submit", "compile", "controller", "env", "version"} <= names
    assert {"baseline", "baseline show", "baseline promote", "history", "sync"} <= names


@pytest.mark.parametrize(("path", "command"), ALL, ids=IDS)
def test_help_has_plain_metavars_defaults_and_exit_codes(path: tuple[str, ...], command: Any) -> None:
    text = help_text(path)
    assert text == help_text(path, "-h")
    assert "\nExit codes:\n" in text.replace("\n  Exit codes:\n", "\nExit codes:\n")
    assert re.search(r"^\s+0  \S", text, re.MULTILINE), text
    ctx = typer.Context(command, info_name=path[-1] if path else "benchgate")
    for param in command.params:
        record = param.get_help_record(ctx)
        assert record is not None
        names, param_help = record
        # A value's metavar is a word in capitals, never a type: no <path>, list[str] or {current}.
        assert not re.search(r"[<{\[]", names), f"{param.name}: {names!r}"
        if param.param_type_name == "option" and not set(param.opts) & ACTIONS:
            assert "default" in param_help.lower() or param.required, f"{param.name}: {param_help!r}"
    usage = next(line for line in text.splitlines() if line.startswith("Usage:"))
    assert not re.search(r"[<{]", usage), usage
    # In brackets: [OPTIONS], [ARGS], or an optional argument's metavar in capitals ([RUN_ID]), never a type.
    bracketed = re.findall(r"\[[^\]]*\]", usage)
    assert all(re.fullmatch(r"\[(OPTIONS|ARGS|[A-Z][A-Z_]*)\]", word) for word in bracketed), usage


@pytest.mark.parametrize(("path", "command"), ALL, ids=IDS)
def test_no_bracketed_word_of_the_source_help_is_lost(path: tuple[str, ...], command: Any) -> None:
    text = " ".join(help_text(path).split())  # wrapping joined back
    sources = [command.help or "", command.epilog or ""]
    sources += [getattr(param, "help", None) or "" for param in command.params]
    for word in {w for source in sources for w in BRACKETED.findall(source)}:
        assert word in text, word


def test_run_shows_the_config_defaults_it_overrides() -> None:
    text = " ".join(help_text(("run",)).split())
    defaults = RunConfig()
    assert f"[default: {defaults.bench.steps} (from [bench] steps)]" in text
    assert f"[default: {defaults.bench.warmup} (from [bench] warmup)]" in text
    assert f"[default: {defaults.gate.baseline_dir} (from [gate] baseline_dir)]" in text
    assert f"[default: {defaults.out} (from the config's out)]" in text
    assert "[default: on (from [eval] enabled)]" in text
    assert "a larger [gate.ab] budget" in text


def test_exit_codes_are_said_per_command() -> None:
    run = help_text(("run",))
    for code in ("0  PASS or WARN", "1  FAIL", "2  bad input", "3  the run itself failed", "4  UNKNOWN"):
        assert code in run
    assert "3  KFP unreachable" in help_text(("submit",))
    assert "2  bad input, or a damaged entry was left in place" in help_text(("sync",))


def test_version_flag_and_command_print_the_version() -> None:
    for args in (["--version"], ["version"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0
        assert result.output.strip() == __version__
