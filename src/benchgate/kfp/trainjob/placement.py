"""Where a TrainJob's pods may go and who admits them, as plain manifest parts: the Kueue queue, one bench
per node, Guaranteed QoS and the launcher pod as the TrainJob's owner. Pure: job.py puts these parts into
the Trainer's model.

Kueue (https://kueue.sigs.k8s.io, its TrainJob integration `trainer.kubeflow.org/trainjob`) admits a
TrainJob labelled `kueue.x-k8s.io/queue-name: <LocalQueue>`: it holds it with `spec.suspend: true` until
the ClusterQueue has quota, then unsuspends it. The launcher creates it suspended already, so no pod
starts in the moment before Kueue's webhook would have suspended it.

Exclusive placement: the JobSet annotation `alpha.jobset.sigs.k8s.io/exclusive-topology` gives each
*child Job* its own topology domain, and puts every pod of one Job into its leader's domain. The Trainer
runs all nodes of a TrainJob as ONE Indexed Job (replicated job `node`, a pod per node), so that
annotation with `kubernetes.io/hostname` would pin every node's pod onto one host. One bench per node is
instead a required pod anti-affinity on the host name against every benchgate bench pod (this
TrainJob's other nodes and any other bench), with whole GPUs per pod and requests equal to limits.
"""

from __future__ import annotations

import os
from typing import Any

from benchgate.errors import ConfigError

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
BENCH_POD = "benchgate.dev/bench-node"  # label on every node pod of a benchgate TrainJob
HOSTNAME = "kubernetes.io/hostname"
# The launcher pod's identity, from the downward API (the pipeline sets both on the launcher task).
POD_NAME_VARIABLE = "BENCHGATE_POD_NAME"
POD_UID_VARIABLE = "BENCHGATE_POD_UID"
_LABEL_VALUE_MAX = 63


def queue_labels(queue_name: str) -> dict[str, str]:
    """The Kueue label for `queue_name` ({} for none); a name that is no label value is refused."""
    if not queue_name:
        return {}
    name_ok = len(queue_name) <= _LABEL_VALUE_MAX and all(ch.isalnum() or ch in "-." for ch in queue_name)
    if not name_ok or not queue_name[0].isalnum() or not queue_name[-1].isalnum():
        raise ConfigError(
            f"queueName: got {queue_name!r}, expected a LocalQueue name (lowercase letters, digits, '-', "
            "'.'; at most 63 characters)"
        )
    return {QUEUE_LABEL: queue_name}


def exclusive_affinity() -> dict[str, Any]:
    """A pod affinity that keeps each benchgate bench pod alone on its node (see the module doc)."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchExpressions": [{"key": BENCH_POD, "operator": "Exists"}]},
                    "topologyKey": HOSTNAME,
                }
            ]
        }
    }


def guaranteed(cpu: str, memory: str, exclusive: bool) -> tuple[dict[str, str], dict[str, str]]:
    """The CPU and memory (requests, limits) of a node's pod. Exclusive placement asks for Guaranteed
    QoS (requests == limits, so the kubelet's static CPU manager can pin whole cores to the bench), which
    needs both figures; otherwise requests only, so the pod is Burstable and never OOM-killed at a
    limit mid-measurement."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    if not exclusive:
        return requests, {}
    missing = [k for k in ("cpu", "memory") if k not in requests]
    if missing:
        raise ConfigError(
            f"exclusive placement: {' and '.join(missing)} request not given (Guaranteed QoS sets limits "
            "equal to the requests: give cpu_request and memory_request, or turn exclusive placement off)"
        )
    return requests, dict(requests)


def launcher_owner(environ: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The launcher pod as the TrainJob's owner, from the downward API variables, so the garbage
    collector deletes the TrainJob (and frees its GPU nodes) when the launcher pod is evicted or deleted
    before it could. [] where the variables are not set (a launcher outside a pod, tests)."""
    environ = dict(os.environ) if environ is None else environ
    name, uid = environ.get(POD_NAME_VARIABLE, ""), environ.get(POD_UID_VARIABLE, "")
    if not name or not uid:
        return []
    # No blockOwnerDeletion: it needs the update verb on pods/finalizers, which the launcher lacks.
    return [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]
