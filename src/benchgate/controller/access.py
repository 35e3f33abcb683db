"""Every Kubernetes API access the controller makes: the chart's RBAC is exactly this, no more.

Two tests hold it to that: the chart test renders the Role/ClusterRole and compares its rules with
`required_access(...)` of its mode both ways, and the operator test records each request the real
controller sends to the emulated API server and fails on one these rules would not allow.

Why each verb:
- benchmarkruns: kopf lists and watches them and patches its progress and finalizer annotations,
  the controller its submission claim (an annotation and the finalizer); the schedule creates them,
  and deletes them for history limits, `Replace` and `ttlSecondsAfterFinished`.
- benchmarkschedules: listed and watched, patched for kopf's annotations.
- the status subresources: kopf and the handlers write `.status` through them.
- benchmarkschedules/finalizers (update): a scheduled run's owner reference sets blockOwnerDeletion,
  which API servers that enforce owner references (OpenShift) allow only to who may update the
  owner's finalizers. Nothing updates them otherwise.
- events: kopf posts one per handler failure and the handlers one per rejection.
- kopf.dev clusterkopfpeerings (cluster-wide) or kopfpeerings (namespaced mode), only with peering:
  kopf lists and watches the peering object and merge-patches its own keep-alive into it (kopf's CRD
  has no status subresource, and kopf never gets the object by name).
Nothing else: no secrets (tokens arrive as environment variables from the chart's secret), no pods,
no namespaces (kopf runs with scanning off and watches either all namespaces or its own).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

GROUP = "benchgate.dev"
VERSION = "v1alpha1"
# The finalizer that holds a BenchmarkRun's deletion until its KFP run is terminated, named for the
# group; earlier releases left kopf's default, which the controller replaces when it meets it.
FINALIZER = f"{GROUP}/kfp-run"
KOPF_DEFAULT_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


@dataclass(frozen=True)
class Access:
    api_group: str
    resource: str
    verbs: tuple[str, ...]


REQUIRED_ACCESS: tuple[Access, ...] = (
    Access(GROUP, "benchmarkruns", ("create", "delete", "list", "patch", "watch")),
    Access(GROUP, "benchmarkruns/status", ("patch",)),
    Access(GROUP, "benchmarkschedules", ("list", "patch", "watch")),
    Access(GROUP, "benchmarkschedules/status", ("patch",)),
    Access(GROUP, "benchmarkschedules/finalizers", ("update",)),
    Access("", "events", ("create",)),
)


PEERING_GROUP = "kopf.dev"
CLUSTER_PEERING = Access(PEERING_GROUP, "clusterkopfpeerings", ("list", "patch", "watch"))
NAMESPACED_PEERING = Access(PEERING_GROUP, "kopfpeerings", ("list", "patch", "watch"))


def required_access(*, namespaced: bool, peering: bool) -> tuple[Access, ...]:
    """The rules of the chart's (Cluster)Role: `REQUIRED_ACCESS`, plus the peering object's kind
    when controllers peer (a namespaced controller peers in a KopfPeering of its namespace)."""
    if not peering:
        return REQUIRED_ACCESS
    return (*REQUIRED_ACCESS, NAMESPACED_PEERING if namespaced else CLUSTER_PEERING)


def allows(api_group: str, resource: str, verb: str, access: Iterable[Access] = REQUIRED_ACCESS) -> bool:
    return any(a.api_group == api_group and a.resource == resource and verb in a.verbs for a in access)


# What the controller asks of a multi-user Kubeflow Pipelines, whose API server authorizes each call by
# a SubjectAccessReview on these resources of group pipelines.kubeflow.org in the profile namespace
# (kubeflow/pipelines backend/src/apiserver/common/const.go): the experiment is found by name (list)
# or created; runs are created, found by name after a lost status write (list), followed (get) and
# terminated when their BenchmarkRun is deleted or times out. The chart's `-kfp` ClusterRole is exactly
# this, bound in each profile of `kfp.profiles`: nothing of Kubeflow's `kubeflow-edit` (pods, secrets,
# notebooks of the profile) is needed.
KFP_GROUP = "pipelines.kubeflow.org"
KFP_ACCESS: tuple[Access, ...] = (
    Access(KFP_GROUP, "experiments", ("create", "list")),
    Access(KFP_GROUP, "runs", ("create", "get", "list", "terminate")),
)
