"""Processes that die with their parent: a killed `benchgate run` leaves no pipeline task, torchrun or rank.

`benchgate run` → a kfp.local task process → torchrun → one worker per rank. torchrun runs in a session
of its own (so a wall-clock kill can take the whole job), which also means no signal to the terminal's
process group reaches it. If any link is killed outright (`kill -9`, the OOM killer), the processes below
it would run on as orphans: torchrun holding the cores, a task publishing a baseline for a run the user
stopped. Every link is tied to the one above it:

- a task started by `benchgate run` (which sets `PARENT_PID_VARIABLE` for its pipeline) watches that
  process, and when it is gone kills everything below itself and exits;
- torchrun is started through `python -m benchgate.kit.lifeline PID torch.distributed.run …` and gets
  SIGTERM when its task dies (Linux's parent-death signal, `prctl(PR_SET_PDEATHSIG)`); its own handler
  then stops the workers;
- each worker gets SIGKILL when torchrun dies (the same signal).

Where there is no parent-death signal (not Linux) only the task's watch applies, and the wall-clock
limit (`bench.run_timeout_s`) still ends a job.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import signal
import sys
import threading
import time

import psutil

# Set by `benchgate run` for its pipeline's tasks: the pid each task must outlive no longer than.
PARENT_PID_VARIABLE = "BENCHGATE_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals, expected_parent: int | None = None) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies; False where unsupported.

    The parent may already be gone by the time this runs; then the signal is sent now.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    parent = os.getppid()
    if expected_parent is not None and parent != expected_parent:
        os.kill(os.getpid(), sig)
    return True


def kill_tree(pid: int, *, include_root: bool = True, timeout_s: float = 10.0) -> None:
    """Kill every process below `pid`, and `pid` itself unless told not to.

    The tree is walked by parent pid, so it reaches torchrun's workers, which run in sessions of their own
    (a process-group kill misses them).
    """
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), *([root] if include_root else [])]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=timeout_s)


def tie_task_to_run(poll_s: float = 0.5) -> None:
    """In a pipeline task started by `benchgate run`: end this task and its children when the run dies.

    kfp.local starts a task through `sh -c`, so the run is the task's grandparent and a parent-death
    signal would watch the shell instead; a daemon thread watches the run's process itself (pid and start
    time, so a recycled pid is not mistaken for it).
    """
    variable = os.environ.get(PARENT_PID_VARIABLE, "")
    if not variable.isdigit():
        return  # not under `benchgate run` (a cluster pod, a test calling a task directly)
    try:
        run = psutil.Process(int(variable))
        started = run.create_time()
    except psutil.NoSuchProcess:
        _stop_tree()

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            try:
                alive = run.is_running() and run.create_time() == started
            except psutil.NoSuchProcess:
                alive = False
            if not alive:
                _stop_tree()

    threading.Thread(target=watch, name="benchgate-lifeline", daemon=True).start()


def _stop_tree() -> None:
    kill_tree(os.getpid(), include_root=False)
    os._exit(128 + signal.SIGTERM)


def command(parent_pid: int, module: str, *args: str) -> list[str]:
    """The command line that runs `python -m module args…` tied to `parent_pid` (normally the caller)."""
    return [sys.executable, "-m", "benchgate.kit.lifeline", str(parent_pid), module, *args]


def main(argv: list[str]) -> None:
    """`python -m benchgate.kit.lifeline PARENT_PID MODULE ARGS…`: run MODULE as `python -m` would, tied to
    PARENT_PID (passed in, not read here, so a parent that died before this line runs is noticed)."""
    if len(argv) < 2 or not argv[0].isdigit():
        raise SystemExit("usage: python -m benchgate.kit.lifeline PARENT_PID MODULE [ARGS...]")
    die_with_parent(signal.SIGTERM, expected_parent=int(argv[0]))
    sys.argv = argv[1:]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    # The module ran to its end (a failure raises, and exits as it always did). What is left is the
    # interpreter's teardown with torch loaded, about half a second per torchrun launch (measured):
    # skipped, once the output is flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
