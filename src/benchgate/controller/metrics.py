"""The controller's Prometheus metrics: what a platform team alerts on.

- `benchgate_benchmarkruns{namespace, phase}`: BenchmarkRuns by phase, as this controller last saw them
  (phase `New` before the controller wrote one);
- `benchgate_queue_depth{namespace}`: runs waiting for a slot or for KFP (phase Pending);
- `benchgate_kfp_requests_total{operation, outcome}`: every call to KFP, `ok` or why not
  (`unavailable`: unreachable or 5xx; `rejected`: a 4xx answer; `unauthorized`: the token refused);
- `benchgate_mlflow_errors_total{operation}`: MLflow reads that failed (a verdict, a history check);
- `benchgate_controller_active`: 1 while this instance acts, 0 while it is paused by a peer or has not
  read the peering object yet (`activity`): every started instance is Ready, this says which acts;
- `benchgate_submit_latency_seconds`: from a BenchmarkRun's creation to its KFP run, for the
  submissions this controller saw happen (runs already submitted when it started are not counted:
  their latency would be the controller's downtime).

The run gauges are computed when scraped from what the watch delivered (`observe_run`), so they cost
nothing per event beyond a dict update and never drift from a missed increment. Each controller has a
registry of its own (two in one test process must not share counters).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from benchgate.controller.spec.status import PENDING, parse_time

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
KFP_OUTCOMES = ("ok", "unavailable", "rejected", "unauthorized")
# Seconds: a submission is normally a second or two; minutes mean KFP was down or the queue was full.
LATENCY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
NO_PHASE = "New"


@dataclass
class _Seen:
    phase: str
    submitted: bool


class _RunGauges(Collector):
    """Runs by namespace and phase, and the queue depth, from the last status seen of each run."""

    def __init__(self, runs: Mapping[tuple[str, str], _Seen]) -> None:
        self.runs = runs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_phase = Tally((namespace, seen.phase) for (namespace, _), seen in list(self.runs.items()))
        runs = GaugeMetricFamily(
            "benchgate_benchmarkruns", "BenchmarkRuns by namespace and phase.", labels=["namespace", "phase"]
        )
        queue = GaugeMetricFamily(
            "benchgate_queue_depth",
            "BenchmarkRuns waiting for a slot of their namespace or for KFP (phase Pending).",
            labels=["namespace"],
        )
        namespaces = sorted({namespace for namespace, _ in by_phase})
        for (namespace, phase), count in sorted(by_phase.items()):
            runs.add_metric([namespace, phase], count)
        for namespace in namespaces:
            queue.add_metric([namespace], by_phase.get((namespace, PENDING), 0))
        yield runs
        yield queue


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._runs: dict[tuple[str, str], _Seen] = {}
        self.registry.register(_RunGauges(self._runs))
        self.kfp_requests = Counter(
            "benchgate_kfp_requests",
            "Calls to the KFP API by operation and outcome.",
            ["operation", "outcome"],
            registry=self.registry,
        )
        self.mlflow_errors = Counter(
            "benchgate_mlflow_errors",
            "MLflow reads that failed, by operation.",
            ["operation"],
            registry=self.registry,
        )
        self.active = Gauge(
            "benchgate_controller_active",
            "1 while this controller instance acts, 0 while paused by a peer.",
            registry=self.registry,
        )
        self.submit_latency = Histogram(
            "benchgate_submit_latency_seconds",
            "Seconds from a BenchmarkRun's creation to its KFP run.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def set_active(self, active: bool) -> None:
        """This instance acts (True) or is paused by its peers (False)."""
        self.active.set(1 if active else 0)

    def kfp_request(self, operation: str, outcome: str) -> None:
        if outcome not in KFP_OUTCOMES:
            raise ValueError(f"outcome: got {outcome!r} (expected one of {', '.join(KFP_OUTCOMES)})")
        self.kfp_requests.labels(operation=operation, outcome=outcome).inc()

    def mlflow_error(self, operation: str) -> None:
        self.mlflow_errors.labels(operation=operation).inc()

    def observe_run(
        self, event: str | None, namespace: str, name: str, meta: Mapping[str, Any], status: Any
    ) -> None:
        """One watch event of a BenchmarkRun (`event`: ADDED, MODIFIED, DELETED, or None for kopf's
        initial listing). A run seen unsubmitted and then with a KFP run records its submit latency."""
        key = (namespace, name)
        if event == "DELETED" or meta.get("deletionTimestamp"):
            self._runs.pop(key, None)
            return
        status = status or {}
        submitted = bool(status.get("kfpRunId"))
        before = self._runs.get(key)
        self._runs[key] = _Seen(str(status.get("phase") or NO_PHASE), submitted)
        if before is not None and not before.submitted and submitted:
            latency = _seconds_between(meta.get("creationTimestamp"), status.get("startTime"))
            if latency is not None:
                self.submit_latency.observe(latency)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return bytes(generate_latest(self.registry))


def _seconds_between(start: str | None, end: str | None) -> float | None:
    began: datetime | None = parse_time(start)
    ended: datetime | None = parse_time(end)
    if began is None or ended is None:
        return None
    return max(0.0, (ended - began).total_seconds())
