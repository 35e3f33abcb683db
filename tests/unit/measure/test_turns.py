"""Turn taking over real sockets: A and B never step at the same time, neither side's setup or teardown
overlaps the other's timed steps, and a side that goes away ends the round with an error instead of a
hang."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from benchgate.errors import RunFailedError
from benchgate.measure.turns import TurnClient, TurnCoordinator


def worker(
    address: str, side: str, steps: int, log: list[tuple[str, str]], lock: threading.Lock, warmup: int = 0
) -> None:
    """A rank as bench.py runs one: warmup turns, READY, measured turns, then END before its teardown."""
    client = TurnClient(address, side, 0, timeout_s=10)
    for i in range(warmup + steps):
        if i == warmup:
            with lock:
                log.append((side, "setup"))  # between the phases: a gather, the timer
            client.ready()
        client.wait()
        with lock:
            log.append((side, "start"))
        time.sleep(0.002)
        with lock:
            log.append((side, "end"))
        client.done()
    client.finish()
    with lock:
        log.append((side, "teardown"))


def test_sides_alternate_and_never_overlap() -> None:
    coordinator = TurnCoordinator(ranks_per_side=1, timeout_s=10, seed=3)
    log: list[tuple[str, str]] = []
    lock = threading.Lock()
    threads = [
        threading.Thread(target=worker, args=(coordinator.address, side, 8, log, lock)) for side in ("A", "B")
    ]
    for t in threads:
        t.start()
    orders = coordinator.run(8, alive=lambda: True)
    for t in threads:
        t.join(timeout=10)
    assert len(orders) == 8 and set(orders) == {"AB", "BA"}  # the order is drawn per pair
    timed = [entry for entry in log if entry[1] in ("start", "end")]
    # Every start is followed by the same side's end: no two steps overlap.
    for (side, event), (next_side, next_event) in zip(timed[::2], timed[1::2], strict=True):
        assert (event, next_event) == ("start", "end") and side == next_side
    steps = [side for side, event in timed if event == "start"]
    assert [steps[i] + steps[i + 1] for i in range(0, 16, 2)] == orders


def test_no_side_sets_up_or_tears_down_during_a_timed_step() -> None:
    # Without READY and END, the side whose last warmup turn came first set up during the other side's
    # first timed step, and the side whose last timed turn came first tore down during the other's last.
    for seed in range(6):
        coordinator = TurnCoordinator(ranks_per_side=1, timeout_s=10, seed=seed)
        log: list[tuple[str, str]] = []
        lock = threading.Lock()
        threads = [
            threading.Thread(target=worker, args=(coordinator.address, side, 3, log, lock, 2))
            for side in ("A", "B")
        ]
        for t in threads:
            t.start()
        coordinator.run(3, alive=lambda: True, warmup=2)
        for t in threads:
            t.join(timeout=10)
        events = [event for _, event in log]
        starts = [i for i, event in enumerate(events) if event == "start"]
        setups = [i for i, event in enumerate(events) if event == "setup"]
        teardowns = [i for i, event in enumerate(events) if event == "teardown"]
        # Both sides set up after the warmup's 2 pairs of turns and before the first timed step (a
        # setup may overlap the other side's warmup step), and tear down after the last timed step.
        first_timed, last_end = starts[2 * 2], max(i for i, event in enumerate(events) if event == "end")
        assert len(setups) == 2 and all(starts[1] < i < first_timed for i in setups), log
        assert len(teardowns) == 2 and min(teardowns) > last_end, log


def test_a_side_that_dies_before_connecting_ends_the_round() -> None:
    coordinator = TurnCoordinator(ranks_per_side=1, timeout_s=5)
    with pytest.raises(RunFailedError, match="exited before taking turns"):
        coordinator.run(3, alive=lambda: False)


def test_a_side_that_disconnects_mid_round_is_an_error() -> None:
    coordinator = TurnCoordinator(ranks_per_side=1, timeout_s=5)
    log: list[tuple[str, str]] = []
    lock = threading.Lock()
    errors: list[Exception] = []

    def stranded() -> None:
        try:
            worker(coordinator.address, "A", 3, log, lock)
        except (RunFailedError, OSError) as e:  # its coordinator went away: what a real rank reports
            errors.append(e)

    good = threading.Thread(target=stranded)
    good.start()
    quitter = TurnClient(coordinator.address, "B", 0, timeout_s=5)
    quitter.close()
    with pytest.raises(RunFailedError):
        coordinator.run(3, alive=lambda: True)
    good.join(timeout=10)
    assert not good.is_alive()


def test_a_profiled_side_writes_its_trace_after_the_other_sides_last_step(tmp_path: Path) -> None:
    """A profiled side (ab/explain.py's rounds) stops and exports its trace only after END: its export,
    a core busy for a second or more, never runs beside the other side's last timed step."""
    import torch

    from benchgate.measure.op_trace import profiled, step_range, trace_path

    steps = 3
    coordinator = TurnCoordinator(ranks_per_side=1, timeout_s=20, seed=0)  # its last pair is "AB"
    trace = trace_path(tmp_path, 0)
    written: list[bool] = []  # at the end of each of B's steps: whether A's trace exists yet

    def other_side() -> None:
        client = TurnClient(coordinator.address, "B", 0, timeout_s=20)
        client.ready()
        for _ in range(steps):
            client.wait()
            time.sleep(0.5)  # long enough for A's export to finish inside it, were it not waiting
            written.append(trace.exists())
            client.done()
        client.finish()

    orders: list[str] = []
    threads = [
        threading.Thread(target=other_side),
        threading.Thread(target=lambda: orders.extend(coordinator.run(steps, alive=lambda: True))),
    ]
    for t in threads:
        t.start()
    client = TurnClient(coordinator.address, "A", 0, timeout_s=20)
    with profiled(tmp_path, 0, torch.device("cpu"), before_export=client.finish):
        client.ready()
        for i in range(steps):
            client.wait()
            with step_range(i):
                torch.randn(64, 64).sum()
            client.done()
    client.finish()  # the bench finishes every side again after its steps: it returns
    for t in threads:
        t.join(timeout=20)
    assert orders[-1] == "AB"  # A's last step came first: B's last step could have met A's export
    assert written == [False] * steps and trace.is_file()
