"""Progress as plain lines, for a stdout that cannot redraw: a CI log, a pipe, a file, a TERM=dumb
terminal.

Rich's live display draws nothing there until it stops, so a run printed every stage bar at once, at
its end, after minutes of silence that a CI job's no-output timeout takes for a hang. Here each line is
written when it happens and flushed: one as a stage starts, one as it ends (with its count and
seconds), and, while nothing else was said for `every_s`, one saying where the run is (the stage, its
count, how long it has run), so the output is never silent for longer than that. Every line starts with
the time since the display opened, `[mm:ss]`.

`is_live_terminal` decides which display a command draws: the live bars where the stream is a terminal
that can move its cursor, these lines everywhere else.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TextIO

from benchgate.ab.power import is_opening_line
from benchgate.kit.progress import final_count

# Below the 30 s after which a watcher may take a quiet job for a hung one, with room for a busy host.
EVERY_S = 20.0


def is_live_terminal(stream: TextIO) -> bool:
    """Whether `stream` can show live bars: a terminal (not a pipe or a file) that understands cursor
    movement (TERM=dumb, as in editors' shells, does not). FORCE_COLOR does not make a pipe one."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return tty and os.environ.get("TERM", "").lower() not in ("dumb", "unknown")


def stamp(seconds: float) -> str:
    """`[mm:ss]`, or `[h:mm:ss]` from an hour on: the time since the display opened."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[{hours}:{minutes:02d}:{secs:02d}]" if hours else f"[{minutes:02d}:{secs:02d}]"


@dataclass
class _Stage:
    name: str
    total: int | None
    started: float
    done: int | None = None

    def count(self) -> str:
        return f" {self.done}/{self.total}" if self.done is not None and self.total else ""


class ProgressLines:
    """The non-terminal display: a Reporter of stages (a run's, or a suite entry's or a backfill
    commit's, under `scope`), `say` for a line of its own, and a ticker thread for the periodic line.
    Use it as a context manager: the ticker runs between enter and exit."""

    def __init__(
        self, stream: TextIO, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream, self.every_s, self.clock = stream, every_s, clock
        self.opened = self.last_line = clock()
        self.scope = ""  # what the stages belong to: "entry 2/4 gpt-tiny", a commit; "" for a run
        self.stage: _Stage | None = None
        self.ended: tuple[str, float] | None = None  # the last stage that ended, and when
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.ticker: threading.Thread | None = None

    def __enter__(self) -> ProgressLines:
        self.ticker = threading.Thread(target=self._tick, name="benchgate-progress-lines", daemon=True)
        self.ticker.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stopped.set()
        if self.ticker is not None:
            self.ticker.join()

    def say(self, text: str) -> None:
        """One line now, stamped and flushed."""
        with self.lock:
            self._write(text)

    def within(self, scope: str) -> None:
        """The stages from now on are `scope`'s (a suite entry, a backfill commit; "" for none). A stage
        the previous scope left open (its gate failed in it) is over: the next one of the same name is
        a new stage, not its announcement again."""
        with self.lock:
            self.scope, self.stage = scope, None

    # What a command tracks without a line of its own (bisect's steps say their own lines).
    def begin(self, name: str, total: int | None = None) -> None:
        with self.lock:
            self.stage = _Stage(name, total, self.clock())

    def end(self) -> None:
        with self.lock:
            if self.stage is not None:
                self.ended = (self.stage.name, self.clock())
            self.stage = None

    # Reporter
    def stage_started(self, name: str, total: int | None = None) -> None:
        if is_opening_line(name):  # the A/B's opening figure (ab/power.py): a line of its own
            self.say(name)
            return
        with self.lock:
            if self.stage is not None and self.stage.name == name:
                # The A/B announces its rounds' stage again after the opening figure: no second start.
                self.stage.total = total
                return
            self.stage = _Stage(name, total, self.clock())
            self._write(f"{self._label(name)} started" + (f" (0/{total})" if total else ""))

    def advance(self, done: int, total: int) -> None:
        with self.lock:
            if self.stage is not None:
                self.stage.done, self.stage.total = done, total

    def stage_finished(self, name: str, seconds: float) -> None:
        with self.lock:
            stage, self.stage = self.stage, None
            count = ""
            if stage is not None and stage.name == name and (stage.done is not None or stage.total):
                ran = final_count(stage.done, stage.total)
                count = f" {ran}/{ran}"  # what ran: an A/B that decided after 4 rounds ends 4/4
            self._write(f"{self._label(name)} done{count} ({seconds:.1f} s)")
            self.ended = (name, self.clock())

    def _label(self, name: str) -> str:
        return f"{self.scope} · {name}" if self.scope else name

    def _write(self, text: str) -> None:
        # Called with the lock held. The stream is stdout as the command found it: flushed per line,
        # since a pipe's stdout is block-buffered and would hold the lines back as the bars were.
        now = self.clock()
        self.stream.write(f"{stamp(now - self.opened)} {text}\n")
        self.stream.flush()
        self.last_line = now

    def status(self) -> str:
        """Where the run is, for the periodic line."""
        now = self.clock()
        if self.stage is not None:
            ran = now - self.stage.started
            return f"{self._label(self.stage.name)}{self.stage.count()} ({ran:.0f} s)"
        if self.ended is not None:
            name, when = self.ended
            return f"{self._label('running')}: {now - when:.0f} s since {name} ended"
        return f"{self._label('running')} ({now - self.opened:.0f} s)"

    def _tick(self) -> None:
        while not self.stopped.wait(min(1.0, self.every_s / 4)):
            with self.lock:
                if self.clock() - self.last_line >= self.every_s:
                    self._write(self.status())
