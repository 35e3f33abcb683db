"""The admin policy applied to one parsed BenchmarkRun spec: `check` names each field the policy
(admin_policy.py) refuses, with the condition's reason, and says how the run goes where it is admitted
(updateBaseline perhaps lowered, its effective deadline). Repositories, placement, PVCs, workloads,
world size and promotion are checked here; experiments, tracking, deadlines and resources in
`policy_bounds`.

Pure: no kopf, no I/O, no clock. Which schedule made a run is `admission`'s question; this module gets
the answer as a boolean.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from benchgate.controller.decide import policy_bounds as bounds
from benchgate.controller.decide.admin_policy import EVERY_NAMESPACE, Policy, UpdateBaseline
from benchgate.controller.decide.policy_bounds import Refusal
from benchgate.controller.decide.repository_url import under
from benchgate.controller.spec.resources import BenchmarkRunSpec, Toleration
from benchgate.workloads.origin import OWN_WORKLOADS

__all__ = ["Admission", "Refusal", "check", "covers"]


def covers(allowed: Toleration, toleration: Toleration) -> bool:
    """Whether every taint `toleration` tolerates is tolerated by `allowed` too (key, value, effect)."""
    every_key = allowed.key == "" and allowed.operator == "Exists"
    if not every_key and (toleration.key == "" or toleration.key != allowed.key):
        return False
    if allowed.operator == "Equal" and (toleration.operator != "Equal" or toleration.value != allowed.value):
        return False
    return allowed.effect == "" or allowed.effect == toleration.effect


@dataclass(frozen=True)
class Admission:
    """The policy's answer for one run: what it refuses (nothing: admitted) and the updateBaseline the
    run goes with, lowered from `auto` to `never` where it may not promote (`lowered` says why), and
    the activeDeadlineSeconds it goes with (its own, else the policy's default; None: none)."""

    refusals: tuple[Refusal, ...]
    update_baseline: UpdateBaseline
    lowered: str = ""
    active_deadline_seconds: int | None = None

    @property
    def admitted(self) -> bool:
        return not self.refusals


def check(spec: BenchmarkRunSpec, namespace: str, schedule_owned: bool, policy: Policy) -> Admission:
    """Whether `policy` admits the run of `spec` in `namespace`; `schedule_owned`: a BenchmarkSchedule
    created it (checked by `admission.schedule_owned`, not read off its ownerReferences)."""
    refusals = [
        *_repository(spec, policy),
        *_placement(spec, policy),
        *_pvc(spec, namespace, policy),
        *_workloads(spec, policy),
    ]
    refusals.extend(_world_size(spec, policy))
    refusals.extend(bounds.refusals(spec, namespace, policy))
    update_baseline: UpdateBaseline = spec.update_baseline
    lowered = ""
    if update_baseline != "never" and not policy.may_promote(namespace, schedule_owned):
        why = _why_no_promotion(namespace, policy)
        if update_baseline == "always":
            refusals.append(Refusal("PromotionNotAllowed", f"spec.updateBaseline: got 'always' ({why})"))
        else:
            update_baseline, lowered = "never", f"spec.updateBaseline: auto runs as never ({why})"
    deadline = policy.deadline_of(spec.active_deadline_seconds)
    return Admission(tuple(refusals), update_baseline, lowered, deadline)


def _world_size(spec: BenchmarkRunSpec, policy: Policy) -> list[Refusal]:
    """A world size must fit one node of maxGpusPerNode GPUs, unless the run spans nodes (a multiNode
    spec with a larger worldSize) and the policy's multiNode allows that: then each node's share must."""
    bound = policy.max_gpus_per_node
    nodes = spec.multi_node
    across = nodes is not None and spec.world_size > nodes.gpus_per_node
    if not bound:
        return []
    if nodes is not None and across and policy.multi_node:
        if nodes.gpus_per_node <= bound:
            return []
        return [
            Refusal(
                "WorldSizeExceedsNode",
                f"spec.multiNode.gpusPerNode: got {nodes.gpus_per_node} (each node of a multi-node run "
                f"must fit one node, and the policy's maxGpusPerNode is {bound})",
            )
        ]
    if spec.world_size <= bound:
        return []
    if across:
        why = "a multi-node run (spec.multiNode) needs the policy's multiNode: true, which is false"
    else:
        why = "a multi-node run (spec.multiNode) may exceed it where the policy's multiNode is true"
    return [
        Refusal(
            "WorldSizeExceedsNode",
            f"spec.worldSize: got {spec.world_size} (a world size must fit on one node, and the policy's "
            f"maxGpusPerNode is {bound}; {why})",
        )
    ]


def _repository(spec: BenchmarkRunSpec, policy: Policy) -> list[Refusal]:
    if not policy.repositories:
        return []
    allowed = ", ".join(policy.repositories)
    try:
        if any(under(spec.repository, prefix) for prefix in policy.repositories):
            return []
        why = f"not under a repository prefix the policy allows: {allowed}"
    except ValueError as e:
        why = f"{e}; the policy allows only repositories under {allowed}"
    return [Refusal("RepositoryNotAllowed", f"spec.repository: got {spec.repository!r} ({why})")]


def _workloads(spec: BenchmarkRunSpec, policy: Policy) -> list[Refusal]:
    """A run's workloads (its own, or each suite entry's) must be the repository's code or benchgate's:
    never a module of the standard library or another part of benchgate, whose functions would run
    with the spec's arguments (`os:system` with `{command: ...}`). Where a task checks the commit out,
    it also refuses any module whose file is outside the checkout (workloads/origin.py)."""
    named = (
        [(f"spec.suite.entries[{i}].workload", e.workload) for i, e in enumerate(spec.suite.entries)]
        if spec.suite is not None
        else [("spec.workload", spec.workload)]
    )
    refusals = []
    for field, value in named:
        module = value.partition(":")[0]
        why = _foreign(module)
        if (
            why is None
            and policy.workload_modules
            and not any(
                module == prefix or module.startswith(prefix + ".") for prefix in policy.workload_modules
            )
        ):
            why = f"the policy allows workloads only from {', '.join(policy.workload_modules)}"
        if why is not None:
            refusals.append(Refusal("WorkloadNotAllowed", f"{field}: got {value!r} ({why})"))
    return refusals


def _foreign(module: str) -> str | None:
    """Why `module` is not a repository's workload module, or None."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names:
        return f"{top!r} is a standard-library module: a run loads its repository's workloads or benchgate's"
    if top == "benchgate" and not (module == OWN_WORKLOADS or module.startswith(OWN_WORKLOADS + ".")):
        return f"benchgate's own workloads are {OWN_WORKLOADS}.*"
    return None


def _placement(spec: BenchmarkRunSpec, policy: Policy) -> list[Refusal]:
    refusals = []
    selector = spec.node_selector
    if policy.node_selectors and not any(
        allowed.items() <= selector.items() for allowed in policy.node_selectors
    ):
        allowed = " or ".join(json.dumps(s, sort_keys=True) for s in policy.node_selectors)
        refusals.append(
            Refusal(
                "NodePoolNotAllowed",
                f"spec.nodeSelector: got {json.dumps(selector, sort_keys=True)} (it must hold every label "
                f"of a node selector the policy allows: {allowed})",
            )
        )
    if policy.tolerations:
        allowed = " or ".join(_shown(t) for t in policy.tolerations)
        for index, toleration in enumerate(spec.tolerations):
            if not any(covers(a, toleration) for a in policy.tolerations):
                refusals.append(
                    Refusal(
                        "TolerationNotAllowed",
                        f"spec.tolerations[{index}]: got {_shown(toleration)} (it tolerates taints that no "
                        f"toleration the policy allows does: {allowed})",
                    )
                )
    return refusals


def _pvc(spec: BenchmarkRunSpec, namespace: str, policy: Policy) -> list[Refusal]:
    allowed = policy.pvcs_of(namespace)
    if not spec.baseline_pvc or allowed is None or spec.baseline_pvc in allowed:
        return []
    which = f"only {', '.join(allowed)}" if allowed else "none"
    return [
        Refusal(
            "PvcNotAllowed",
            f"spec.baselinePvc: got {spec.baseline_pvc!r} (runs of namespace {namespace} may mount {which})",
        )
    ]


def _why_no_promotion(namespace: str, policy: Policy) -> str:
    if EVERY_NAMESPACE not in policy.promote_namespaces and namespace not in policy.promote_namespaces:
        return f"namespace {namespace} may not promote baselines (the policy's promoteNamespaces)"
    # In a promoting namespace, only promoteScheduleOwnedOnly refuses, and the run is not a schedule's.
    return (
        "only runs a BenchmarkSchedule created from its template may promote baselines (the policy's "
        "promoteScheduleOwnedOnly)"
    )


def _shown(toleration: Toleration) -> str:
    return json.dumps({k: v for k, v in toleration.model_dump().items() if v}, sort_keys=True)
