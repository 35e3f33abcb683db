"""The controller's three remote services, each behind the module benchgate's CLI already uses:

- KFP through `benchgate.kfp.submit` (`ensure_run`: exactly once per run name, attached to whatever
  its state, so a BenchmarkRun mirrors a FAILED KFP run; `benchgate submit --rerun` starts attempts);
- MLflow through `benchgate.tracking.client` / `tracking_read` (the verdict of the gate run a KFP run logged,
  and the history around it);
- the Kubernetes API for the objects the handlers create, list and delete (kopf itself watches and
  patches through its own client).

All three are synchronous clients; the handlers call them through `asyncio.to_thread`. Each call to KFP,
and each failed read of MLflow, is counted in the controller's metrics (`metrics.py`).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.metrics import ControllerMetrics
from benchgate.controller.settings import ControllerSettings
from benchgate.errors import ConfigError, RunFailedError
from benchgate.kfp.api import KfpApi, KfpRefused, kfp_namespace, preflight
from benchgate.kfp.submit import compile_package, ensure_run, load_package
from benchgate.kit import kube

if TYPE_CHECKING:
    from benchgate.tracking.client import Tracker
    from benchgate.tracking.read import RunHistory

T = TypeVar("T")


def _kfp_outcome(error: BaseException) -> str:
    if isinstance(error, KfpRefused):
        return "unauthorized"
    if isinstance(error, ConfigError):  # KFP answered 4xx, or refused a request (KfpRejected)
        return "rejected"
    return "unavailable"  # RunFailedError: unreachable, 5xx, no answer in time


def pipeline_package(arguments: dict[str, Any], directory: Path) -> Path:
    """The pipeline a run's arguments are for, compiled into `directory`: the suite pipeline's arguments
    carry its entries (controller/spec/suite.py), any other the gate pipeline's."""
    if "entries" in arguments:
        from benchgate.kfp.suite.pipeline import compile_suite_package

        return compile_suite_package(directory)
    return compile_package(directory)


class KfpRuns:
    """Submit-once, state, terminate. Each pipeline (the gate's, the suite's) is compiled and loaded once
    per controller, on first use: a burst of BenchmarkRuns must not parse it once each."""

    def __init__(self, settings: ControllerSettings, metrics: ControllerMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._api: KfpApi | None = None
        self._multi_user = False
        self._specs: dict[str, dict[str, Any]] = {}  # by the package's file name
        self._experiment_ids: dict[str | None, str] = {}  # by the namespace it is filed under
        self._lock = threading.Lock()
        self._workdir = tempfile.TemporaryDirectory(prefix="benchgate-controller-")

    def api(self) -> KfpApi:
        with self._lock:
            if self._api is None:
                # Unreachable vs refused, in plain words; and whether experiments need a namespace.
                self._multi_user = preflight(self.settings.kfp)
                self._api = KfpApi(self.settings.kfp)
            return self._api

    def experiment_id(self, namespace: str) -> str:
        """The experiment of the runs of BenchmarkRuns in `namespace`: on a multi-user KFP, one per
        namespace (its Kubeflow profile), where the team sees its runs; else one for all."""
        api = self.api()
        filed_under = kfp_namespace(self.settings.kfp.namespace, self._multi_user, namespace)
        with self._lock:  # once: concurrent first submissions must not race to create it
            if filed_under not in self._experiment_ids:
                self._experiment_ids[filed_under] = api.experiment_id(self.settings.experiment, filed_under)
            return self._experiment_ids[filed_under]

    def pipeline_spec(self, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """The compiled pipeline for `arguments` (the gate pipeline's without any)."""
        kind = "suite" if arguments is not None and "entries" in arguments else "gate"
        with self._lock:
            if kind not in self._specs:
                directory = Path(self._workdir.name) / kind
                directory.mkdir(exist_ok=True)
                self._specs[kind] = load_package(pipeline_package(arguments or {}, directory))
            return self._specs[kind]

    def _counted(self, operation: str, call: Callable[[], T]) -> T:
        try:
            result = call()
        except Exception as e:
            self.metrics.kfp_request(operation, _kfp_outcome(e))
            raise
        self.metrics.kfp_request(operation, "ok")
        return result

    def forget_experiment(self, namespace: str) -> None:
        """Drop the cached experiment id of `namespace`: the next call looks it up (or creates it) again."""
        filed_under = kfp_namespace(self.settings.kfp.namespace, self._multi_user, namespace)
        with self._lock:
            self._experiment_ids.pop(filed_under, None)

    def _in_experiment(self, namespace: str, call: Callable[[str], T]) -> T:
        """`call` with the experiment id of `namespace`. A failed call forgets the cached id: an
        experiment deleted in KFP (KFP answers 404 for runs created in it) would otherwise fail every
        submission until the controller restarts; the next look finds or recreates it. Credentials
        refused are no sign of a stale id."""
        try:
            return call(self.experiment_id(namespace))
        except KfpRefused:
            raise
        except (ConfigError, RunFailedError):
            self.forget_experiment(namespace)
            raise

    def ensure(self, run_name: str, arguments: dict[str, Any], namespace: str) -> tuple[str, bool]:
        def submit(experiment_id: str) -> tuple[str, bool]:
            return ensure_run(
                self.api(), experiment_id, run_name, arguments, lambda: self.pipeline_spec(arguments)
            )

        return self._counted("submit", lambda: self._in_experiment(namespace, submit))

    def find(self, run_name: str, namespace: str) -> str | None:
        return self._counted(
            "find", lambda: self._in_experiment(namespace, lambda e: self.api().find_run(e, run_name))
        )

    def state(self, run_id: str) -> tuple[str, list[tuple[str, str]]]:
        return self._counted("state", lambda: self.api().run_state(run_id))

    def terminate(self, run_id: str) -> bool:
        """False when the run had already ended or was being canceled: nothing to terminate."""
        return self._counted("terminate", lambda: self.api().terminate_run(run_id))

    def url(self, run_id: str) -> str:
        return self.settings.kfp.run_url(run_id)


class Verdicts:
    """The gate run a KFP run logged to MLflow: its verdict tag, gate figures and UI link; and the history
    of its machine profile and workload, which a schedule's history check judges."""

    def __init__(self, settings: ControllerSettings, metrics: ControllerMetrics) -> None:
        self.settings = settings
        self.metrics = metrics

    def _connect(self, experiment: str) -> Tracker:
        from benchgate.config import parse_config
        from benchgate.tracking import client as tracking

        config = parse_config({"tracking": {"uri": self.settings.mlflow_uri, "experiment": experiment}})
        return tracking.connect(config, budget_s=self.settings.mlflow_wait_s)

    def find(self, kfp_run_id: str, experiment: str, suite: bool = False) -> dict[str, Any] | None:
        """{run_id, url, tags, metrics} of the gate run (with `suite`, of the suite's parent run, whose
        verdict is the worst of its entries'), or None without MLflow or before it is logged. MLflow
        failing is tried again (settings.mlflow_retry_delays_s) before its error is raised."""
        if not self.settings.mlflow_uri:
            return None
        from benchgate.tracking.read import gate_run_for_kfp
        from benchgate.tracking.suite_runs import suite_run_for_kfp
        from benchgate.tracking.view import ui_url

        lookup = suite_run_for_kfp if suite else gate_run_for_kfp
        delays = self.settings.mlflow_retry_delays_s
        for attempt in range(len(delays) + 1):
            try:
                run = lookup(self._connect(experiment), kfp_run_id)
                break
            except Exception:
                self.metrics.mlflow_error("verdict")
                if attempt == len(delays):
                    raise
            # A bounded wait, in the handler's worker thread (the handlers call this through
            # asyncio.to_thread): the event loop and the other runs go on meanwhile.
            time.sleep(delays[attempt])
        if run is None:
            return None
        base = self.settings.mlflow_ui
        url = ui_url(base, run.info.experiment_id, run.info.run_id) if base else ""
        return {"run_id": run.info.run_id, "url": url, "tags": run.data.tags, "metrics": run.data.metrics}

    def history(self, kfp_run_id: str, experiment: str, runs: int) -> RunHistory | None:
        """The newest `runs` gate runs of the profile and workload of the gate run a KFP run logged; None
        when MLflow has no such gate run. Needs settings.mlflow_uri; raises what MLflow raises."""
        from benchgate.tracking.read import kfp_run_history

        try:
            return kfp_run_history(self._connect(experiment), kfp_run_id, runs)
        except Exception:
            self.metrics.mlflow_error("history")
            raise


class KubeRuns:
    """BenchmarkRun objects through the Kubernetes API: create, list by namespace, delete."""

    def __init__(self, host: str | None = None) -> None:
        from kubernetes import client

        api_client = kube.api_client(host)  # `host`: an explicit endpoint (an emulator in tests, a proxy)
        self.api = client.CustomObjectsApi(api_client)

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create `manifest`; False when an object of that name exists already (a retried create).
        The API server refusing it is a ConfigError with its answer; failing (5xx), a RunFailedError."""
        from kubernetes.client.exceptions import ApiException

        namespace = manifest["metadata"]["namespace"]
        try:
            self.api.create_namespaced_custom_object(GROUP, VERSION, namespace, "benchmarkruns", manifest)
        except ApiException as e:
            if e.status == 409:
                return False
            answer = f"creating BenchmarkRun {namespace}/{manifest['metadata']['name']}: HTTP {e.status}: "
            answer += _api_message(e)
            if e.status is not None and 400 <= int(e.status) < 500:
                raise ConfigError(answer) from None
            raise RunFailedError(answer) from None
        return True

    def list(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The BenchmarkRuns of `namespace`, those `label_selector` selects only when given (a schedule
        lists its own runs, not every run of the namespace at every look)."""
        found = self.api.list_namespaced_custom_object(
            GROUP, VERSION, namespace, "benchmarkruns", label_selector=label_selector
        )
        return [
            item for item in found.get("items", []) if item.get("metadata", {}).get("namespace") == namespace
        ]

    def delete(self, namespace: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_custom_object(GROUP, VERSION, namespace, "benchmarkruns", name)
        except ApiException as e:
            if e.status != 404:  # already gone is what we wanted
                raise


def _api_message(error: Any) -> str:
    """The API server's own words from a kubernetes ApiException: the Status object's message, else
    the raw body or reason."""
    try:
        return str(json.loads(error.body or "")["message"])
    except (ValueError, KeyError, TypeError):
        return str(error.body or error.reason)[:300]
