"""benchgate's finalizer and the submission claim, applied (the decisions: `decide.fencing`).

kopf adds its finalizer to every object for which a handler requires one: a delete handler that is
not optional, and every timer (so that it can stop the timer before the object goes). Held for an
object's whole life, that leaves every run and schedule undeletable once the controller is gone (an
uninstall, a lost controller) and hangs the deletion of their namespace. So the timers here require
none (kopf stops a timer when its object disappears), and the delete handler's filter
(`fencing.finalized`) holds the finalizer only while a KFP run may be going.

`release` removes benchgate's finalizer from every BenchmarkRun and BenchmarkSchedule:
`benchgate controller-release-finalizers`, which the chart's pre-delete hook runs at uninstall.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import kopf

from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.decide import fencing

PLURALS = ("benchmarkruns", "benchmarkschedules")


def timers_without_finalizer(registry: kopf.OperatorRegistry) -> None:
    """Make every timer of `registry` require no finalizer (kopf's timers, in its spawning registry
    with its daemons, all require one and offer no option against it): the delete handler's filter
    alone decides. kopf keeps them as frozen dataclasses; a kopf release that changes that fails here,
    at start, loudly (and the operator test of a finished run's finalizer fails)."""
    spawning = registry._spawning
    spawning._handlers = [dataclasses.replace(h, requires_finalizer=False) for h in spawning._handlers]


def claim(api: Any, namespace: str, name: str, meta: Any, token: str) -> bool:
    """Claim the submission of run `name` (`fencing.claim_patch`); False when the API server refuses
    it for a stale resourceVersion (409: another writer came first; the next look reads again).
    `api`: a kubernetes CustomObjectsApi (it sends a dict as a merge patch)."""
    from kubernetes.client.exceptions import ApiException

    patch = fencing.claim_patch(meta, token)
    try:
        api.patch_namespaced_custom_object(GROUP, VERSION, namespace, "benchmarkruns", name, patch)
    except ApiException as e:
        if e.status == 409:
            return False
        raise
    return True


def release(api: Any, namespace: str | None, say: Callable[[str], None] = lambda _: None) -> int:
    """Remove benchgate's finalizer from every BenchmarkRun and BenchmarkSchedule (of `namespace`, or
    all): each patch carries the resourceVersion read, and one refused for it (409) is read and tried
    again. Every other finalizer stays. Returns how many objects were released."""
    from kubernetes.client.exceptions import ApiException

    count = 0
    for plural in PLURALS:
        if namespace:
            found = api.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
        else:
            found = api.list_cluster_custom_object(GROUP, VERSION, plural)
        for item in found.get("items", []):
            meta = item.get("metadata", {})
            for _attempt in range(5):
                kept = fencing.released(meta.get("finalizers"))
                if kept is None:
                    break
                patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "finalizers": kept}}
                ns, name = meta["namespace"], meta["name"]
                try:
                    api.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, name, patch)
                except ApiException as e:
                    if e.status == 404:
                        break  # gone meanwhile: nothing holds it
                    if e.status != 409:
                        raise
                    meta = api.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)["metadata"]
                    continue
                say(f"released {plural}/{ns}/{name}")
                count += 1
                break
    return count
