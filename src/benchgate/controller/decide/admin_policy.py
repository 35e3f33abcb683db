"""The admin policy: what a BenchmarkRun may ask of the controller's identity.

Whoever may create a BenchmarkRun acts with the controller's KFP identity: the pipeline fetches and
runs `repository`'s code on GPU nodes with the MLflow secret, places it with `nodeSelector` and
`tolerations`, mounts `baselinePvc` and, with `updateBaseline`, promotes baselines everyone is measured
against. The cluster admin bounds all of it with a `Policy` (BENCHGATE_POLICY, the chart's `policy`
value); `check` says whether a parsed spec stays inside it, naming each field it refuses.

An empty list (or map) places no bound, so `{}` is the behaviour without a policy, except promotion:
`promoteNamespaces` is a list of the namespaces that may promote, `*` for every one (the default), so
that an empty list can say "none". `maxGpusPerNode` 0 places no bound either. `multiNode` (default
false) lets a run with `spec.multiNode` go past `maxGpusPerNode` across nodes. A run's workload is
checked under every policy: the repository's own module or benchgate's workloads, never the standard
library's or the rest of benchgate's (`workloadModules` narrows it to listed module prefixes).

Pure: no kopf, no I/O, no clock. Which schedule made a run is `admission`'s question; this module gets
the answer as a boolean.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Annotated, Final, Literal
from urllib.parse import unquote

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from benchgate.controller.spec.resources import BenchmarkRunSpec, Toleration
from benchgate.errors import ConfigError
from benchgate.workloads.origin import OWN_WORKLOADS

ENV: Final = "BENCHGATE_POLICY"
# In promoteNamespaces and as a key of pvcs: every namespace.
EVERY_NAMESPACE: Final = "*"
UpdateBaseline = Literal["auto", "always", "never"]

# git@host:path, the scp-like form (the URL grammar allows the user `git` only).
_SCP = re.compile(r"git@(?P<host>[^:/]+):(?P<path>.*)", re.DOTALL)
# The authority of https://, ssh:// and file:// URLs: an optional user (and password), host, port.
_AUTHORITY = re.compile(r"(?:[^@/]*@)?(?P<host>[^:@/]*)(?::(?P<port>[0-9]*))?")
_DEFAULT_PORTS = {"https": "443", "ssh": "22"}


def repository_location(url: str) -> tuple[str, tuple[str, ...]]:
    """Where a git URL points, as (origin, path segments), so that a prefix is compared segment by
    segment: `https://github.com/acme` then covers `https://github.com/acme/x` and never
    `https://github.com/acme-evil/x`. The origin is `scheme://host[:port]` with the host lowercased,
    the user left out (it does not choose the code) and a default port dropped; the scp-like form keeps
    its own origin (`git@host:` reads its path from the login's home directory). Segments are
    percent-decoded, empty ones dropped and a last `.git` removed.

    A ValueError for anything else, and for a segment that is `.` or `..` or holds a `/` or `\\` once
    decoded: git, curl or the server would resolve those to a path outside the prefix.
    """
    scp = _SCP.fullmatch(url)
    if scp is not None:
        path = scp["path"]
        origin = f"git@{scp['host'].lower().rstrip('.')}:" + ("/" if path.startswith("/") else "")
    else:
        scheme, separator, rest = url.partition("://")
        scheme = scheme.lower()
        authority, _, path = rest.partition("/")
        parts = _AUTHORITY.fullmatch(authority)
        if not separator or scheme not in ("https", "ssh", "file") or parts is None:
            raise ValueError("expected a git URL: https://, ssh://, file:// or git@host:path")
        host, port = parts["host"].lower().rstrip("."), parts["port"]
        if port == _DEFAULT_PORTS.get(scheme):
            port = None
        origin = f"{scheme}://{host}" + (f":{port}" if port else "")
    segments = [unquote(s) for s in path.split("/") if s]
    for segment in segments:
        if segment in (".", "..") or "/" in segment or "\\" in segment:
            raise ValueError(f"the path segment {segment!r} could lead out of any prefix")
    if segments and segments[-1].endswith(".git"):
        segments[-1] = segments[-1].removesuffix(".git")
    return origin, tuple(s for s in segments if s)


def under(url: str, prefix: str) -> bool:
    """Whether repository `url` is `prefix` or lies below it, by whole path segments."""
    origin, segments = repository_location(url)
    prefix_origin, prefix_segments = repository_location(prefix)
    return origin == prefix_origin and segments[: len(prefix_segments)] == prefix_segments


def covers(allowed: Toleration, toleration: Toleration) -> bool:
    """Whether every taint `toleration` tolerates is tolerated by `allowed` too (key, value, effect)."""
    every_key = allowed.key == "" and allowed.operator == "Exists"
    if not every_key and (toleration.key == "" or toleration.key != allowed.key):
        return False
    if allowed.operator == "Equal" and (toleration.operator != "Equal" or toleration.value != allowed.value):
        return False
    return allowed.effect == "" or allowed.effect == toleration.effect


def _prefix(prefix: str) -> str:
    repository_location(prefix)  # a ValueError names what is wrong
    return prefix


def _allowed_toleration(toleration: Toleration) -> Toleration:
    if toleration.key == "" and toleration.operator != "Exists":
        raise ValueError("an empty key tolerates every taint only with operator Exists")
    return toleration


RepositoryPrefix = Annotated[str, AfterValidator(_prefix)]
WorkloadModule = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")]
AllowedToleration = Annotated[Toleration, AfterValidator(_allowed_toleration)]


class Policy(BaseModel):
    """What a BenchmarkRun may ask for (see the module's docstring); `Policy()` allows everything."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    repositories: tuple[RepositoryPrefix, ...] = Field(
        (), description="Repository URL prefixes, compared by whole path segments; empty: any repository."
    )
    node_selectors: tuple[dict[str, str], ...] = Field(
        (), description="A run's nodeSelector must hold every label of one of these; empty: any selector."
    )
    tolerations: tuple[AllowedToleration, ...] = Field(
        (), description="Each toleration of a run must tolerate no more than one of these; empty: any."
    )
    pvcs: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Namespace (or '*') -> the baselinePvc names it may mount; empty: any PVC.",
    )
    promote_namespaces: tuple[str, ...] = Field(
        (EVERY_NAMESPACE,), description="Namespaces whose runs may promote baselines; '*': every one."
    )
    promote_schedule_owned_only: bool = Field(
        False,
        strict=True,
        description="Only runs a BenchmarkSchedule created (its template, unchanged) may promote.",
    )
    max_gpus_per_node: int = Field(
        0,
        ge=0,
        strict=True,
        description="GPUs of one node: a larger worldSize is refused, unless it runs across nodes "
        "(multiNode); 0: no bound.",
    )
    workload_modules: tuple[WorkloadModule, ...] = Field(
        (),
        description="Module prefixes (whole dotted names) a run's workload may come from, e.g. "
        "'models' or 'benchgate.workloads'; empty: any module of the repository.",
    )
    multi_node: bool = Field(
        False,
        strict=True,
        description="A run with spec.multiNode may exceed maxGpusPerNode across nodes (Kubeflow Trainer "
        "TrainJobs), each node's share within it.",
    )

    def may_promote(self, namespace: str, schedule_owned: bool) -> bool:
        """Whether a run of `namespace` may promote a baseline (`schedule_owned`: a schedule made it)."""
        in_namespace = EVERY_NAMESPACE in self.promote_namespaces or namespace in self.promote_namespaces
        return in_namespace and (schedule_owned or not self.promote_schedule_owned_only)

    def pvcs_of(self, namespace: str) -> tuple[str, ...] | None:
        """The PVCs runs of `namespace` may mount; None: any."""
        if not self.pvcs:
            return None
        return self.pvcs.get(namespace, ()) + self.pvcs.get(EVERY_NAMESPACE, ())


def policy_from_json(text: str) -> Policy:
    """The policy in `text` (JSON; empty or blank: `Policy()`); a ConfigError naming the key and value."""
    if not text.strip():
        return Policy()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{ENV}: got {text[:120]!r} (not JSON: {e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f'{ENV}: got {data!r} (expected a JSON object such as {{"repositories": [...]}})')
    try:
        return Policy.model_validate(data)
    except ValidationError as e:
        raise ConfigError(
            "; ".join(
                f"{ENV}.{'.'.join(str(p) for p in item['loc'])}: got {item.get('input')!r} ({item['msg']})"
                for item in e.errors()
            )
        ) from None


# ---------------------------------------------------------------- the check of one run


@dataclass(frozen=True)
class Refusal:
    """One field the policy refuses: the condition's reason, and a message naming field and value."""

    reason: str
    message: str


@dataclass(frozen=True)
class Admission:
    """The policy's answer for one run: what it refuses (nothing: admitted) and the updateBaseline the
    run goes with, lowered from `auto` to `never` where it may not promote (`lowered` says why)."""

    refusals: tuple[Refusal, ...]
    update_baseline: UpdateBaseline
    lowered: str = ""

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
    update_baseline: UpdateBaseline = spec.update_baseline
    lowered = ""
    if update_baseline != "never" and not policy.may_promote(namespace, schedule_owned):
        why = _why_no_promotion(namespace, policy)
        if update_baseline == "always":
            refusals.append(Refusal("PromotionNotAllowed", f"spec.updateBaseline: got 'always' ({why})"))
        else:
            update_baseline, lowered = "never", f"spec.updateBaseline: auto runs as never ({why})"
    return Admission(tuple(refusals), update_baseline, lowered)


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
        if why is None and policy.workload_modules and not any(
            module == prefix or module.startswith(prefix + ".") for prefix in policy.workload_modules
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
