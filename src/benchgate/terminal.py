"""The CLI's two consoles and its one way to fail, shared by every command module."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from benchgate.errors import BenchgateError

# CI logs are not terminals; rich would wrap the verdict table at 80 columns there.
console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def fail(exc: BenchgateError) -> NoReturn:
    """Print the error as one line (no traceback for a user's mistake) and exit with its code."""
    # The message quotes what the user passed, which may look like markup ("[/b]" would raise).
    errors.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
    raise typer.Exit(exc.exit_code)
