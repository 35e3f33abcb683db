"""Controller overhead: the real controller (kopf, every handler) against kmock's emulated Kubernetes
API and the fake KFP server (tests/support/fake_kfp_server.py), on 127.0.0.1.

N BenchmarkRuns are POSTed to the emulator at once (as `kubectl apply` would create them), with no
per-namespace limit. Per object it measures:
- submit: from the moment its POST returned to the moment the fake KFP accepted its POST /runs;
  also until phase Submitted, and until phase Running, as read from the emulator's objects;
- reflect: once all are Running, every KFP run is made SUCCEEDED at once, just after the controller
  has looked at each (the worst moment); from then until the object's phase reads Succeeded.
The emulator's objects are read every 10 ms. Before the burst, one BenchmarkRun is submitted alone
(the first submission connects to KFP and compiles the pipeline; `--no-warmup` leaves that in the burst).
kmock routes each request by walking its log of every request served so far, so it slows down as the
run goes on; unless `--full-request-log`, routed requests are counted and dropped from that log.

Where the controller runs (`--controller`):
- thread (default): in this process, in its own thread and event loop, as in the operator tests. It
  shares this process, and so Python's GIL, with the emulator and the fake KFP.
- process: in a child process of its own, as in its pod; the emulator and the fake stay here.

Memory: in thread mode, RSS of this process with everything but the controller started (emulator,
fake KFP, this script) and then with the controller, sampled every 20 ms; the difference is the
controller's share, and the whole process an upper bound of it. In process mode, the child's own RSS.

Where the time goes comes from wrapping the controller's KFP client calls (KfpRuns.ensure and .state)
with timers; the controller's code is unchanged.

Targets: p99 submit <= 2 s; p99 reflect <= poll interval + 1 s; controller RSS <= 150 MiB.

    python benchmarks/controller_overhead.py [--runs 50] [--poll-s 2] [--controller thread|process]
        [--no-warmup] [--full-request-log] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import logging
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))
from fake_kfp_server import FakeKfp, Scenario, serve  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
GROUP, VERSION = "benchgate.dev", "v1alpha1"
NAMESPACE = "bench"
TOKEN = "controller-token"
SHA = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "https://github.com/example/trainer.git"
WATCH_S = 0.01
SUBMIT_TARGET_S = 2.0
REFLECT_SLACK_S = 1.0
RSS_TARGET_MIB = 150.0
MIB = 2**20
USER_AGENT = "benchgate-benchmark"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, interpolating linearly between closest ranks (as numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "p50": math.nan, "p90": math.nan, "p99": math.nan, "max": math.nan}
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values),
    }


class RssSampler:
    """A process's RSS every 20 ms in a thread; `peak` since the last `reset`."""

    def __init__(self, pid: int | None = None) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def now(self) -> int:
        try:
            return int(self.process.memory_info().rss)
        except psutil.Error:  # the child has exited
            return 0

    def reset(self) -> None:
        self.peak = self.now()

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def start(self) -> None:
        self.reset()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Watcher:
    """The first moment each BenchmarkRun showed each phase (and a KFP run id) in the emulator."""

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator
        self.seen: dict[str, dict[str, float]] = {}
        self.run_ids: dict[str, str] = {}

    def look(self) -> None:
        now = time.monotonic()
        for (resource, namespace, name), obj in list(self.emulator.objects.items()):
            if resource.plural != "benchmarkruns" or namespace != NAMESPACE or obj.deleted:
                continue
            status = obj.raw.get("status") or {}
            firsts = self.seen.setdefault(name, {})
            if status.get("phase"):
                firsts.setdefault(str(status["phase"]), now)
            if status.get("kfpRunId"):
                firsts.setdefault("kfpRunId", now)
                self.run_ids[name] = str(status["kfpRunId"])

    async def run(self) -> None:
        while True:
            self.look()
            await asyncio.sleep(WATCH_S)

    async def until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")
            await asyncio.sleep(WATCH_S)


class Calls:
    """Start and end of each call the controller makes to its KFP client (monotonic seconds, which
    are the same clock in every process of the host)."""

    def __init__(self) -> None:
        self.ensure: dict[str, tuple[float, float]] = {}
        self.state: list[tuple[str, float, float, str]] = []
        self.max_active = 0
        self._active = 0
        self._lock = threading.Lock()

    def wrap(self, kfp: Any) -> None:
        ensure, state = kfp.ensure, kfp.state

        def timed_ensure(run_name: str, arguments: dict[str, Any], namespace: str) -> tuple[str, bool]:
            with self._lock:
                self._active += 1
                self.max_active = max(self.max_active, self._active)
            started = time.monotonic()
            try:
                result: tuple[str, bool] = ensure(run_name, arguments, namespace)
                return result
            finally:
                with self._lock:
                    self._active -= 1
                    self.ensure[run_name] = (started, time.monotonic())

        def timed_state(run_id: str) -> tuple[str, list[tuple[str, str]]]:
            started = time.monotonic()
            result: tuple[str, list[tuple[str, str]]] = state(run_id)
            with self._lock:
                self.state.append((run_id, started, time.monotonic(), result[0]))
            return result

        kfp.ensure, kfp.state = timed_ensure, timed_state

    def dump(self) -> dict[str, Any]:
        with self._lock:
            return {"ensure": dict(self.ensure), "state": list(self.state), "max_active": self.max_active}

    @classmethod
    def load(cls, data: dict[str, Any]) -> Calls:
        calls = cls()
        calls.ensure = {k: (v[0], v[1]) for k, v in data["ensure"].items()}
        calls.state = [(r, s, e, st) for r, s, e, st in data["state"]]
        calls.max_active = int(data["max_active"])
        return calls


def controller(kube_url: str, kfp_url: str, args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The controller's settings, kopf registry and runtime, its KFP calls timed."""
    import kopf

    from benchgate.controller.main import build
    from benchgate.controller.settings import ControllerSettings
    from benchgate.kfp.api import Connection

    settings = ControllerSettings(
        kfp=Connection(kfp_url, TOKEN, kfp_url),
        poll_s=args.poll_s,
        schedule_poll_s=args.poll_s,
        max_active_per_namespace=0,
    )
    registry, runtime = build(settings, kube_host=kube_url)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=kube_url)

    return settings, registry, runtime


def start_in_thread(
    kube_url: str, kfp_url: str, args: argparse.Namespace
) -> tuple[Calls, Callable[[], Calls]]:
    """The controller in its own thread and event loop (kopf cancels the tasks of its loop when it
    stops); returns its timed calls and a function that stops it."""
    from benchgate.controller.main import ControllerThread

    settings, registry, runtime = controller(kube_url, kfp_url, args)
    calls = Calls()
    calls.wrap(runtime.kfp)
    running = ControllerThread(settings, registry, runtime)
    if not running.start(30):
        raise SystemExit("the controller did not start within 30 s")

    def halt() -> Calls:
        running.stop(30)
        return calls

    return calls, halt


def child_main(args: argparse.Namespace) -> None:
    """`--child`: the controller alone in this process, until its stdin closes; then its timed calls
    go to `--calls-out`. It says it is ready by creating `--ready-file`."""
    from benchgate.controller.main import operate

    settings, registry, runtime = controller(args.kube_url, args.kfp_url, args)
    calls = Calls()
    calls.wrap(runtime.kfp)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop, ready = asyncio.Event(), asyncio.Event()
        ready_file = Path(args.ready_file)
        asyncio.ensure_future(ready.wait()).add_done_callback(lambda _: ready_file.touch())
        threading.Thread(
            target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True
        ).start()
        await operate(settings, registry, runtime, stop_flag=stop, ready_flag=ready)

    asyncio.run(main())
    Path(args.calls_out).write_text(json.dumps(calls.dump()), encoding="utf-8")


def start_in_process(
    kube_url: str, kfp_url: str, args: argparse.Namespace, tmp: Path
) -> tuple[int, Callable[[], Calls]]:
    ready_file, calls_out = tmp / "ready", tmp / "calls.json"
    command = [sys.executable, __file__, "--child", "--kube-url", kube_url, "--kfp-url", kfp_url]
    command += ["--poll-s", str(args.poll_s), "--ready-file", str(ready_file), "--calls-out", str(calls_out)]
    # kfp prints links to stdout; the child's warnings and errors go to stderr, here.
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready_file.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the controller process did not start")
        time.sleep(0.05)

    def halt() -> Calls:
        assert child.stdin is not None
        child.stdin.close()
        if child.wait(60) != 0:
            raise SystemExit(f"the controller process exited {child.returncode}")
        return Calls.load(json.loads(calls_out.read_text(encoding="utf-8")))

    return child.pid, halt


def manifest(name: str) -> dict[str, Any]:
    """A BenchmarkRun with what an API server adds to metadata (kmock adds none of it)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BenchmarkRun",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "generation": 1,
            "resourceVersion": "1",
        },
        "spec": {"commit": SHA, "repository": REPOSITORY, "worldSize": 2},
    }


async def create(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> float:
    """POST one object; returns the moment the emulator's answer arrived."""
    path = f"{url}/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/benchmarkruns"
    async with http.post(path, json=body) as response:
        if response.status not in (200, 201):
            raise SystemExit(
                f"creating {body['metadata']['name']}: {response.status} {await response.text()}"
            )
        await response.read()
    return time.monotonic()


class RequestLog:
    """What the controller asked of the emulated API server, by verb and resource.

    kmock keeps every request it served and, to route each new one, walks that whole log once per
    reaction (14 of them) through their filters: a request costs it time in proportion to the requests
    served before it, which no API server does. Unless `--full-request-log`, every 0.1 s the requests
    already routed (those in a reaction's own log) are counted and dropped from both logs."""

    def __init__(self, emulator: Any, trim: bool) -> None:
        self.emulator = emulator
        self.counts: collections.Counter[str] = collections.Counter()
        self.trim = trim

    def tally(self, requests: list[Any]) -> None:
        for request in requests:
            if request.headers.get("User-Agent") == USER_AGENT:
                continue
            if request.resource is None or request.resource.plural is None:
                self.counts["discovery"] += 1
                continue
            method = str(getattr(request.method, "value", request.method)).upper()
            verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(
                method, method
            )
            if method == "GET":
                watch = str(request.params.get("watch", "")).lower() in ("true", "1")
                verb = "watch" if watch else "get" if request.name else "list"
            sub = f"/{request.subresource}" if request.subresource else ""
            self.counts[f"{verb} {request.resource.plural}{sub}"] += 1

    def drop_routed(self) -> None:
        routed: dict[int, Any] = {}
        for reaction in self.emulator._payloads:
            routed.update((id(r), r) for r in reaction._requests)
            reaction._requests.clear()
        log = self.emulator._requests
        log[:] = [r for r in log if id(r) not in routed]
        self.tally(list(routed.values()))

    async def run(self) -> None:
        while self.trim:
            await asyncio.sleep(0.1)
            self.drop_routed()

    def totals(self) -> dict[str, int]:
        self.tally(self.emulator._requests)
        self.emulator._requests.clear()
        return dict(self.counts.most_common())


def kfp_requests(fake: FakeKfp) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    with fake.lock:
        for method, path in fake.requests:
            route = path.removeprefix("/apis/v2beta1")
            if route.startswith("/runs/"):
                route = "/runs/{id}" + (":terminate" if route.endswith(":terminate") else "")
            counts[f"{method} {route}"] += 1
    return dict(counts.most_common())


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    own_rss = RssSampler()
    own_rss.start()
    fake = FakeKfp(Scenario(token=TOKEN, outcome="RUNNING"))  # runs end when forced
    kfp_server, kfp_url = serve(fake)
    tmp = Path(tempfile.mkdtemp(prefix="controller-overhead-"))
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator):
        emulator.resources.load_bundled()
        for plural, kind in (("benchmarkruns", "BenchmarkRun"), ("benchmarkschedules", "BenchmarkSchedule")):
            emulator.resources[f"{GROUP}/{VERSION}/{plural}"] = {
                "kind": kind,
                "namespaced": True,
                "verbs": {"list", "watch", "get", "create", "patch", "update", "delete"},
                "subresources": {"status"},
            }
        url = str(emulator.url).rstrip("/")
        watcher, requests = Watcher(emulator), RequestLog(emulator, trim=not args.full_request_log)
        tasks = [asyncio.create_task(watcher.run()), asyncio.create_task(requests.run())]
        await asyncio.sleep(1.0)
        baseline = own_rss.now()

        # From here on, the controller and all it imports (kopf, the kubernetes client, kfp) load.
        from benchgate.controller.spec.status import kfp_run_name

        started = time.monotonic()
        if args.controller == "process":
            pid, halt = await asyncio.to_thread(start_in_process, url, kfp_url, args, tmp)
            rss = RssSampler(pid)
            rss.start()
        else:
            _, halt = await asyncio.to_thread(start_in_thread, url, kfp_url, args)
            rss = own_rss
        startup_s = time.monotonic() - started
        rss_started = rss.now()

        async with aiohttp.ClientSession(headers={"User-Agent": USER_AGENT}) as http:
            first: dict[str, float] = {}
            if args.warmup:
                body = manifest("warmup")
                posted = await create(http, url, body)
                await watcher.until(
                    lambda: "Running" in watcher.seen.get("warmup", {}), 120, "the warm-up run"
                )
                run = kfp_run_name(NAMESPACE, "warmup", body["metadata"]["uid"])
                with fake.lock:
                    accepted = fake.created_at[[r["display_name"] for r in fake.created_runs].index(run)]
                first = {
                    "submit_s": accepted - posted,
                    "to_submitted_s": watcher.seen["warmup"]["Submitted"] - posted,
                    "to_running_s": watcher.seen["warmup"]["Running"] - posted,
                }

            # The burst: N objects POSTed at once.
            names = [f"br-{i:03d}" for i in range(args.runs)]
            bodies = {name: manifest(name) for name in names}
            burst_started = time.monotonic()
            posts = await asyncio.gather(*(create(http, url, bodies[n]) for n in names))
            returned = dict(zip(names, posts, strict=True))
            await watcher.until(
                lambda: all("Running" in watcher.seen.get(n, {}) for n in names),
                args.timeout_s,
                f"{args.runs} runs to be Running",
            )
            by_run_name = {n: kfp_run_name(NAMESPACE, n, bodies[n]["metadata"]["uid"]) for n in names}
            with fake.lock:
                accepted_at = dict(
                    zip((r["display_name"] for r in fake.created_runs), fake.created_at, strict=True)
                )

            # Every run ends at once, just after the controller has looked at each of them (the worst
            # moment: the next look is a whole poll interval away).
            ids = [watcher.run_ids[n] for n in names]
            polls = {i: fake.polls.get(i, 0) for i in ids}
            await watcher.until(
                lambda: all(fake.polls.get(i, 0) > polls[i] for i in ids), args.timeout_s, "a round of polls"
            )
            forced_at = time.monotonic()
            for name in names:
                fake.force(watcher.run_ids[name], "SUCCEEDED")
            await watcher.until(
                lambda: all("Succeeded" in watcher.seen.get(n, {}) for n in names),
                args.timeout_s,
                f"{args.runs} runs to be Succeeded",
            )
            rss_end, rss_peak, own_peak = rss.now(), rss.peak, own_rss.peak
            ended_at = time.monotonic()
        calls = await asyncio.to_thread(halt)
        for task in tasks:
            task.cancel()
    kfp_server.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    for sampler in {id(rss): rss, id(own_rss): own_rss}.values():
        sampler.stop()

    seen = watcher.seen
    submit = [accepted_at[by_run_name[n]] - returned[n] for n in names]
    to_submitted = [seen[n]["Submitted"] - returned[n] for n in names]
    to_running = [seen[n]["Running"] - returned[n] for n in names]
    reflect = [seen[n]["Succeeded"] - forced_at for n in names]

    # Where the submit time goes, from the timed KfpRuns.ensure calls.
    ensure = {n: calls.ensure[by_run_name[n]] for n in names}
    # Where the reflect time goes: the state() call that first saw SUCCEEDED for each run.
    name_of = {watcher.run_ids[n]: n for n in names}
    final: dict[str, tuple[float, float]] = {}
    for run_id, start, end, state in sorted(calls.state, key=lambda c: c[2]):
        if run_id in name_of and state == "SUCCEEDED" and name_of[run_id] not in final:
            final[name_of[run_id]] = (start, end)
    state_calls = [c for c in calls.state if burst_started <= c[1] <= ended_at]
    # The timer's period: from one state() call of a run to its next.
    starts: dict[str, list[float]] = collections.defaultdict(list)
    for run_id, start, _, _ in sorted(calls.state, key=lambda c: c[1]):
        if run_id in name_of:
            starts[run_id].append(start)
    period = [b - a for run in starts.values() for a, b in itertools.pairwise(run)]

    if args.controller == "process":
        rss_figures = {
            "controller_started": rss_started / MIB,
            "controller_peak": rss_peak / MIB,
            "controller_end": rss_end / MIB,
            "harness_peak": own_peak / MIB,
        }
    else:
        rss_figures = {
            "baseline": baseline / MIB,
            "controller_started": rss_started / MIB,
            "process_peak": rss_peak / MIB,
            "process_end": rss_end / MIB,
            "controller_peak": (rss_peak - baseline) / MIB,
        }
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "host": f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "controller": args.controller,
        "runs": args.runs,
        "poll_s": args.poll_s,
        "warmup": args.warmup,
        "to_thread_pool": min(32, (os.cpu_count() or 1) + 4),  # asyncio's default executor
        "controller_startup_s": startup_s,
        "burst_posts_s": max(returned.values()) - burst_started,
        "first_submission": first,
        "submit_s": summary(submit),
        "to_submitted_s": summary(to_submitted),
        "to_running_s": summary(to_running),
        "reflect_s": summary(reflect),
        "breakdown": {
            "post_to_ensure_start_s": summary([ensure[n][0] - returned[n] for n in names]),
            "ensure_start_to_kfp_accepted_s": summary(
                [accepted_at[by_run_name[n]] - ensure[n][0] for n in names]
            ),
            "ensure_call_s": summary([ensure[n][1] - ensure[n][0] for n in names]),
            "ensure_end_to_submitted_s": summary([seen[n]["Submitted"] - ensure[n][1] for n in names]),
            "ensure_max_concurrent": calls.max_active,
            "forced_to_final_state_call_s": summary([final[n][0] - forced_at for n in final]),
            "state_call_s": summary([final[n][1] - final[n][0] for n in final]),
            "state_end_to_succeeded_s": summary([seen[n]["Succeeded"] - final[n][1] for n in final]),
            "state_calls_per_s": len(state_calls) / (ended_at - burst_started),
            "poll_period_s": summary(period),
        },
        "emulator_requests": requests.totals(),
        "emulator_request_log_trimmed": not args.full_request_log,
        "kfp_requests": kfp_requests(fake),
        "rss_mib": rss_figures,
    }


def report(result: dict[str, Any]) -> None:
    poll = result["poll_s"]
    where = "its own process" if result["controller"] == "process" else "a thread of this process"
    print(
        f"{result['runs']} BenchmarkRuns created at once; controller in {where}; poll interval {poll:g} s; "
        f"to_thread pool {result['to_thread_pool']}; warm-up {'on' if result['warmup'] else 'off'}"
    )
    print(
        f"controller start {result['controller_startup_s']:.2f} s; all {result['runs']} POSTs returned "
        f"within {result['burst_posts_s']:.2f} s"
    )
    if result["first_submission"]:
        first = result["first_submission"]
        figures = f"KFP run {first['submit_s']:.2f} s, Submitted {first['to_submitted_s']:.2f} s"
        figures += f", Running {first['to_running_s']:.2f} s"
        print(f"first submission, alone (connects to KFP, compiles the pipeline): {figures}")
    breakdown = result["breakdown"]
    rows: list[tuple[str, dict[str, float] | None]] = [
        ("submit: POST returned -> KFP POST /runs", result["submit_s"]),
        ("  ... -> phase Submitted", result["to_submitted_s"]),
        ("  ... -> phase Running", result["to_running_s"]),
        ("reflect: KFP SUCCEEDED -> phase Succeeded", result["reflect_s"]),
        ("where the time goes:", None),
        ("  submit: POST -> ensure() starts", breakdown["post_to_ensure_start_s"]),
        ("  submit: ensure() starts -> KFP accepts", breakdown["ensure_start_to_kfp_accepted_s"]),
        ("  submit: ensure() call", breakdown["ensure_call_s"]),
        ("  submit: ensure() returns -> Submitted", breakdown["ensure_end_to_submitted_s"]),
        ("  reflect: SUCCEEDED -> the state() call", breakdown["forced_to_final_state_call_s"]),
        ("  reflect: state() call", breakdown["state_call_s"]),
        ("  reflect: state() returns -> Succeeded", breakdown["state_end_to_succeeded_s"]),
        ("  one state() call of a run to its next", breakdown["poll_period_s"]),
    ]
    print()
    print(f"{'seconds':<44} {'n':>3} {'p50':>6} {'p90':>6} {'p99':>6} {'max':>6}")
    for label, s in rows:
        if s is None:
            print(label)
        else:
            print(
                f"{label:<44} {s['n']:>3} {s['p50']:>6.2f} {s['p90']:>6.2f} {s['p99']:>6.2f} {s['max']:>6.2f}"
            )
    print(
        f"  at most {breakdown['ensure_max_concurrent']} ensure() calls at once; "
        f"{breakdown['state_calls_per_s']:.1f} state() calls/s"
    )
    print("emulator requests: " + ", ".join(f"{v} {k}" for k, v in result["emulator_requests"].items()))
    print("fake KFP requests: " + ", ".join(f"{v} {k}" for k, v in result["kfp_requests"].items()))
    rss = result["rss_mib"]
    print()
    if result["controller"] == "process":
        print(
            f"controller process RSS (MiB): started {rss['controller_started']:.0f}, "
            f"peak {rss['controller_peak']:.0f}, end {rss['controller_end']:.0f} "
            f"(emulator + fake KFP process: peak {rss['harness_peak']:.0f})"
        )
    else:
        print(
            f"process RSS (MiB): baseline (emulator, fake KFP, this script) {rss['baseline']:.0f}; "
            f"controller started {rss['controller_started']:.0f}; peak {rss['process_peak']:.0f}; "
            f"end {rss['process_end']:.0f}"
        )
        print(
            f"controller's share at peak: {rss['controller_peak']:.0f} MiB "
            f"(whole process {rss['process_peak']:.0f} MiB)"
        )
    print()
    checks = [
        (f"p99 submit <= {SUBMIT_TARGET_S:g} s", result["submit_s"]["p99"], SUBMIT_TARGET_S, "s"),
        (
            f"p99 reflect <= poll + {REFLECT_SLACK_S:g} s",
            result["reflect_s"]["p99"],
            poll + REFLECT_SLACK_S,
            "s",
        ),
        (f"controller RSS <= {RSS_TARGET_MIB:g} MiB", rss["controller_peak"], RSS_TARGET_MIB, "MiB"),
    ]
    for label, value, target, unit in checks:
        print(
            f"{label:<32} {value:>7.2f} {unit:<3} (target {target:g}) {'PASS' if value <= target else 'MISS'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=50, help="BenchmarkRuns created at once (default 50)")
    parser.add_argument(
        "--poll-s", type=float, default=2.0, help="the controller's poll interval (default 2)"
    )
    parser.add_argument("--controller", choices=["thread", "process"], default="thread")
    parser.add_argument(
        "--no-warmup", dest="warmup", action="store_false", help="no first run before the burst"
    )
    parser.add_argument(
        "--full-request-log", action="store_true", help="let the emulator keep every request (slower)"
    )
    parser.add_argument("--timeout-s", type=float, default=300.0, help="give up waiting after this long")
    parser.add_argument("--json", type=Path, default=RESULTS / "controller_overhead.json", help="figures to")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--kube-url", "--kfp-url", "--ready-file", "--calls-out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # In thread mode kopf says it cannot handle OS signals outside the main thread: expected here.
    logging.getLogger("kopf._core.reactor.running").setLevel(logging.ERROR)
    if args.child:
        child_main(args)
        return
    # KfpApi wraps kfp's calls in contextlib.redirect_stdout, which swaps the process-wide sys.stdout:
    # calls overlapping in threads let some of kfp's links through, and can leave sys.stdout pointing
    # at one of their buffers. Nothing of this script prints while it measures.
    stdout = sys.stdout
    with open(os.devnull, "w", encoding="utf-8") as sys.stdout:
        result = asyncio.run(measure(args))
    sys.stdout = stdout
    report(result)
    from benchgate.kit.files import write_json

    write_json(args.json, result)
    print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    main()
