"""Turn taking over real sockets: A and B never step at the same time, and a side that goes away ends
the round with an error instead of a hang."""

from __future__ import annotations

import threading
import time

import pytest

from benchgate.errors import RunFailedError
from benchgate.measure.turns import TurnClient, TurnCoordinator


def worker(address: str, side: str, steps: int, log: list[tuple[str, str]], lock: threading.Lock) -> None:
    client = TurnClient(address, side, 0, timeout_s=10)
    for _ in range(steps):
        client.wait()
        with lock:
            log.append((side, "start"))
        time.sleep(0.002)
        with lock:
            log.append((side, "end"))
        client.done()
    client.close()


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
    # Every start is followed by the same side's end: no two steps overlap.
    for (side, event), (next_side, next_event) in zip(log[::2], log[1::2], strict=True):
        assert (event, next_event) == ("start", "end") and side == next_side
    steps = [side for side, event in log if event == "start"]
    assert [steps[i] + steps[i + 1] for i in range(0, 16, 2)] == orders


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
