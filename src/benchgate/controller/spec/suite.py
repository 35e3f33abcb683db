"""A BenchmarkRun's `spec.suite`: the models of a suite in the resource, and the suite pipeline's
arguments for it.

A suite replaces spec.workload and spec.workloadArgs (resources.py refuses both at once): its entries
are gated one at a time in one KFP run of the benchgate-suite pipeline (kfp/suite/pipeline.py), each
against its own baseline, as `benchgate submit --suite` gates a suite file's. The entries are checked
here as that command checks them, so a suite the cluster would refuse never becomes a KFP run.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from benchgate.controller.spec.patterns import MAX_ITEMS, MAX_TEXT
from benchgate.errors import ConfigError
from benchgate.kfp.run_request import build_arguments

KUBE_EXTENSION = "x-kubernetes-preserve-unknown-fields"
WORKLOAD_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
# config.STORED_NAME as a JSON-schema regex: a directory of the baseline store, a word of MLflow keys.
STORED_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
MAX_STORED_NAME = 200  # the pattern's bound, said as maxLength too (what the API server checks first)
# A coverage suite names every model type of a Hugging Face family (a few hundred); the object itself
# stays far below the API server's 1.5 MiB at this many entries of bounded fields.
MAX_ENTRIES = 1000


class _Spec(BaseModel):
    # As resources._Spec: Kubernetes names are camelCase; unknown fields are typos.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class SuiteVariant(_Spec):
    """How a suite entry's workload is run; every key optional (docs/suites.md)."""

    precision: Literal["auto", "fp32", "bf16"] | None = Field(None, description="bench.precision.")
    compile: bool | None = Field(None, description="torch.compile the model for the timed steps.")
    batch_size: int | None = Field(None, ge=1, strict=True, description="The workload argument batch_size.")


class SuiteEntrySpec(_Spec):
    """One entry of a suite: a workload, its arguments and a variant, stored under its own name."""

    name: str = Field(
        ...,
        pattern=STORED_NAME_PATTERN,
        max_length=MAX_STORED_NAME,
        description="The entry's name: its baseline, its MLflow gate run's workload, unique in the suite.",
    )
    workload: str = Field(
        ...,
        pattern=WORKLOAD_PATTERN,
        max_length=MAX_TEXT,
        description="Workload factory as 'module:function'.",
    )
    workload_args: dict[str, Annotated[str, Field(max_length=MAX_TEXT)] | int | float | bool] = Field(
        default_factory=dict,
        max_length=MAX_ITEMS,
        description="Keyword arguments of the workload factory, each passed as written.",
        json_schema_extra={KUBE_EXTENSION: True},
    )
    variant: SuiteVariant = Field(default_factory=SuiteVariant, description="precision, compile, batchSize.")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="This entry's benchgate settings, shaped like the TOML file, over spec.config.",
        json_schema_extra={KUBE_EXTENSION: True},
    )


class SuiteSpec(_Spec):
    """A suite instead of one workload: its entries gated one at a time in one KFP run of the
    benchgate-suite pipeline, each against its own baseline, then one verdict
    (docs/suites-on-kubernetes.md)."""

    name: str = Field(
        ...,
        pattern=STORED_NAME_PATTERN,
        max_length=MAX_STORED_NAME,
        description="The suite's name (its MLflow run).",
    )
    entries: list[SuiteEntrySpec] = Field(
        ..., min_length=1, max_length=MAX_ENTRIES, description="The entries, gated in this order."
    )


def suite_pipeline_arguments(
    commit: str, repository: str, branch: str, suite: SuiteSpec, shared: dict[str, Any]
) -> dict[str, Any]:
    """The benchgate-suite pipeline's arguments for a BenchmarkRun with `spec.suite`: the run's shared
    settings, and each entry expanded as `benchgate submit --suite` expands a suite file's; checked as
    it checks them (each entry's config, one node, an MLflow server). A ConfigError names the field."""
    # Imported here: the suite pipeline's module loads KFP's DSL, which a controller serving gate runs
    # only never needs.
    from benchgate.kfp.suite.pipeline import suite_parameter_names
    from benchgate.kfp.suite.submit import check_suite_arguments
    from benchgate.kfp.suite_entry import checked_entries, entry_parameter

    raw = [
        {
            "name": entry.name,
            "workload": entry.workload,
            "args": dict(entry.workload_args),
            "variant": entry.variant.model_dump(exclude_none=True),
            "config": entry.config,
        }
        for entry in suite.entries
    ]
    known = suite_parameter_names()
    arguments = {k: v for k, v in shared.items() if k in known}
    validated = build_arguments(commit, repository, branch, arguments, known)
    try:
        validated |= {
            "suite_name": suite.name,
            "entries": [entry_parameter(e) for e in checked_entries(raw, "spec.suite.entries")],
        }
        check_suite_arguments(validated)
    except ConfigError as e:
        message = str(e)
        raise ConfigError(message if message.startswith("spec.") else f"spec.suite: {message}") from None
    return validated
