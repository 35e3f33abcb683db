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
BENCHGATE_MAX_ACTIVE_PER_NAMESPACE  submitted or running BenchmarkRuns per namespace (default 4;
                                  0 = no limit); more wait in phase Pending
BENCHGATE_WATCH_NAMESPACE         watch only this namespace (the chart's namespaced-RBAC mode);
                                  empty: every namespace
BENCHGATE_POLICY                  the admin policy, a JSON object (the chart's `policy` value; empty:
                                  everything allowed): repositories, node selectors, tolerations, PVCs,
                                  who may promote baselines, GPUs per node (controller/policy.py)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from benchgate.controller.policy import Policy, policy_from_json
from benchgate.errors import ConfigError
from benchgate.kfp.api import Connection, connection_from_env
from benchgate.kfp.submit import DEFAULT_EXPERIMENT


@dataclass(frozen=True)
class ControllerSettings:
    kfp: Connection
    experiment: str = DEFAULT_EXPERIMENT
    mlflow_uri: str = ""
    mlflow_ui: str = ""
    poll_s: float = 30.0
    schedule_poll_s: float = 30.0
    max_active_per_namespace: int = 4
    watch_namespace: str = ""
    policy: Policy = field(default_factory=Policy)
    # Not from the environment: how long one look at MLflow (a verdict, a history check) waits for a
    # server that does not answer before it reports it down. Tests shorten it.
    mlflow_wait_s: float = 10.0


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
        max_active_per_namespace=int(_number(env, "BENCHGATE_MAX_ACTIVE_PER_NAMESPACE", 4, 0)),
        watch_namespace=env.get("BENCHGATE_WATCH_NAMESPACE", "").strip(),
        policy=policy_from_json(env.get("BENCHGATE_POLICY", "")),
    )
