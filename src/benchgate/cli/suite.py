"""`benchgate suite run | report | plan`: several gate runs from one suite.toml (docs/suites.md).

Thin: read the suite file, pass the local pipeline's `run_gate` as the gate of each entry
(suite/runner.py), draw one progress bar across entries (stamped lines where stdout is no terminal:
cli/progress_lines.py), print the table grouped by entry, and exit with the suite's code. `report`
draws a finished suite's Pareto view again (suite/report.py); `plan --hf` writes a coverage suite of a
Hugging Face family (suite/hf_plan.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress

from benchgate.cli.progress_lines import ProgressLines, is_live_terminal
from benchgate.cli.run_output import live_progress, screen
from benchgate.cli.terminal import (
    APP_SETTINGS,
    BAD_INPUT,
    OK,
    PlainCommand,
    TrackingOption,
    TrackingUriOption,
    console,
    exit_codes,
    option,
    parse_pairs,
)
from benchgate.cli.terminal import fail as _fail
from benchgate.config import RunConfig
from benchgate.errors import (
    EXIT_BAD_INPUT,
    EXIT_PASS,
    EXIT_REGRESSION,
    EXIT_RUN_FAILED,
    EXIT_UNKNOWN,
    BenchgateError,
    ConfigError,
    DiskError,
)
from benchgate.kit.files import write_text
from benchgate.kit.progress import Reporter
from benchgate.suite.report import write_suite_report
from benchgate.suite.runner import SUITE_FILE, EntryOutcome
from benchgate.suite.spec import load_suite
from benchgate.suite.stage import DEFAULT_OUT, run_suite
from benchgate.suite.table import print_suite_table

SUITE_CODES = exit_codes(
    (EXIT_PASS, "every entry PASS or WARN (UNKNOWN too where gate.on_unknown = neutral)"),
    (EXIT_REGRESSION, "an entry FAILed: a regression"),
    (EXIT_BAD_INPUT, "bad input: the suite file (nothing ran), or an entry (named; the others ran)"),
    (EXIT_RUN_FAILED, "an entry's run itself failed (a rank crashed or hung, a disk refused a write)"),
    (EXIT_UNKNOWN, "an entry's timing was not resolved (UNKNOWN), and none FAILed"),
)
PLAN_CODES = exit_codes(
    (OK[0], "the suite file was written"),
    (BAD_INPUT[0], "a bad argument (named), or the suite file exists (--force replaces it)"),
    (EXIT_RUN_FAILED, "a disk refused the write"),
)
REPORT_CODES = exit_codes(
    (OK[0], "the report was written"),
    (BAD_INPUT[0], "DIR has no suite.json, it is damaged (named), or no entry finished"),
    (EXIT_RUN_FAILED, "a disk refused a write"),
)

suite_app = typer.Typer(
    help="Gate several workloads and variants from one suite file (run), and draw its Pareto view (report).",
    epilog=SUITE_CODES,
    no_args_is_help=True,
    **APP_SETTINGS,
)


class _EntryBar:
    """One progress line across entries: `entry 2/4 gpt-tiny-bf16 · bench ws=2 3/6`."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.task = progress.add_task("suite", total=total)
        self.prefix = ""
        self.stage = ""

    # SuiteProgress
    def entry_started(self, position: int, total: int, name: str) -> Reporter:
        self.prefix, self.stage = f"entry {position}/{total} {name}", ""
        self._show()
        return self

    def entry_finished(self, position: int, total: int, record: dict[str, Any]) -> None:
        self.progress.console.print(escape(f"entry {position}/{total} {_ended(record)}"), highlight=False)
        self.progress.update(self.task, completed=position, description=escape(f"{position}/{total} done"))

    # Reporter: the current entry's stages
    def stage_started(self, name: str, total: int | None = None) -> None:
        self.stage = name
        self._show()

    def advance(self, done: int, total: int) -> None:
        self._show(f" {done}/{total}")

    def stage_finished(self, name: str, seconds: float) -> None:
        self._show()

    def _show(self, count: str = "") -> None:
        text = f"{self.prefix} · {self.stage}{count}" if self.stage else self.prefix
        self.progress.update(self.task, description=escape(text))


class _EntryLines:
    """The entries as stamped lines: each entry's start and end, its stages under its name."""

    def __init__(self, lines: ProgressLines) -> None:
        self.lines = lines

    def entry_started(self, position: int, total: int, name: str) -> Reporter:
        self.lines.within(f"entry {position}/{total} {name}")
        self.lines.say(f"{self.lines.scope} started")
        return self.lines

    def entry_finished(self, position: int, total: int, record: dict[str, Any]) -> None:
        self.lines.within("")
        self.lines.say(f"entry {position}/{total} {_ended(record)}")


def _ended(record: dict[str, Any]) -> str:
    """How an entry ended: `name: PASS (12.3 s)`, or for an incremental suite's skipped one
    `name: PASS, measured before (skipped)`."""
    outcome = record["verdict"] or f"error (exit {record['exit_code']})"
    if record.get("state") == "skipped":
        return f"{record['name']}: {outcome}, measured before (skipped)"
    return f"{record['name']}: {outcome} ({record['seconds'] or 0.0:.1f} s)"


@contextmanager
def _entry_bar(total: int) -> Iterator[_EntryBar | _EntryLines]:
    stream = screen()
    if not is_live_terminal(stream):
        with ProgressLines(stream) as lines:
            yield _EntryLines(lines)
        return
    with live_progress(stream) as progress:
        yield _EntryBar(progress, total)


def _gate_entry(base: str) -> Any:
    """The gate of one entry: the local pipeline, as `benchgate run` runs it."""
    from benchgate.kfp.local_run import run_gate

    def run_entry(config: RunConfig, reporter: Reporter) -> EntryOutcome:
        outcome = run_gate(config, reporter, base=base)
        comparison = outcome.comparison
        return EntryOutcome(comparison.verdict, comparison.exit_code, outcome.out_dir)

    return run_entry


@suite_app.command("run", cls=PlainCommand, epilog=SUITE_CODES)
def suite_run(
    suite_file: Annotated[Path, typer.Argument(metavar="SUITE_FILE", help="The suite file (suite.toml).")],
    out: Annotated[
        Path, option(metavar="DIR", text="Directory for the suite's results, one directory per entry in it.")
    ] = DEFAULT_OUT,
    tracking_uri: TrackingUriOption = None,
    tracking: TrackingOption = None,
    base: Annotated[
        str,
        option(
            metavar="REF",
            text="A/B: a git ref of this repository benchmarked side by side with each entry wherever its "
            "stored-baseline screen does not PASS.",
            default="none: each baseline's commit, where this repository has it",
        ),
    ] = "",
) -> None:
    """Gate every entry of a suite file, one at a time, each against its own baseline."""
    overrides = {"tracking.uri": tracking_uri, "tracking.enabled": tracking}
    try:
        spec = load_suite(suite_file)
        with _entry_bar(len(spec.entries)) as bar:
            outcome = run_suite(spec, out, _gate_entry(base), overrides, bar)
    except BenchgateError as exc:
        _fail(exc)
    print_suite_table(outcome.out_dir, outcome.record.data, console)
    console.print(
        f"results: {outcome.out_dir}/  ({SUITE_FILE}, suite.md, one directory per entry)", markup=False
    )
    mlflow = outcome.record.data.get("mlflow") or {}
    if mlflow.get("suite_run_id"):
        console.print(f"MLflow suite run {mlflow['suite_run_id']}: {mlflow.get('url') or mlflow.get('uri')}")
    if outcome.report_warning:
        console.print(f"[yellow]warning:[/] {escape(outcome.report_warning)}")
    else:
        console.print(f"Pareto view: {outcome.out_dir}/suite.html  (pareto.png, pareto.md)", markup=False)
    if outcome.tracking_warning:
        console.print(f"[yellow]warning:[/] {escape(outcome.tracking_warning)}")
    console.print(f"suite exit {outcome.exit_code}", highlight=False)
    raise typer.Exit(outcome.exit_code)


@suite_app.command("plan", cls=PlainCommand, epilog=PLAN_CODES)
def suite_plan(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="WORKLOAD_ARGS",
            help="The workload arguments every entry shares, KEY=VALUE as --workload-arg takes them: "
            "task=masked-lm size=tiny batch_size=4 ...",
        ),
    ] = None,
    hf: Annotated[
        bool,
        option(
            "--hf",
            text="One entry per model type of a Hugging Face family (task=, causal-lm where not given).",
            default="off",
        ),
    ] = False,
    types: Annotated[
        str, option(metavar="A,B,...", text="Only these model types.", default="every one of the family")
    ] = "",
    config: Annotated[
        str | None,
        option(
            metavar="FILE",
            text="[suite] config: a benchgate config file every entry starts from.",
            default="none",
        ),
    ] = None,
    # --file, not --out: the suite file is the user's to keep (and commit), not a result to ignore.
    suite_file: Annotated[Path, option("--file", metavar="FILE", text="The suite file to write.")] = Path(
        "suite.toml"
    ),
    force: Annotated[bool, option("--force", text="Replace FILE where it exists.", default="off")] = False,
) -> None:
    """Write a suite file: with --hf, a coverage suite of every model type of a Hugging Face family."""
    from benchgate.suite.hf_plan import hf_entries, suite_toml

    try:
        if not hf:
            raise ConfigError(
                "suite plan: say what to plan: --hf (every model type of a Hugging Face family)"
            )
        if suite_file.exists() and not force:
            raise ConfigError(f"--file: {suite_file} exists; pass --force to replace it, or another --file")
        name, entries = hf_entries(parse_pairs(args or [], "KEY=VALUE"), [t for t in types.split(",") if t])
        command = " ".join(
            ["benchgate suite plan --hf", *(args or []), *([f"--types {types}"] if types else [])]
        )
        write_text(suite_file, suite_toml(name, entries, command, config))
    except BenchgateError as exc:
        _fail(exc)
    except OSError as e:
        _fail(DiskError(f"{suite_file}: cannot write: {e.strerror or e}"))
    console.print(
        f"{suite_file}: suite {name}, {len(entries)} entries; run it with: benchgate suite run {suite_file}",
        markup=False,
    )


@suite_app.command("report", cls=PlainCommand, epilog=REPORT_CODES)
def suite_report(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="A suite's output directory (suite run --out).")
    ],
) -> None:
    """Draw a finished suite's Pareto view again: pareto.png, pareto.md and suite.html in DIR."""
    try:
        written = write_suite_report(directory)
    except BenchgateError as exc:
        _fail(exc)
    except OSError as e:
        _fail(DiskError(f"{directory}: cannot write {e.filename or directory}: {e.strerror or e}"))
    for path in written:
        console.print(str(path), markup=False, highlight=False)
