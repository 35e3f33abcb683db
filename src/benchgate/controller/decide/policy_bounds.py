"""The admin policy's bounds on where a run reports and what it may hold: the MLflow experiments a
namespace's runs may log into (`experiments`), the one tracking server (the controller's: a tracking URI
in a spec's config is refused under every policy, or results and the MLflow credentials would go to any
server a spec names), and a run's deadline, accelerator and GPU pods' requests (a run whose pod can
never be scheduled would otherwise wait for ever).

Pure: no kopf, no I/O, no clock. `policy_checks.check` calls `refusals` with the other checks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from benchgate.controller.decide.admin_policy import Policy
from benchgate.controller.decide.quantity import quantity
from benchgate.controller.spec.resources import BenchmarkRunSpec

__all__ = ["Refusal", "experiment_allowed", "refusals"]


@dataclass(frozen=True)
class Refusal:
    """One field the policy refuses: the condition's reason, and a message naming field and value."""

    reason: str
    message: str


def refusals(spec: BenchmarkRunSpec, namespace: str, policy: Policy) -> list[Refusal]:
    """Every bound of this module `spec` (of a run in `namespace`) goes past."""
    return [
        *_experiments(spec, namespace, policy),
        *_tracking_uris(spec),
        *_deadline(spec, policy),
        *_resources(spec, policy),
    ]


def experiment_allowed(name: str, allowed: tuple[str, ...]) -> bool:
    """Whether experiment `name` is one of `allowed` (a name ending in '*' allows every name it starts)."""
    return any(name.startswith(a[:-1]) if a.endswith("*") else name == a for a in allowed)


def _tracking_settings(spec: BenchmarkRunSpec, key: str) -> Iterator[tuple[str, Any]]:
    """Each `tracking.<key>` a spec's config (or a suite entry's config) sets, with its field's path."""
    configs = [("spec.config", spec.config)]
    if spec.suite is not None:
        configs += [(f"spec.suite.entries[{i}].config", e.config) for i, e in enumerate(spec.suite.entries)]
    for where, config in configs:
        tracking = config.get("tracking")
        if isinstance(tracking, Mapping) and key in tracking:
            yield f"{where}.tracking.{key}", tracking[key]


def _experiments(spec: BenchmarkRunSpec, namespace: str, policy: Policy) -> list[Refusal]:
    allowed = policy.experiments_of(namespace)
    if allowed is None:
        return []
    named = [("spec.mlflowExperiment", spec.mlflow_experiment), *_tracking_settings(spec, "experiment")]
    which = f"only {', '.join(allowed)}" if allowed else "none"
    return [
        Refusal(
            "ExperimentNotAllowed",
            f"{field}: got {value!r} (runs of namespace {namespace} may log into {which}: the policy's "
            "experiments)",
        )
        for field, value in named
        if not (isinstance(value, str) and experiment_allowed(value, allowed))
    ]


def _tracking_uris(spec: BenchmarkRunSpec) -> list[Refusal]:
    # Empty is the default (the controller's server), not a destination.
    return [
        Refusal(
            "TrackingUriNotAllowed",
            f"{field}: got {value!r} (a run reports to the controller's tracking server only: the chart's "
            "mlflow.trackingUri, or the cluster default; remove it from the spec)",
        )
        for field, value in _tracking_settings(spec, "uri")
        if value not in ("", None)
    ]


def _deadline(spec: BenchmarkRunSpec, policy: Policy) -> list[Refusal]:
    bound, asked = policy.max_active_deadline_seconds, spec.active_deadline_seconds
    if not bound or asked is None or asked <= bound:
        return []
    return [
        Refusal(
            "DeadlineNotAllowed",
            f"spec.activeDeadlineSeconds: got {asked} (the policy's maxActiveDeadlineSeconds is {bound})",
        )
    ]


def _resources(spec: BenchmarkRunSpec, policy: Policy) -> list[Refusal]:
    found = []
    if policy.accelerator_types and spec.accelerator_type not in policy.accelerator_types:
        found.append(
            Refusal(
                "AcceleratorNotAllowed",
                f"spec.acceleratorType: got {spec.accelerator_type!r} (the policy's acceleratorTypes allow "
                f"only {', '.join(policy.accelerator_types)})",
            )
        )
    for field, asked, bound, key in (
        ("spec.cpuRequest", spec.cpu_request, policy.max_cpu_request, "maxCpuRequest"),
        ("spec.memoryRequest", spec.memory_request, policy.max_memory_request, "maxMemoryRequest"),
    ):
        if bound and quantity(asked) > quantity(bound):
            found.append(
                Refusal(
                    "RequestNotAllowed", f"{field}: got {asked!r} (more than the policy's {key} {bound!r})"
                )
            )
    return found
