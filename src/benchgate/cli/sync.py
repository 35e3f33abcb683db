"""`benchgate sync`: send the runs spooled while MLflow was unreachable (store/spool.py), from this
machine's spool directory or, with --from, from spool entries found elsewhere (a downloaded KFP results
artifact, a mounted pipeline root).

Safe to repeat: the run key (tracking/record.py) makes an entry already sent "already in MLflow". A
damaged entry is named and left in place while the others are sent, and the command then exits 2 (a
partial sync needs a human); MLflow unreachable, or a local disk that refuses a write (the spool), is
exit 3, naming the path. Settings and the connection: cli/mlflow_access.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from benchgate.cli.mlflow_access import ConfigOption, UriOption, connect
from benchgate.cli.terminal import BAD_INPUT, OK, RUN_FAILED, console, errors, exit_codes, fail
from benchgate.config import RunConfig, load_config
from benchgate.errors import BadInputError, BenchgateError, DiskError, RunFailedError, SpoolEntryError

SYNC_CODES = exit_codes(
    (OK[0], "every entry was sent (or there was nothing to send)"),
    (BAD_INPUT[0], "bad input, or a damaged entry was left in place (a partial sync: it needs a human)"),
    (RUN_FAILED[0], "MLflow could not be reached, or a local disk refused a write"),
)
FromOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--from",
        metavar="DIR",
        help="Send the spool entries found under this directory instead (repeatable): a downloaded KFP "
        "results artifact (its spool/), a spool directory, or a mounted pipeline root. Nothing in it is "
        "removed.  [default: none: the spool directory's entries]",
    ),
]


def sync(
    config: ConfigOption = None,
    tracking_uri: UriOption = None,
    spool_dir: Annotated[
        Path | None, typer.Option(metavar="DIR", help="Spool directory.  [default: tracking.spool_dir]")
    ] = None,
    from_dirs: FromOption = None,
) -> None:
    """Send the runs spooled while MLflow was unreachable. Safe to repeat: a run is never logged twice.

    Sent entries are removed from the spool directory; entries read with --from are left in place. A
    damaged entry is named and left where it is while the others are sent.
    """
    from benchgate.store import spool

    try:
        cfg = load_config(config, {"tracking.uri": tracking_uri, "tracking.spool_dir": spool_dir})
        if from_dirs:
            for directory in from_dirs:
                if not directory.is_dir():
                    raise BadInputError(f"--from: got {str(directory)!r} (not a directory)")
            # A directory given twice, or inside another, is read once. (Copies of one run elsewhere are
            # each found; the run key makes every copy after the first "already in MLflow".)
            unique = {str(entry.resolve()): entry for d in from_dirs for entry in spool.found(d)}
            entries, owned, where = list(unique.values()), False, ", ".join(str(d) for d in from_dirs)
            damaged: list[str] = []
        else:
            own = cfg.tracking.spool_dir
            entries, owned, where = spool.pending(own), True, str(own)
            damaged = [f"{p}: not a spool entry (no {spool.RECORD_FILE})" for p in spool.strays(own)]
        for line in damaged:
            _warn_damaged(line)
        if not entries and not damaged:
            console.print(f"nothing to sync in {where}")
            return
        sent = _send(cfg, entries, owned, damaged) if entries else 0
        if damaged:
            raise SpoolEntryError(
                f"{len(damaged)} damaged spool entr{'y' if len(damaged) == 1 else 'ies'} not sent, left "
                f"in place to be repaired or removed ({sent} sent): " + "; ".join(damaged)
            )
    except BenchgateError as exc:
        fail(exc)


def _send(cfg: RunConfig, entries: list[Path], owned: bool, damaged: list[str]) -> int:
    """Log each entry; a damaged one is added to `damaged` and the rest go on. Returns how many went."""
    from benchgate.store import spool
    from benchgate.tracking import client as tracking
    from benchgate.tracking.record import log_entry

    tracker = connect(cfg)
    sent = 0
    for index, entry in enumerate(entries):
        try:
            run_id, logged = log_entry(tracker, entry)
        except SpoolEntryError as e:
            damaged.append(str(e).removeprefix("damaged spool entry "))
            _warn_damaged(damaged[-1])
            continue
        except tracking.send_errors() as e:
            kept = "left in the spool" if owned else "left in place"
            raise RunFailedError(
                f"{entry}: MLflow at {tracker.uri}: {tracking.short_error(e)} ({kept}, with the "
                f"{len(entries) - index - 1} not tried after it; {sent} sent; `benchgate sync` again "
                "sends the rest)"
            ) from None
        if owned:  # only entries of our own spool: --from directories are not ours
            try:
                spool.remove(entry)
            except DiskError as e:
                raise DiskError(f"{entry.name} is logged to MLflow as run {run_id}, but {e}") from None
        sent += 1
        state = "logged" if logged else "already in MLflow"
        console.print(f"{entry.name if owned else entry}: {state} as run {run_id}")
    return sent


def _warn_damaged(line: str) -> None:
    errors.print(f"[yellow]damaged spool entry[/] {escape(line)} (left in place)", highlight=False)
