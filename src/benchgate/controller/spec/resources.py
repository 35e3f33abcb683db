"""BenchmarkRun and BenchmarkSchedule: the custom resources, as pydantic models.

These models are the one source of truth for the resources. `crds.py` generates the CRDs' OpenAPI
schemas from them (a test fails when the committed CRDs drift), and the controller validates every
object with them again before it acts, because an API server may not have the schema (an old CRD) and
CEL rules are not evaluated everywhere.

A BenchmarkRun's spec is the pipeline's parameters under Kubernetes names; `pipeline_arguments` maps
it onto them and runs the same validation as `benchgate submit` and the pipeline's env task, so a spec
the cluster would reject at the first task is rejected here, before any KFP run exists.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from benchgate.config import DEFAULT_WORKLOAD
from benchgate.controller.spec.kube_names import MAX_ANNOTATIONS_BYTES, annotations_problem, labels_problem
from benchgate.controller.spec.kube_tolerances import KubeTolerances
from benchgate.controller.spec.patterns import (
    BRANCH_PATTERN,
    MAX_ITEMS,
    MAX_KEY,
    MAX_NAME,
    MAX_TEXT,
    MAX_URL,
    REPOSITORY_PATTERN,
    SHA_OR_EMPTY_PATTERN,
    SHA_PATTERN,
)
from benchgate.controller.spec.suite import (
    KUBE_EXTENSION,
    WORKLOAD_PATTERN,
    SuiteSpec,
    suite_pipeline_arguments,
)
from benchgate.errors import ConfigError
from benchgate.kfp.params import (
    CPU_QUANTITY_PATTERN,
    DEFAULT_TRAINER_RUNTIME,
    GPU_CPU_REQUEST,
    GPU_MEMORY_REQUEST,
    MEMORY_QUANTITY_PATTERN,
    SHM_SIZE_LIMIT,
    config_from_parameters,
    workload_args_parameter,
)
from benchgate.kfp.run_request import build_arguments
from benchgate.measure.source import MAX_BRANCH_LENGTH


class _Spec(BaseModel):
    # Kubernetes names are camelCase; unknown fields are typos (the API server rejects them too).
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Toleration(_Spec):
    """A toleration of the GPU tasks' pods, as in a Pod's spec.tolerations."""

    key: str = Field(
        "",
        max_length=MAX_KEY,
        description="Taint key the toleration matches (empty with Exists: all taints).",
    )
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists or Equal.")
    value: str = Field("", max_length=MAX_TEXT, description="Taint value to match with Equal.")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "", description="Taint effect to match (empty: all effects)."
    )


class MultiNode(_Spec):
    """Run a worldSize larger than one node across nodes, as a Kubeflow Trainer TrainJob."""

    gpus_per_node: int = Field(
        ...,
        ge=1,
        le=1024,
        strict=True,
        description="GPUs of one node: a larger worldSize (a multiple of it) runs across worldSize / "
        "gpusPerNode nodes as a Kubeflow Trainer TrainJob, and the other GPU tasks ask for at most this "
        "many; a worldSize up to it runs on one node as without multiNode.",
    )
    runtime: str = Field(
        DEFAULT_TRAINER_RUNTIME,
        min_length=1,
        max_length=MAX_NAME,
        description="The ClusterTrainingRuntime of the TrainJob (Kubeflow Trainer's torch framework).",
    )


class RunParameters(_Spec):
    """What to benchmark and how: every field of a BenchmarkRun's spec except the commit."""

    repository: str = Field(
        ...,
        pattern=REPOSITORY_PATTERN,
        max_length=MAX_URL,
        description="Git URL of the code under test (https, ssh, file, git@).",
    )
    branch: str = Field(
        "",
        pattern=BRANCH_PATTERN,
        max_length=MAX_BRANCH_LENGTH,
        description="The commit's branch; baselines are updated only on main.",
    )
    base_commit: str = Field(
        "",
        pattern=SHA_OR_EMPTY_PATTERN,
        description="Full SHA of the base for A/B timing (empty: the commit of the profile's baseline run).",
    )
    workload: str = Field(
        DEFAULT_WORKLOAD,
        pattern=WORKLOAD_PATTERN,
        max_length=MAX_TEXT,
        description="Workload factory as 'module:function'.",
    )
    # The union is pydantic's smart one: each value keeps the type YAML gave it (512 an int, "512" a
    # string, 512.0 a float, true a boolean), and the pipeline gets them as JSON, which keeps them too.
    workload_args: dict[str, Annotated[str, Field(max_length=MAX_TEXT)] | int | float | bool] = Field(
        default_factory=dict,
        max_length=MAX_ITEMS,
        description="Keyword arguments of the workload factory: strings, integers, floats, booleans, each "
        'passed as written (512 is an int, "512" a string, 512.0 a float).',
        json_schema_extra={KUBE_EXTENSION: True},
    )
    # strict: a number is a number (the API server's schema says so too, where it has the CRD).
    world_size: int = Field(
        8, ge=1, le=1024, strict=True, description="GPUs of the ws=N benchmark (1: ws=1 only)."
    )
    steps: int = Field(
        60,
        ge=3,
        strict=True,
        description="Measured training steps per world size (at least 3: the loss slope is a fit).",
    )
    warmup: int = Field(10, ge=0, strict=True, description="Steps run before measuring.")
    tolerances: KubeTolerances = Field(
        default_factory=KubeTolerances,
        description="What counts as a regression (benchgate's gate.tolerances), under camelCase names "
        "(throughputDropPct); the TOML file's names (throughput_drop_pct) are deprecated.",
    )
    update_baseline: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: promote on main when every timing check passes; always; never."
    )
    accelerator_type: str = Field(
        "nvidia.com/gpu", min_length=1, max_length=MAX_KEY, description="Extended resource of the GPU tasks."
    )
    node_selector: dict[str, Annotated[str, Field(max_length=63, description="The node label's value.")]] = (
        Field(
            default_factory=dict,
            max_length=MAX_ITEMS,
            description="Node selector of the GPU tasks (the GPU node pool).",
        )
    )
    tolerations: list[Toleration] = Field(
        default_factory=lambda: [Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        max_length=MAX_ITEMS,
        description="Tolerations of the GPU tasks.",
    )
    # Strings, as a quantity in YAML must be quoted here ("8"): the schema has no int-or-string.
    cpu_request: str = Field(
        GPU_CPU_REQUEST,
        pattern=CPU_QUANTITY_PATTERN,
        max_length=64,
        description='CPU request of each GPU task\'s pod, a quantity ("8", "500m"), above zero: with no '
        "request a pod is BestEffort. The default is a core per rank of the default worldSize 8.",
    )
    memory_request: str = Field(
        GPU_MEMORY_REQUEST,
        pattern=MEMORY_QUANTITY_PATTERN,
        max_length=64,
        description="Memory request of each GPU task's pod, a quantity (\"32Gi\"), above zero; the pod's "
        f"memory-backed /dev/shm (up to {SHM_SIZE_LIMIT}, for NCCL and DataLoader workers) counts "
        "against it.",
    )
    multi_node: MultiNode | None = Field(
        None,
        description="Across nodes: a worldSize larger than multiNode.gpusPerNode runs as a Kubeflow Trainer "
        "TrainJob (docs/multinode.md); unset: the ws=N bench is one pod on one node.",
    )
    queue_name: str = Field(
        "",
        max_length=63,
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$",
        description="A Kueue LocalQueue of the run's namespace that admits its multi-node TrainJob (labelled "
        "kueue.x-k8s.io/queue-name, created suspended; the launcher waits while it is queued). Empty: none. "
        "The one-node pods are queued by Kueue's pod integration and the namespace's default LocalQueue "
        "(docs/kubernetes.md, Clusters that queue GPUs).",
    )
    baseline_pvc: str = Field(
        "",
        max_length=MAX_NAME,
        description="A PersistentVolumeClaim for the baseline cache and spool (empty: none; MLflow keeps "
        "baselines and history, and unsent results stay in the run's KFP artifacts).",
    )
    mlflow_experiment: str = Field(
        "benchgate", min_length=1, max_length=MAX_TEXT, description="MLflow experiment of the run."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Any other benchgate setting, shaped like the TOML file; the fields above win.",
        json_schema_extra={KUBE_EXTENSION: True},
    )
    active_deadline_seconds: int | None = Field(
        None, ge=1, description="Stop (terminate the KFP run, phase Failed) when running longer than this."
    )
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, description="Delete the BenchmarkRun this long after it finished (unset: keep it)."
    )
    suite: SuiteSpec | None = Field(
        None,
        description="A suite of entries instead of workload and workloadArgs: one KFP run of the "
        "benchgate-suite pipeline, each entry on one node (no multiNode), MLflow needed.",
    )

    @model_validator(mode="after")
    def _suite_alone(self) -> RunParameters:
        # A suite names each entry's workload, and runs each on one node. Judged by value, not by what
        # was written: a schedule's template reaches its runs with every default filled in.
        if self.suite is not None:
            clashing = [
                name
                for name, clash in (
                    ("workload", self.workload != DEFAULT_WORKLOAD),
                    ("workloadArgs", bool(self.workload_args)),
                    ("multiNode", self.multi_node is not None),
                )
                if clash
            ]
            if clashing:
                raise ValueError(
                    f"suite: set together with {' and '.join(clashing)} (a suite names each entry's workload "
                    "and arguments in suite.entries, and runs every entry on one node)"
                )
        return self


class BenchmarkRunSpec(RunParameters):
    """A BenchmarkRun: one commit through the benchgate pipeline. Immutable once created."""

    commit: str = Field(
        ...,
        pattern=SHA_PATTERN,
        description="Full SHA of the commit to benchmark (refs and short SHAs move, so are refused).",
    )


class RunTemplateMetadata(_Spec):
    """Labels and annotations of each run. Checked here against Kubernetes' rules (kube_names): a bad
    one is the schedule's InvalidSpec, not a create the API server refuses at every cron time."""

    labels: dict[str, Annotated[str, Field(max_length=63, description="The label's value.")]] = Field(
        default_factory=dict, max_length=MAX_ITEMS, description="Labels of each created BenchmarkRun."
    )
    annotations: dict[
        str, Annotated[str, Field(max_length=MAX_ANNOTATIONS_BYTES, description="The annotation's value.")]
    ] = Field(
        default_factory=dict, max_length=MAX_ITEMS, description="Annotations of each created BenchmarkRun."
    )

    @field_validator("labels")
    @classmethod
    def _valid_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        problem = labels_problem(labels)
        if problem is not None:
            raise ValueError(problem)
        return labels

    @field_validator("annotations")
    @classmethod
    def _valid_annotations(cls, annotations: dict[str, str]) -> dict[str, str]:
        problem = annotations_problem(annotations)
        if problem is not None:
            raise ValueError(problem)
        return annotations


class RunTemplate(_Spec):
    metadata: RunTemplateMetadata = Field(default_factory=RunTemplateMetadata, description="Run metadata.")
    spec: RunParameters = Field(
        ..., description="The spec of each BenchmarkRun, without commit: the branch head is resolved."
    )


class HistoryCheck(_Spec):
    """After each run of the schedule ends, `benchgate history --check` over the gate runs in MLflow of
    that run's machine profile and workload."""

    recent: int = Field(
        10,
        ge=1,
        strict=True,
        description="A regression counts when it starts in one of the newest N runs (history --check "
        "--recent N).",
    )
    runs: int = Field(
        100,
        ge=1,
        le=500,
        strict=True,
        description="How many of the newest gate runs the change points are found over (history --last).",
    )


class BenchmarkScheduleSpec(_Spec):
    """Benchmark the head of a branch on a cron schedule (nightly runs build the gate's history)."""

    schedule: str = Field(
        ..., min_length=1, max_length=MAX_NAME, description="Cron expression, five fields ('0 2 * * *')."
    )
    time_zone: str = Field(
        "UTC", min_length=1, max_length=MAX_NAME, description="IANA time zone of the schedule."
    )
    suspend: bool = Field(False, description="Create no runs while true.")
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = Field(
        "Forbid",
        description="When a run of this schedule is still active: Allow another, Forbid (skip this time) "
        "or Replace (delete the active one first).",
    )
    starting_deadline_seconds: int | None = Field(
        None, ge=1, description="A missed time older than this is skipped (unset: never skipped)."
    )
    successful_runs_history_limit: int = Field(3, ge=0, description="Succeeded runs kept.")
    failed_runs_history_limit: int = Field(1, ge=0, description="Failed or canceled runs kept.")
    run_template: RunTemplate = Field(..., description="What each run benchmarks.")
    history_check: HistoryCheck | None = Field(
        None,
        description="Check the history for regressions after each run ends (status.historyCheck, and a "
        "Warning Event on one); unset: no check. Not with a suite (each entry has its own history).",
    )

    @model_validator(mode="after")
    def _history_of_one_workload(self) -> BenchmarkScheduleSpec:
        # The check reads the history of the one gate run a KFP run logged; a suite's run logs one per
        # entry, each with its own history (`benchgate history --workload <entry>`).
        if self.history_check is not None and self.run_template.spec.suite is not None:
            raise ValueError(
                "historyCheck: set with runTemplate.spec.suite (the check follows one workload's history; "
                "a suite's entries each have their own: `benchgate history --workload ENTRY`)"
            )
        return self


def parse_spec(model: type[_Spec], spec: Any) -> Any:
    """Validate an object's spec; a bad field is a ConfigError naming `spec.<field>` and the value."""
    try:
        return model.model_validate(spec or {})
    except ValidationError as e:
        raise ConfigError("; ".join(_error_text(item) for item in e.errors())) from None


def _error_text(item: Any) -> str:
    """One validation error as `spec.<field>: got <value> (why)`; a rule over several fields (a model
    validator's, its location the spec itself) says itself which fields."""
    where = ".".join(str(p) for p in item["loc"])
    if item["type"] == "value_error" and (not where or where.endswith("spec")):
        return f"spec.{where + '.' if where else ''}{str(item['msg']).removeprefix('Value error, ')}"
    # The value as given, cut: a 256 KiB annotation must not make a condition or an Event that size.
    given = repr(item.get("input"))
    given = given if len(given) <= 500 else given[:500] + "..."
    return f"spec.{where}: got {given} ({item['msg']})"


def pipeline_arguments(spec: BenchmarkRunSpec, mlflow_tracking_uri: str, known: set[str]) -> dict[str, Any]:
    """The pipeline's arguments for `spec`, validated as `benchgate submit` and the env task do."""
    params = spec.model_dump(by_alias=False)
    config = dict(params["config"])
    tracking = dict(config.get("tracking") or {})
    tracking["experiment"] = spec.mlflow_experiment
    config["tracking"] = tracking
    tolerances = spec.tolerances.model_dump()
    workload_args = workload_args_parameter(spec.workload_args)
    arguments = {
        "base_commit": spec.base_commit,
        "workload": spec.workload,
        "workload_args": workload_args,
        "world_size_n": spec.world_size,
        "steps": spec.steps,
        "warmup": spec.warmup,
        "tolerances": tolerances,
        "update_baseline": spec.update_baseline,
        "accelerator_type": spec.accelerator_type,
        "gpu_node_selector": dict(spec.node_selector),
        "gpu_tolerations": [{k: v for k, v in t.model_dump().items() if v} for t in spec.tolerations],
        "gpu_cpu_request": spec.cpu_request,
        "gpu_memory_request": spec.memory_request,
        "baseline_pvc": spec.baseline_pvc,
        "queue_name": spec.queue_name,
        "mlflow_tracking_uri": mlflow_tracking_uri,
        "config": config,
    }
    if spec.multi_node is not None:
        # KFP's condition compares a parameter with a constant: whether the run spans nodes is decided here.
        arguments["multi_node"] = spec.world_size > spec.multi_node.gpus_per_node
        arguments["gpus_per_node"] = spec.multi_node.gpus_per_node
        arguments["trainer_runtime"] = spec.multi_node.runtime
    if spec.suite is not None:
        return suite_pipeline_arguments(spec.commit, spec.repository, spec.branch, spec.suite, arguments)
    arguments = {k: v for k, v in arguments.items() if k in known}
    validated = build_arguments(spec.commit, spec.repository, spec.branch, arguments, known)
    # The env task's validation, run here so a bad config never becomes a KFP run.
    config_from_parameters(
        config,
        workload=spec.workload,
        workload_args=workload_args,
        world_size_n=spec.world_size,
        steps=spec.steps,
        warmup=spec.warmup,
        tolerances=tolerances,
        update_baseline=spec.update_baseline,
        baseline_dir="/tmp/benchgate/baselines",
        mlflow_tracking_uri=mlflow_tracking_uri,
    )
    return validated
