"""The `benchgate-suite` pipeline: every entry of a suite gated in one KFP run, then one verdict.

    for each entry, one at a time:  [ the one-node gate pipeline, suite_entry = the entry ]
                          then:     suite gate (reads each entry's verdict from MLflow, logs the suite
                                    parent, fails the run with the suite's exit code)

Why this shape:
- The entries run one after another (`dsl.ParallelFor(parallelism=1)`), and each is the gate
  pipeline's own graph, whose timed tasks already never share a node with each other: so no timed task
  of a suite shares a node with another entry's either.
- Each entry is the one-node gate pipeline (`local_pipeline`): a suite does not run across nodes
  (kfp/suite/submit.py refuses the multi-node parameters). Its `suite_entry` is the loop's item, passed
  whole: a JSON string (kfp/suite_entry.py), because kfp.local 2.17 hands a subfield of an item over
  as a placeholder's literal text, and KFP would turn the numbers of a dict item into floats.
- An entry's gate task does not fail on FAIL or UNKNOWN, so one regression does not stop the entries
  after it; the suite gate runs after the loop even where an entry's task failed
  (`ignore_upstream_failure`), and reports that entry as an error. It needs MLflow, where the entries'
  verdicts meet: `suite_arguments` (kfp/suite/submit.py) refuses a suite without mlflow_tracking_uri.
"""

import functools
import inspect
from pathlib import Path
from typing import Any

from kfp import dsl, kubernetes
from kfp.dsl import Artifact, Output
from kfp.dsl.graph_component import GraphComponent

from benchgate.kfp.components import component
from benchgate.kfp.params import (
    CLUSTER_BASELINE_DIR,
    DEFAULT_WORLD_SIZE_N,
    GPU_CPU_REQUEST,
    GPU_MEMORY_REQUEST,
)
from benchgate.kfp.pipeline import (
    GPU_TOLERATION,
    LIGHT_CPU_REQUEST,
    LIGHT_MEMORY_REQUEST,
    MLFLOW_SECRET_KEYS,
    local_pipeline,
)

SUITE_PIPELINE_NAME = "benchgate-suite"
SUITE_PIPELINE_FILE = Path("pipelines/benchgate-suite.yaml")
SUITE_GATE_TASK = "suite gate"
# The suite pipeline's own parameters; every other one is the gate pipeline's, passed to each entry.
SUITE_ONLY = ("suite_name", "entries")


@component
def suite_gate(
    suite_name: str,
    entries: list,
    config: dict,
    mlflow_tracking_uri: str,
    kfp_run_id: str,
    kfp_run_name: str,
    results: Output[Artifact],
) -> None:
    """Read every entry's verdict from MLflow, write suite.json and suite.md, log the suite parent with
    the entries' gate runs nested under it, and exit with the suite's code (0 PASS/WARN, 1 a FAIL, 4 an
    UNKNOWN, 3 an entry without a verdict)."""
    from benchgate.kfp.suite.task import suite_gate_task

    code = suite_gate_task(
        suite_name, entries, config, mlflow_tracking_uri, kfp_run_id, kfp_run_name, results.path
    )
    if code:
        raise SystemExit(code)


def _define(gate: Any) -> Any:
    """The pipeline function over `gate`, the one-node gate pipeline, built before this one (KFP builds
    no pipeline inside another's definition)."""

    def benchgate_suite(
        suite_name: str,
        entries: list,
        commit: str = "",
        repository: str = "",
        branch: str = "",
        base_commit: str = "",
        world_size_n: int = DEFAULT_WORLD_SIZE_N,
        steps: int = 60,
        warmup: int = 10,
        tolerances: dict = {},  # noqa: B006 - KFP reads parameter defaults as literals
        update_baseline: str = "auto",
        baseline_dir: str = CLUSTER_BASELINE_DIR,
        baseline_pvc: str = "",
        accelerator_type: str = "nvidia.com/gpu",
        gpu_node_selector: dict = {},  # noqa: B006
        gpu_tolerations: list = [GPU_TOLERATION],  # noqa: B006
        gpu_cpu_request: str = GPU_CPU_REQUEST,
        gpu_memory_request: str = GPU_MEMORY_REQUEST,
        mlflow_tracking_uri: str = "",
        mlflow_secret: str = "benchgate-mlflow",
        config: dict = {},  # noqa: B006
    ) -> None:
        """A suite: each entry gated against its own baseline, one at a time, then one verdict.

        Args:
            suite_name: The suite's name: its MLflow parent run's, and its tag benchgate.suite.
            entries: One JSON object per entry (name, workload, workload_args, variant, config), as
                `benchgate submit --suite` writes them from a suite.toml.
            mlflow_tracking_uri: The MLflow server the entries log to and the suite gate reads (needed).
            config: Settings every entry starts from, shaped like the TOML file; an entry's own config
                goes over them. The other parameters are the benchgate pipeline's, for every entry.
        """
        with dsl.ParallelFor(entries, parallelism=1, name="entries, one at a time") as entry:
            gated = gate(
                commit=commit,
                repository=repository,
                branch=branch,
                base_commit=base_commit,
                world_size_n=world_size_n,
                steps=steps,
                warmup=warmup,
                tolerances=tolerances,
                update_baseline=update_baseline,
                baseline_dir=baseline_dir,
                baseline_pvc=baseline_pvc,
                accelerator_type=accelerator_type,
                gpu_node_selector=gpu_node_selector,
                gpu_tolerations=gpu_tolerations,
                gpu_cpu_request=gpu_cpu_request,
                gpu_memory_request=gpu_memory_request,
                mlflow_tracking_uri=mlflow_tracking_uri,
                mlflow_secret=mlflow_secret,
                config=config,
                suite_entry=entry,
            )
            gated.set_display_name("entry")
        judge = suite_gate(
            suite_name=suite_name,
            entries=entries,
            config=config,
            mlflow_tracking_uri=mlflow_tracking_uri,
            kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            kfp_run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        )
        # After the last entry, even where one failed: that entry is reported, the others judged.
        judge.after(gated).ignore_upstream_failure()
        judge.set_display_name(SUITE_GATE_TASK).set_caching_options(False)
        judge.set_cpu_request(LIGHT_CPU_REQUEST).set_memory_request(LIGHT_MEMORY_REQUEST)
        judge.set_env_variable("NVIDIA_VISIBLE_DEVICES", "void")  # no GPU: see pipeline.py's on_cpu
        kubernetes.use_secret_as_env(judge, mlflow_secret, MLFLOW_SECRET_KEYS, optional=True)

    return benchgate_suite


DESCRIPTION = (
    "Gate every entry of a suite (a workload, its arguments, a variant) against its own baseline, one "
    "after another, and fail the run with the worst verdict."
)


@functools.cache
def suite_pipeline() -> GraphComponent:
    """Built on first use, as the gate pipeline is (building runs the function)."""
    return dsl.pipeline(name=SUITE_PIPELINE_NAME, description=DESCRIPTION)(_define(local_pipeline()))


def suite_parameter_names() -> set[str]:
    return set(inspect.signature(_define(local_pipeline())).parameters)


def compile_suite_package(directory: Path) -> Path:
    """The suite pipeline compiled to `directory` (this version of benchgate)."""
    from benchgate.kfp.compile import compile_to

    return compile_to(suite_pipeline(), directory / SUITE_PIPELINE_FILE.name)
