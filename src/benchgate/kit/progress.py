"""Progress across process boundaries, as plain stdout lines.

Two hops carry it: a torchrun rank tells the launcher how many steps are done (`PROGRESS_PREFIX`), and a
pipeline task, which kfp.local runs as a subprocess whose stdout it relays line by line, tells
`benchgate run` which stage it is in (`STAGE_PREFIX`). Lines are the only channel both hops share, and
anything that is not a marker is ordinary log output.

Code that runs inside a task's stage without being handed its reporter (the eval's training loop)
counts its steps with `count_step`: a marker of the stage this process has open, and nothing where none
is (the same function called in-process, by a test or a benchmark, prints nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

PROGRESS_PREFIX = "benchgate:progress"
STAGE_PREFIX = "benchgate:stage"


class Reporter(Protocol):
    def stage_started(self, name: str, total: int | None = None) -> None: ...
    def advance(self, done: int, total: int) -> None: ...
    def stage_finished(self, name: str, seconds: float) -> None: ...


class SilentReporter:
    def stage_started(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, done: int, total: int) -> None:
        pass

    def stage_finished(self, name: str, seconds: float) -> None:
        pass


def final_count(done: int | None, total: int | None) -> int:
    """Where a stage's count stands once it has finished: the count it reached where it counted (an A/B
    that decided after 4 of at most 27 rounds ran 4, and shows 4/4), else its total (1 where it had
    none: a stage without steps is one thing done)."""
    if done is not None:
        return done
    return total or 1


class MarkerReporter:
    """A Reporter that prints stage markers: used inside a pipeline task. The stage it started last is
    this process's open stage, which `count_step` counts in, until it finishes."""

    def stage_started(self, name: str, total: int | None = None) -> None:
        global _open_stage
        _open_stage = self
        _print_marker({"event": "started", "name": name, "total": total})

    def advance(self, done: int, total: int) -> None:
        _print_marker({"event": "progress", "done": done, "total": total})

    def stage_finished(self, name: str, seconds: float) -> None:
        global _open_stage
        _open_stage = None
        _print_marker({"event": "finished", "name": name, "seconds": seconds})


# The task's stage now running (MarkerReporter), or None: one process runs one stage at a time.
_open_stage: MarkerReporter | None = None


def count_step(done: int, total: int) -> None:
    """`done` of `total` steps of the stage this process has open; nothing where no stage is open."""
    if _open_stage is not None:
        _open_stage.advance(done, total)


def _print_marker(event: dict[str, object]) -> None:
    print(f"{STAGE_PREFIX} {json.dumps(event)}", flush=True)


@dataclass
class MarkerRelay:
    """Feeds the markers found in relayed output lines to a Reporter; other lines are ignored."""

    reporter: Reporter

    def feed(self, line: str) -> None:
        text = line.strip()
        if not text.startswith(STAGE_PREFIX):
            return
        try:
            event = json.loads(text[len(STAGE_PREFIX) :])
        except json.JSONDecodeError:
            return
        kind = event.get("event")
        if kind == "started":
            self.reporter.stage_started(str(event["name"]), event.get("total"))
        elif kind == "progress":
            self.reporter.advance(int(event["done"]), int(event["total"]))
        elif kind == "finished":
            self.reporter.stage_finished(str(event["name"]), float(event["seconds"]))
