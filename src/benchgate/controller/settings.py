"""The controller's settings, read once from its environment (the chart's ConfigMap and Secret).

KFP_HOST                          KFP API endpoint (required), as for `benchgate submit`
KFP_TOKEN                         bearer token for KFP (optional; from the chart's existingSecret);
                                  without it, the token file at KF_PIPELINES_SA_TOKEN_PATH (default
                                  /var/run/secrets/kubeflow/pipelines/token: the chart's
                                  kfp.serviceAccountToken), read again at every request
KFP_NAMESPACE                     profile namespace of the experiment on a multi-user KFP (default:
                                  each BenchmarkRun's own namespace; on a single-user KFP none)
KF_PIPELINES_UI_ENDPOINT          base URL of the KFP UI for status links (default: KFP_HOST)
MLFLOW_TRACKING_URI               MLflow server the pipeline logs to; the verdict is read back from it
MLFLOW_TRACKING_TOKEN             MLflow bearer token (optional; from the chart's existingSecret)
MLFLOW_UI_ENDPOINT                base URL of the MLflow UI for status links (default: the tracking URI)
BENCHGATE_KFP_EXPERIMENT          KFP experiment of the runs (default benchgate)
BENCHGATE_POLL_S                  seconds between looks at a submitted KFP run (default 30)
BENCHGATE_SCHEDULE_POLL_S         seconds between looks at each schedule (default 30)
BENCHGATE_REPAIR_S                seconds between looks for the KFP run of an unfinished BenchmarkRun
                                  whose status names none (a lost status write; default 300)
BENCHGATE_MAX_ACTIVE_PER_NAMESPACE  submitted or running BenchmarkRuns per namespace (default 4;
                                  0 = no limit); more wait in phase Pending
BENCHGATE_WATCH_NAMESPACE         watch only this namespace (the chart's namespaced-RBAC mode);
                                  empty: every namespace
BENCHGATE_PEERING                 name of the kopf peering object (a ClusterKopfPeering, or a
                                  KopfPeering in the watched namespace) through which controllers
                                  find each other: only the one with the highest priority acts, the
                                  others wait; empty (default): standalone, no peering
BENCHGATE_PEERING_PRIORITY        this controller's priority among its peers: an integer (default 0,
                                  so an instance started by hand yields to the chart's), or "auto":
                                  derived from the pod's uid (the POD_UID variable the chart sets
                                  from the downward API), distinct per pod, in [1000, 2^31 - 2]
BENCHGATE_METRICS_PORT            port of /metrics (Prometheus) and /readyz (default 0: not served)
BENCHGATE_POLICY                  the admin policy, a JSON object (the chart's `policy` value; empty:
                                  everything allowed): repositories, node selectors, tolerations, PVCs,
                                  who may promote baselines, GPUs per node (controller/decide/admin_policy.py)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from benchgate.controller.decide.admin_policy import Policy, policy_from_json
from benchgate.errors import ConfigError
from benchgate.kfp.api import Connection, connection_from_env
from benchgate.kfp.run_request import DEFAULT_EXPERIMENT

# How kopf retries a failing Kubernetes API request (seconds before each retry): kopf's own first steps,
# then every minute, about 15 minutes in all (kopf's default gives up after 54 s). A timer whose status
# write still fails after the last retry is never run again for that object until the controller
# restarts: an API server down for minutes (an upgrade, a failover) must not leave runs unfollowed.
API_RETRY_BACKOFFS_S: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13, 21, 30) + (60,) * 14


@dataclass(frozen=True)
class ControllerSettings:
    kfp: Connection
    experiment: str = DEFAULT_EXPERIMENT
    mlflow_uri: str = ""
    mlflow_ui: str = ""
    poll_s: float = 30.0
    schedule_poll_s: float = 30.0
    repair_s: float = 300.0
    max_active_per_namespace: int = 4
    watch_namespace: str = ""
    peering_name: str = ""
    peering_priority: int = 0
    # Not from the environment: seconds a controller's keep-alive in the peering object counts; a
    # controller that dies without saying goodbye is taken over from after this long. Tests shorten it.
    peering_lifetime_s: int = 60
    metrics_port: int = 0
    policy: Policy = field(default_factory=Policy)
    # Not from the environment: how long one look at MLflow (a verdict, a history check) waits for a
    # server that does not answer before it reports it down. Tests shorten it.
    mlflow_wait_s: float = 10.0
    # Not from the environment: the pauses between the tries of reading a run's verdict from MLflow
    # (three tries over about 8 s, each one's own wait aside). Read once, a verdict lost to a moment of
    # MLflow failing was lost for good: the run ended saying "MLflow unavailable". Tests shorten them.
    mlflow_retry_delays_s: tuple[float, ...] = (2.0, 6.0)
    # Not from the environment: the delays of kopf's retries of a failing API request (see
    # API_RETRY_BACKOFFS_S). Tests shorten them.
    api_backoffs_s: tuple[float, ...] = API_RETRY_BACKOFFS_S
    # Not from the environment: kopf's watch timeouts. Without them a watch the network drops
    # silently (a NAT or load balancer forgetting the connection) is never noticed: new objects stay
    # unseen until a restart while liveness stays green. The server ends each watch after
    # `watch_server_timeout_s` (kopf then resumes it); the client gives up on a silent one a little later.
    watch_server_timeout_s: float = 300.0
    watch_client_timeout_s: float = 330.0
    watch_connect_timeout_s: float = 30.0


def _number(environ: Mapping[str, str], key: str, default: float, minimum: float) -> float:
    raw = environ.get(key, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{key}: got {raw!r} (expected a number)") from None
    if value < minimum:
        raise ConfigError(f"{key}: got {raw!r} (must be >= {minimum:g})")
    return value


# "auto" priorities: above 0 (an instance started by hand keeps 0 and yields to the pods) and below
# 2^31 - 1, which stays free for `kopf freeze --priority 2147483647` to pause every pod.
AUTO_PRIORITY_MIN = 1000
AUTO_PRIORITY_MAX = 2**31 - 2


def priority_from_uid(uid: str) -> int:
    """A peering priority from a pod's uid: stable for the pod, distinct between pods in all but a
    ~1 in 2^31 chance (kopf pauses every controller whose priority equals another live one's)."""
    digest = int.from_bytes(hashlib.sha256(uid.encode("utf-8")).digest()[:8], "big")
    return AUTO_PRIORITY_MIN + digest % (AUTO_PRIORITY_MAX - AUTO_PRIORITY_MIN + 1)


def _priority(environ: Mapping[str, str]) -> int:
    key = "BENCHGATE_PEERING_PRIORITY"
    raw = environ.get(key, "").strip()
    if not raw:
        return 0
    if raw == "auto":
        uid = environ.get("POD_UID", "").strip()
        if not uid:
            raise ConfigError(f"{key}: got 'auto', which needs POD_UID (the pod's metadata.uid), unset")
        return priority_from_uid(uid)
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{key}: got {raw!r} (expected an integer or 'auto')") from None
def _port(environ: Mapping[str, str], key: str) -> int:
    raw = environ.get(key, "").strip()
    if raw and (not raw.isdigit() or int(raw) > 65535):
        raise ConfigError(f"{key}: got {raw!r} (expected a port, 1-65535, or 0 for none)")
    return int(raw or 0)


def settings_from_env(environ: Mapping[str, str] | None = None) -> ControllerSettings:
    env = os.environ if environ is None else environ
    mlflow_uri = env.get("MLFLOW_TRACKING_URI", "").strip()
    return ControllerSettings(
        kfp=connection_from_env(env),
        experiment=env.get("BENCHGATE_KFP_EXPERIMENT", "").strip() or DEFAULT_EXPERIMENT,
        mlflow_uri=mlflow_uri,
        mlflow_ui=(env.get("MLFLOW_UI_ENDPOINT", "").strip() or mlflow_uri).rstrip("/"),
        poll_s=_number(env, "BENCHGATE_POLL_S", 30.0, 0.01),
        schedule_poll_s=_number(env, "BENCHGATE_SCHEDULE_POLL_S", 30.0, 0.01),
        repair_s=_number(env, "BENCHGATE_REPAIR_S", 300.0, 0.01),
        max_active_per_namespace=int(_number(env, "BENCHGATE_MAX_ACTIVE_PER_NAMESPACE", 4, 0)),
        watch_namespace=env.get("BENCHGATE_WATCH_NAMESPACE", "").strip(),
        peering_name=env.get("BENCHGATE_PEERING", "").strip(),
        peering_priority=_priority(env),
        metrics_port=_port(env, "BENCHGATE_METRICS_PORT"),
        policy=policy_from_json(env.get("BENCHGATE_POLICY", "")),
    )
