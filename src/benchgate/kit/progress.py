"""Progress across process boundaries, as plain stdout lines.

Two hops carry it: a torchrun rank tells the launcher how many steps are done (`PROGRESS_PREFIX`), and a
pipeline task, which kfp.local runs as a subprocess whose stdout it relays line by line, tells
`benchgate run` which stage it is in (`STAGE_PREFIX`). Lines are the only channel both hops share, and
anything that is not a marker is ordinary log output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

PROGRESS_PREFIX = "benchgate:progress"
STAGE_PREFIX = "benchgate:stage"


class Reporter(Protocol):
    def stage_started(self, name: str, total: int | None = None) -> None: ...
    def stage_progress(self, done: int, total: int) -> None: ...
    def stage_finished(self, name: str, seconds: float) -> None: ...


class SilentReporter:
    def stage_started(self, name: str, total: int | None = None) -> None:
        pass

    def stage_progress(self, done: int, total: int) -> None:
        pass

    def stage_finished(self, name: str, seconds: float) -> None:
        pass


class MarkerReporter:
    """A Reporter that prints stage markers: used inside a pipeline task."""

    def stage_started(self, name: str, total: int | None = None) -> None:
        _print_marker({"event": "started", "name": name, "total": total})

    def stage_progress(self, done: int, total: int) -> None:
        _print_marker({"event": "progress", "done": done, "total": total})

    def stage_finished(self, name: str, seconds: float) -> None:
        _print_marker({"event": "finished", "name": name, "seconds": seconds})


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
            self.reporter.stage_progress(int(event["done"]), int(event["total"]))
        elif kind == "finished":
            self.reporter.stage_finished(str(event["name"]), float(event["seconds"]))
