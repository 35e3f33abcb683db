"""Kubeflow Trainer TrainJobs and their pods through the Kubernetes API, for the multi-node launcher.

What the launcher's service account needs (docs/multinode.md has the Role): trainjobs create, get and
delete; pods list; pods/log get. Objects travel as plain dicts: the TrainJob's typed model lives in
kfp/trainjob/job.py, the only module that knows the Trainer's alpha API.

Where rank 0 is: the Trainer runs a TrainJob as a JobSet of the same name, whose replicated job `node`
is one Indexed Job with a pod per node; node rank = the pod's Job completion index, and the torch runtime
puts rank 0 on node 0. The pods carry the labels below (the completion index also as an annotation on
clusters older than Kubernetes 1.28, which do not label it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchgate.errors import ConfigError, RunFailedError
from benchgate.kit import kube

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
PLURAL = "trainjobs"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
NODE = "node"  # the Trainer's name of the trainer nodes' replicated job and of their container
# What the API server says of a field its schema lacks under strict field validation (apiserver's
# strict decoding for a CRD: `unknown field "spec.x"`, or `.spec.x: field not declared in schema`).
UNKNOWN_FIELD = ("unknown field", "field not declared in schema")
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def current_namespace(path: Path = IN_CLUSTER_NAMESPACE) -> str:
    """The namespace this pod runs in (a KFP profile namespace), where its TrainJobs go."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        raise ConfigError(
            f"namespace: not given, and {path} is unreadable (not in a pod?): pass the namespace"
        ) from None


class TrainJobs:
    """The TrainJobs of one namespace, and their rank-0 pods and logs."""

    def __init__(self, namespace: str, host: str | None = None) -> None:
        from kubernetes import client

        api_client = kube.api_client(host)  # `host`: an explicit endpoint (an emulator in tests, a proxy)
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def where(self, name: str) -> str:
        return f"TrainJob {self.namespace}/{name}"

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create the TrainJob; False when one of that name exists already (a retried launcher)."""
        from kubernetes.client.exceptions import ApiException

        try:
            # Strict: an older Trainer whose CRD lacks a field benchgate sets (the GPU resources, suspend)
            # refuses the TrainJob instead of the API server silently dropping the field.
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, manifest, field_validation="Strict"
            )
        except ApiException as e:
            if e.status == 409:
                return False
            raise api_error(e, f"creating {self.where(manifest['metadata']['name'])}") from None
        return True

    def get(self, name: str) -> dict[str, Any] | None:
        """The TrainJob, or None when there is none of that name."""
        from kubernetes.client.exceptions import ApiException

        try:
            found = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"reading {self.where(name)}") from None
        return dict(found)

    def delete(self, name: str) -> bool:
        """Delete the TrainJob; its JobSet and pods go with it (background garbage collection).
        False when it was gone already."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, propagation_policy="Background"
            )
        except ApiException as e:
            if e.status == 404:
                return False
            raise api_error(e, f"deleting {self.where(name)}") from None
        return True

    def rank0_pod(self, name: str) -> dict[str, Any] | None:
        """The pod of node 0 of TrainJob `name` (rank 0 runs there): the newest one, when its Job
        replaced a failed pod; None before the JobSet has created it."""
        from kubernetes.client.exceptions import ApiException

        selector = f"{JOBSET_NAME}={name},{REPLICATED_JOB}={NODE}"
        try:
            response = self.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False
            )
        except ApiException as e:
            raise api_error(e, f"listing the pods of {self.where(name)}") from None
        pods = [p for p in json.loads(response.data).get("items", []) if _is_node_zero(p, name)]
        pods.sort(key=lambda p: str(p["metadata"].get("creationTimestamp", "")))
        return pods[-1] if pods else None

    def log(self, pod: str, tail_lines: int | None = None) -> str:
        """The `node` container's log of `pod`, as text (its last `tail_lines` lines when given)."""
        from kubernetes.client.exceptions import ApiException

        extra: dict[str, Any] = {"tail_lines": tail_lines} if tail_lines else {}
        try:
            # Raw bytes: the client would otherwise try the text as JSON and mangle a log that parses.
            response = self.core.read_namespaced_pod_log(
                pod, self.namespace, container=NODE, _preload_content=False, **extra
            )
        except ApiException as e:
            raise api_error(e, f"reading the log of pod {self.namespace}/{pod}") from None
        return bytes(response.data).decode("utf-8", errors="replace")


def _is_node_zero(pod: dict[str, Any], name: str) -> bool:
    """Whether `pod` is node 0 of TrainJob `name`: checked here too, not only by the label selector."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    index = labels.get(COMPLETION_INDEX, annotations.get(COMPLETION_INDEX))
    return labels.get(JOBSET_NAME) == name and labels.get(REPLICATED_JOB) == NODE and index == "0"


def api_error(error: Any, doing: str) -> Exception:
    """A kubernetes ApiException as benchgate's error: refused (4xx) is a ConfigError, with a hint for
    what a missing Role looks like; failing (5xx, no answer) is a RunFailedError."""
    try:
        message = str(json.loads(error.body or "")["message"])
    except (ValueError, KeyError, TypeError):
        message = str(error.body or error.reason)[:300]
    answer = f"{doing}: HTTP {error.status}: {message}"
    if error.status in (400, 422) and any(s in message for s in UNKNOWN_FIELD):
        answer += (
            " (the cluster's Kubeflow Trainer does not know these TrainJob fields: it is older than the one "
            "benchgate needs; upgrade it, see docs/multinode.md)"
        )
    elif error.status == 403:
        answer += " (the launcher's service account needs the Role in docs/multinode.md)"
    elif error.status == 404 and "could not find the requested resource" in message.lower():
        answer += " (is Kubeflow Trainer v2 installed? see docs/multinode.md)"
    if error.status is not None and 400 <= int(error.status) < 500:
        return ConfigError(answer)
    return RunFailedError(answer)
