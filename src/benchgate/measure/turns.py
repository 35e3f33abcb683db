"""Taking turns: two worker groups (A, the base code, and B, the candidate) alternate step by step.

On a shared host the machine's speed drifts over seconds (a neighbour's job, frequency, cache
pressure). Benchmarking A and then B lets that drift land on one side only; alternating single steps
lets it land on both alike, so the paired difference of neighbouring steps is the code's alone.

    worker rank (A or B)                     coordinator (the A/B runner)
    connect, "HELLO <side> <rank>"  ──────►  waits until every rank of both sides said hello
    (before the warmup, which takes turns too)
                                    ◄──────  "GO" to every rank of one side (the order of A and B is
    one training step, timed                  drawn at random for every pair of steps)
    "DONE"                          ──────►  waits for every rank of that side, then the other side
    (after the warmup's turns)
    "READY"                         ──────►  waits until every rank of both sides is ready to measure
    (after the last measured turn)
                                    ◄──────  "END" to every rank, once both sides' last turns are done

The idle side blocks in a socket read, so it uses no CPU while the other side's step is timed. Plain
TCP on 127.0.0.1: both groups run on the same machine by design.

READY and END keep the work between a side's phases off the other side's timed steps: without them the
side that took its last warmup turn first set up its measured phase (a gather, the timer) during the
other side's first measured step, and the side that took its last measured turn first tore down (a
gather, the process group, the metrics file) during the other side's last one.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchgate.errors import RunFailedError

SIDES = ("A", "B")


def steps_per_turn(sync_every: int) -> int:
    """Steps a side runs per turn: one window of bench.sync_every steps, which ends with a device
    synchronise on CUDA (measure/steps.py), so the A/B times steps exactly as the bench does. The
    default window is one step, which on CPU also cancels the host's drift best (docs/benchmarks.md)."""
    return sync_every


def turn_count(steps: int, per_turn: int) -> int:
    """Turns needed for `steps` steps, the last one possibly shorter."""
    return -(-steps // per_turn)


class TurnClient:
    """A worker rank's end: wait for GO before each measured step, report DONE after it."""

    def __init__(self, address: str, side: str, rank: int, timeout_s: float) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        # A wait covers the other side's step, which the collective timeout also bounds.
        self.sock.settimeout(timeout_s)
        self.stream = self.sock.makefile("rwb", buffering=0)
        # CPU this process used while waiting for its turn, i.e. while the other side's step was timed:
        # a background thread of the idle side (a data loader, GC) competing with the measured side.
        self.idle_cpu_s = 0.0
        self._send(f"HELLO {side} {rank}")

    def _send(self, message: str) -> None:
        self.stream.write(f"{message}\n".encode())

    def wait(self) -> None:
        started = time.process_time()
        line = self.stream.readline()
        self.idle_cpu_s += time.process_time() - started
        if line != b"GO\n":
            raise RunFailedError(f"turn coordinator: expected GO, got {line!r} (it stopped or timed out)")

    def done(self) -> None:
        self._send("DONE")

    def ready(self) -> None:
        """Say that this rank is set up to measure; its first measured turn comes after every rank's."""
        self._send("READY")

    def finish(self) -> None:
        """Wait until both sides' last measured turns are done (END), then close: teardown after that
        overlaps no timed step. Called again, it returns: a profiled side finishes before its trace's
        export (measure/op_trace.profiled), and the bench finishes every side after its steps."""
        if self.stream.closed:
            return
        line = self.stream.readline()
        if line != b"END\n":
            raise RunFailedError(f"turn coordinator: expected END, got {line!r} (it stopped or timed out)")
        self.close()

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


@dataclass
class TurnCoordinator:
    """The runner's end: lets A and B take turns for `steps` pairs of steps, in random order per pair."""

    ranks_per_side: int
    timeout_s: float
    seed: int = 0
    orders: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.5)
        self.conns: dict[str, list[socket.socket]] = {side: [] for side in SIDES}

    @property
    def address(self) -> str:
        host, port = self.server.getsockname()[:2]
        return f"{host}:{port}"

    def _accept_all(self, alive: Callable[[], bool]) -> None:
        # The workers connect once their model is built; a side that died before that never will.
        deadline = time.monotonic() + self.timeout_s + 600
        expected = 2 * self.ranks_per_side
        while sum(len(c) for c in self.conns.values()) < expected:
            if not alive():
                raise RunFailedError("a worker group exited before taking turns")
            if time.monotonic() > deadline:
                raise RunFailedError("the worker groups did not connect to the turn coordinator")
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            conn.settimeout(self.timeout_s)
            # Byte by byte: a buffered read could swallow the READY that a rank without warmup sends next.
            hello = _read_line(conn).split()
            if len(hello) != 3 or hello[0] != b"HELLO" or hello[1].decode() not in SIDES:
                conn.close()
                raise RunFailedError(f"turn coordinator: unexpected greeting {hello!r}")
            self.conns[hello[1].decode()].append(conn)

    def _turn(self, side: str) -> None:
        for conn in self.conns[side]:
            conn.sendall(b"GO\n")
        for conn in self.conns[side]:
            reply = _read_line(conn)
            if reply != b"DONE\n":
                raise RunFailedError(f"side {side} stopped during its turn (got {reply!r})")

    def _all_say(self, message: bytes) -> None:
        for side in SIDES:
            for conn in self.conns[side]:
                reply = _read_line(conn)
                if reply != message:
                    raise RunFailedError(f"side {side}: expected {message!r}, got {reply!r}")

    def run(self, turns: int, alive: Callable[[], bool], warmup: int = 0) -> list[str]:
        """Coordinate `warmup` then `turns` pairs of turns (see `turn_count`); returns the order of each
        measured pair ("AB" or "BA"). Between the two, every rank says READY; after them, END to all."""
        rng = random.Random(self.seed)
        try:
            self._accept_all(alive)
            for i in range(warmup + turns):
                if i == warmup:
                    self._all_say(b"READY\n")
                order = "AB" if rng.random() < 0.5 else "BA"
                for side in order:
                    self._turn(side)
                self.orders.append(order)
            for side in SIDES:
                for conn in self.conns[side]:
                    conn.sendall(b"END\n")
        except OSError as e:
            raise RunFailedError(f"turn coordinator: a worker group went away ({e})") from None
        finally:
            self.close()
        return self.orders[warmup:]

    def close(self) -> None:
        for conns in self.conns.values():
            for conn in conns:
                conn.close()
        self.server.close()


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data
