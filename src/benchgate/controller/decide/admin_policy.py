"""The admin policy: what a BenchmarkRun may ask of the controller's identity.

Whoever may create a BenchmarkRun acts with the controller's KFP identity: the pipeline fetches and
runs `repository`'s code on GPU nodes with the MLflow secret, places it with `nodeSelector` and
`tolerations`, mounts `baselinePvc` and, with `updateBaseline`, promotes baselines everyone is measured
against. The cluster admin bounds all of it with a `Policy` (BENCHGATE_POLICY, the chart's `policy`
value); `policy_checks.check` says whether a parsed spec stays inside it, naming each field it refuses.

An empty list (or map) places no bound, so `{}` is the behaviour without a policy, except promotion:
`promoteNamespaces` is a list of the namespaces that may promote, `*` for every one (the default), so
that an empty list can say "none". `maxGpusPerNode` 0 places no bound either. `multiNode` (default
false) lets a run with `spec.multiNode` go past `maxGpusPerNode` across nodes. A run's workload is
checked under every policy: the repository's own module or benchgate's workloads, never the standard
library's or the rest of benchgate's (`workloadModules` narrows it to listed module prefixes). A run's
results go to the controller's tracking server only, under every policy: a tracking URI in a spec's
config is refused. `experiments` bounds the MLflow experiments a namespace's runs log into; the
deadline and resource keys bound a run that could hold GPUs (or wait for them) forever.

This module is the policy and its parsing; `policy_checks` applies it to a spec, `policy_values` reads
it from the chart's values. Pure: no kopf, no I/O, no clock.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from benchgate.controller.decide.repository_url import repository_location, under
from benchgate.controller.spec.resources import Toleration
from benchgate.errors import ConfigError
from benchgate.kfp.params import CPU_QUANTITY_PATTERN, MEMORY_QUANTITY_PATTERN

__all__ = ["ENV", "EVERY_NAMESPACE", "NAMESPACE_PLACEHOLDER", "Policy", "policy_from_json", "under"]

ENV: Final = "BENCHGATE_POLICY"
# In promoteNamespaces and as a key of pvcs: every namespace.
EVERY_NAMESPACE: Final = "*"
UpdateBaseline = Literal["auto", "always", "never"]
# In an allowed experiment name: the run's namespace.
NAMESPACE_PLACEHOLDER: Final = "{namespace}"


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
# Empty: no bound. Else a quantity of the same form a run's request takes.
MaxCpu = Annotated[str, Field(pattern=rf"({CPU_QUANTITY_PATTERN})|^$")]
MaxMemory = Annotated[str, Field(pattern=rf"({MEMORY_QUANTITY_PATTERN})|^$")]


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

    experiments: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Namespace (or '*') -> the MLflow experiments its runs may log into; a name may hold "
        "'{namespace}' (the run's) and end in '*' (a prefix); empty: any experiment.",
    )
    default_active_deadline_seconds: int = Field(
        0,
        ge=0,
        strict=True,
        description="The activeDeadlineSeconds of a run that sets none; 0: none (it runs without one).",
    )
    max_active_deadline_seconds: int = Field(
        0, ge=0, strict=True, description="The largest activeDeadlineSeconds a run may set; 0: no bound."
    )
    accelerator_types: tuple[str, ...] = Field(
        (), description="The extended resources a run's acceleratorType may name; empty: any."
    )
    max_cpu_request: MaxCpu = Field(
        "", description="The largest cpuRequest of a run's GPU pods, a quantity ('16'); empty: no bound."
    )
    max_memory_request: MaxMemory = Field(
        "",
        description="The largest memoryRequest of a run's GPU pods, a quantity ('256Gi'); empty: no bound.",
    )

    @model_validator(mode="after")
    def _default_within_max(self) -> Policy:
        # A default past the maximum would refuse every run that sets no deadline.
        bound = self.max_active_deadline_seconds
        if bound and self.default_active_deadline_seconds > bound:
            raise ValueError(
                f"defaultActiveDeadlineSeconds: got {self.default_active_deadline_seconds} (more than "
                f"maxActiveDeadlineSeconds {bound})"
            )
        return self

    def may_promote(self, namespace: str, schedule_owned: bool) -> bool:
        """Whether a run of `namespace` may promote a baseline (`schedule_owned`: a schedule made it)."""
        in_namespace = EVERY_NAMESPACE in self.promote_namespaces or namespace in self.promote_namespaces
        return in_namespace and (schedule_owned or not self.promote_schedule_owned_only)

    def pvcs_of(self, namespace: str) -> tuple[str, ...] | None:
        """The PVCs runs of `namespace` may mount; None: any."""
        if not self.pvcs:
            return None
        return self.pvcs.get(namespace, ()) + self.pvcs.get(EVERY_NAMESPACE, ())

    def experiments_of(self, namespace: str) -> tuple[str, ...] | None:
        """The experiment names (placeholder filled in, a last '*' a prefix) runs of `namespace` may log
        into; None: any."""
        if not self.experiments:
            return None
        names = self.experiments.get(namespace, ()) + self.experiments.get(EVERY_NAMESPACE, ())
        return tuple(name.replace(NAMESPACE_PLACEHOLDER, namespace) for name in names)

    def deadline_of(self, requested: int | None) -> int | None:
        """The activeDeadlineSeconds a run goes with: its own, else the policy's default (None: none)."""
        return requested or self.default_active_deadline_seconds or None


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
        raise ConfigError("; ".join(_error_text(item) for item in e.errors())) from None


def _error_text(item: Any) -> str:
    # A rule over several keys (a model validator's, located at the policy itself) names its keys.
    if not item["loc"]:
        return f"{ENV}: {str(item['msg']).removeprefix('Value error, ')}"
    return f"{ENV}.{'.'.join(str(p) for p in item['loc'])}: got {item.get('input')!r} ({item['msg']})"
