"""Progress: the stage markers a task prints and the CLI relays (kit/progress.py), and how the CLI
draws them: bars on a terminal, stamped lines everywhere else (cli/run_output.py, cli/progress_lines.py)."""

from __future__ import annotations

import contextlib
import io
import os
import pty
import re
import subprocess
import sys
import time

import pytest
from rich.console import Console
from rich.progress import Progress

from benchgate.ab.power import OPENING_MARK
from benchgate.cli.progress_lines import ProgressLines, stamp
from benchgate.cli.run_output import RichReporter
from benchgate.kit.progress import MarkerRelay, MarkerReporter, count_step, final_count


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def stage_started(self, name: str, total: int | None = None) -> None:
        self.events.append(("started", name, total))

    def advance(self, done: int, total: int) -> None:
        self.events.append(("progress", done, total))

    def stage_finished(self, name: str, seconds: float) -> None:
        self.events.append(("finished", name, seconds))


def test_markers_printed_by_a_task_reach_the_reporter_through_relayed_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reporter = MarkerReporter()
    reporter.stage_started("bench ws=2", 60)
    reporter.advance(10, 60)
    reporter.stage_finished("bench ws=2", 7.5)
    recorder = Recorder()
    relay = MarkerRelay(recorder)
    for line in capsys.readouterr().out.splitlines():
        relay.feed("    " + line)  # kfp.local indents a task's output
    relay.feed("an ordinary log line")
    relay.feed("benchgate:stage {not json")
    assert recorder.events == [
        ("started", "bench ws=2", 60),
        ("progress", 10, 60),
        ("finished", "bench ws=2", 7.5),
    ]


def test_a_step_counted_inside_a_task_reaches_its_open_stage_and_nothing_outside_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The eval counts its steps with count_step (measure/evaluate.py): in the eval task, under its stage,
    # they are markers; called in-process, outside any task's stage, nothing.
    count_step(1, 400)
    assert capsys.readouterr().out == ""
    task = MarkerReporter()
    task.stage_started("eval")
    count_step(1, 400)
    count_step(2, 400)
    task.stage_finished("eval", 3.0)
    count_step(3, 400)
    recorder = Recorder()
    relay = MarkerRelay(recorder)
    for line in capsys.readouterr().out.splitlines():
        relay.feed(line)
    assert recorder.events == [
        ("started", "eval", None),
        ("progress", 1, 400),
        ("progress", 2, 400),
        ("finished", "eval", 3.0),
    ]


def _ab_markers(decided_after: int, max_rounds: int = 27) -> list[str]:
    """The markers of an A/B task's rounds (kfp/ab_task.py) that decided after `decided_after`
    rounds, with the opening figure at the first look."""
    emitted = io.StringIO()
    name = "A/B ws=1 (rounds)"
    with contextlib.redirect_stdout(emitted):
        task = MarkerReporter()
        task.stage_started(name, max_rounds)
        for i in range(1, decided_after + 1):
            if i == 4:
                task.stage_started(f"{OPENING_MARK} ws=1: after 4 rounds, this machine resolves ...")
                task.stage_started(name, max_rounds)
            task.advance(i, max_rounds)
        task.stage_finished(name, 40.0)
    return emitted.getvalue().splitlines()


def test_an_ab_bar_that_decided_early_ends_at_the_rounds_it_ran() -> None:
    progress = Progress(console=Console(file=io.StringIO(), width=200))
    with progress:
        relay = MarkerRelay(RichReporter(progress))
        for line in _ab_markers(decided_after=4):
            relay.feed(line)
    (task,) = progress.tasks
    assert (task.completed, task.total) == (4, 4)
    assert task.description == "A/B ws=1 (rounds) (40.0 s)"


def test_plain_lines_say_each_stage_once_with_the_count_it_ended_at() -> None:
    stream = io.StringIO()
    with ProgressLines(stream) as lines:
        relay = MarkerRelay(lines)
        lines.stage_started("env")
        lines.stage_finished("env", 5.6)
        for line in _ab_markers(decided_after=6):
            relay.feed(line)
    said = [line.split(" ", 1) for line in stream.getvalue().splitlines()]
    assert all(re.fullmatch(r"\[\d\d:\d\d\]", stamp) for stamp, _ in said)
    assert [text for _, text in said] == [
        "env started",
        "env done (5.6 s)",
        "A/B ws=1 (rounds) started (0/27)",
        f"{OPENING_MARK} ws=1: after 4 rounds, this machine resolves ...",
        "A/B ws=1 (rounds) done 6/6 (40.0 s)",
    ]


def test_a_stage_an_entry_left_open_is_not_the_next_entrys_stage_announced_again() -> None:
    # A suite entry whose gate failed in its env stage never said it ended; the next entry's env starts.
    stream = io.StringIO()
    with ProgressLines(stream) as lines:
        lines.within("entry 1/2 broken")
        lines.stage_started("env")
        lines.within("entry 2/2 gpt-tiny")
        lines.stage_started("env")
    said = [line.split(" ", 1)[1] for line in stream.getvalue().splitlines()]
    assert said == ["entry 1/2 broken · env started", "entry 2/2 gpt-tiny · env started"]


def test_plain_lines_say_where_a_long_stage_is_whenever_nothing_else_was_said_for_a_while() -> None:
    # A CI job with a no-output timeout must see a line at least every `every_s`, within a stage and
    # between stages, from the ticker thread: real time, a short period.
    stream = io.StringIO()
    with ProgressLines(stream, every_s=0.3) as lines:
        lines.within("entry 2/3 gpt-tiny-b4")
        lines.stage_started("eval", None)
        lines.advance(120, 400)
        time.sleep(1.0)
        lines.advance(400, 400)
        lines.stage_finished("eval", 1.0)
        time.sleep(0.5)
    said = stream.getvalue().splitlines()
    assert said[0].endswith(" entry 2/3 gpt-tiny-b4 · eval started")
    done = next(i for i, line in enumerate(said) if line.endswith("gpt-tiny-b4 · eval done 400/400 (1.0 s)"))
    during, after = said[1:done], said[done + 1 :]
    assert len(during) >= 2, said
    status = r"\[00:0\d\] entry 2/3 gpt-tiny-b4 · eval 120/400 \(\d s\)"
    assert all(re.fullmatch(status, line) for line in during), said
    since = r"\[00:0\d\] entry 2/3 gpt-tiny-b4 · running: \d s since eval ended"
    assert after and all(re.fullmatch(since, line) for line in after), said


def test_a_stamp_counts_minutes_then_hours() -> None:
    assert (stamp(0.4), stamp(83.0), stamp(3725.0)) == ("[00:00]", "[01:23]", "[1:02:05]")
    assert final_count(None, None) == 1 and final_count(None, 60) == 60 and final_count(4, 27) == 4


# A command's progress as a real process draws it (cli/run_output.advance): a stage of ~1.5 s,
# then 1.5 s more of work before it exits.
_DRAWING = """
import time
from benchgate.cli.run_output import progress_reporter
with progress_reporter() as reporter:
    reporter.stage_started("bench ws=1", 3)
    for i in (1, 2, 3):
        time.sleep(0.5)
        reporter.advance(i, 3)
    reporter.stage_finished("bench ws=1", 1.5)
    time.sleep(1.5)
"""


def _arrivals(tty: bool, term: str) -> tuple[list[tuple[float, str]], float]:
    """What the process wrote to its stdout (a pipe, or a pseudo-terminal), chunk by chunk, each with the
    seconds after the start at which it arrived; and when the process ended."""
    env = {**os.environ, "TERM": term}
    env.pop("FORCE_COLOR", None)
    if tty:
        reader, writer = pty.openpty()
    else:
        reader, writer = os.pipe()
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", _DRAWING], stdout=writer, stderr=writer, env=env)
    os.close(writer)
    chunks: list[tuple[float, str]] = []
    while True:
        try:
            data = os.read(reader, 65536)
        except OSError:  # a pseudo-terminal whose last writer closed
            break
        if not data:
            break
        chunks.append((time.monotonic() - started, data.decode(errors="replace")))
    os.close(reader)
    assert process.wait(timeout=60) == 0, chunks
    return chunks, time.monotonic() - started


@pytest.mark.parametrize(
    ("tty", "term"),
    [
        pytest.param(False, "xterm-256color", id="pipe"),
        pytest.param(True, "dumb", id="dumb-terminal"),
        pytest.param(True, "xterm-256color", id="terminal"),
    ],
)
def test_a_stage_is_shown_while_it_runs_not_when_the_command_ends(tty: bool, term: str) -> None:
    chunks, ended = _arrivals(tty, term)
    first = next(t for t, text in chunks if "bench ws=1" in text)
    assert first < ended - 1.5, chunks
    if term == "dumb" or not tty:  # plain lines: a start line, then a done line with its count
        text = "".join(t for _, t in chunks)
        assert re.search(r"\[00:0\d\] bench ws=1 started \(0/3\)", text), text
        assert re.search(r"\[00:0\d\] bench ws=1 done 3/3 \(1\.5 s\)", text), text
        done = next(t for t, text in chunks if "bench ws=1 done" in text)
        assert done - first >= 1.0, chunks
