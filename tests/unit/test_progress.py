import pytest

from benchgate.kit.progress import MarkerRelay, MarkerReporter


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def stage_started(self, name: str, total: int | None = None) -> None:
        self.events.append(("started", name, total))

    def stage_progress(self, done: int, total: int) -> None:
        self.events.append(("progress", done, total))

    def stage_finished(self, name: str, seconds: float) -> None:
        self.events.append(("finished", name, seconds))


def test_markers_printed_by_a_task_reach_the_reporter_through_relayed_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reporter = MarkerReporter()
    reporter.stage_started("bench ws=2", 60)
    reporter.stage_progress(10, 60)
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
