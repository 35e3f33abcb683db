"""Validated configuration: one set of pydantic models feeds the CLI, the config file and the run files.

Values are checked once, at the edge. A bad value raises `ConfigError` naming the dotted field and the
value, e.g. ``gate.tolerances.throughput_drop_pct: got -3 (Input should be greater than 0)``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from benchgate.errors import ConfigError

DEFAULT_WORKLOAD = "benchgate.workloads.gpt:make_workload"

WorkloadArg = str | int | float | bool


class _Model(BaseModel):
    # Unknown keys are typos: reject them instead of silently ignoring a misspelt tolerance.
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchConfig(_Model):
    workload: str = Field(
        DEFAULT_WORKLOAD,
        description="Workload factory as 'module:function'; the function returns a benchgate Workload.",
    )
    workload_args: dict[str, WorkloadArg] = Field(
        default_factory=dict, description="Keyword arguments passed to the workload factory."
    )
    steps: int = Field(60, gt=0, description="Measured training steps per world size.")
    warmup: int = Field(10, ge=0, description="Steps run before measuring (allocator, caches, autotuning).")
    world_sizes: list[int] | None = Field(
        None,
        description="World sizes to run, e.g. [1, 8]. Default: [1, N] with N = every GPU, or 2 on CPU.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where to train; auto picks cuda.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="bf16 autocast on CUDA, fp32 on CPU when auto."
    )
    threads_per_rank: int | None = Field(
        None,
        gt=0,
        description="torch intra-op threads per rank. Default: 1 on CPU (a rank stands for one device, so "
        "scaling efficiency compares equal per-rank resources), CPU cores // world size on GPU hosts.",
    )
    seed: int = Field(0, ge=0, description="Seed for weights and batches; identical on every run.")
    drift_reference: bool = Field(
        True,
        description="On CPU, time a fixed matmul after every measured step: the host's speed at that moment, "
        "so compare can tell a slower host from slower code. Ignored on GPU.",
    )
    timeout_s: float = Field(
        60.0,
        gt=0,
        description="Collective timeout: a rank waiting longer than this on a peer fails the run.",
    )
    run_timeout_s: float = Field(
        900.0, gt=0, description="Wall-clock limit for one torchrun launch; the whole job is killed past it."
    )
    peak_tflops: float | None = Field(
        None,
        gt=0,
        description="Dense peak TFLOP/s of one device at the run's precision, for MFU where the built-in "
        "datasheet table has no entry (another GPU, or a CPU). Default: the table's, else no MFU.",
    )

    @field_validator("workload")
    @classmethod
    def _workload_spec(cls, v: str) -> str:
        module, sep, func = v.partition(":")
        if not sep or not module or not func:
            raise ValueError("expected 'module:function', e.g. 'my_pkg.workloads:make_workload'")
        return v

    @field_validator("world_sizes")
    @classmethod
    def _world_sizes(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("needs at least one world size")
        if any(n < 1 for n in v):
            raise ValueError("every world size must be >= 1")
        if len(set(v)) != len(v):
            raise ValueError("world sizes must be distinct")
        return sorted(v)


class EvalConfig(_Model):
    enabled: bool = Field(True, description="Run the deterministic eval stage.")
    train_steps: int = Field(
        400,
        gt=0,
        description="Fixed-seed training steps before evaluating (gpt-tiny learns 2 of 3 probes by 400).",
    )
    seq_len: int = Field(64, gt=1, description="Window length for eval training and perplexity (bytes).")
    batch_size: int = Field(16, gt=0, description="Windows per eval training step.")
    threads: int = Field(
        2, gt=0, description="torch threads for the eval; fixed so results are bit-for-bit repeatable."
    )
    seed: int = Field(1234, ge=0, description="Seed for the eval's weights and batch order.")


class TraceConfig(_Model):
    enabled: bool = Field(True, description="Record a torch.profiler trace for TensorBoard.")
    wait: int = Field(1, ge=0, description="Profiler schedule: steps skipped before warmup.")
    warmup: int = Field(1, ge=0, description="Profiler schedule: steps traced but discarded.")
    active: int = Field(3, gt=0, description="Profiler schedule: steps recorded into the trace.")


class Tolerances(_Model):
    throughput_drop_pct: float = Field(
        5.0, gt=0, lt=100, description="FAIL when tokens/s drops more, with confidence (the timing check)."
    )
    memory_increase_pct: float = Field(10.0, gt=0, description="WARN when peak memory grows more.")
    perplexity_increase_pct: float = Field(1.5, gt=0, description="FAIL when perplexity worsens more.")
    probe_accuracy_drop_points: float = Field(
        2.0, gt=0, le=100, description="FAIL when probe accuracy drops more (percentage points)."
    )
    loss_slope_max: float = Field(
        0.0, description="FAIL when the loss slope (nats/step) over the measured window exceeds this."
    )
    scaling_efficiency_drop_points: float = Field(
        5.0, gt=0, le=100, description="WARN when scaling efficiency drops more (percentage points)."
    )
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Confidence level of intervals and tests.")


class ABConfig(_Model):
    """The interleaved A/B decision: base and candidate benchmarked side by side, step by step."""

    steps: int = Field(30, ge=2, description="Measured steps per side in one round (A and B alternate).")
    warmup: int = Field(5, ge=0, description="Steps each side runs before a round is measured.")
    min_rounds: int = Field(
        4,
        ge=2,
        description="Rounds before the first decision: fewer give no estimate of round-to-round noise.",
    )
    max_rounds: int = Field(
        12, gt=0, description="Budget: rounds per world size before the answer is UNKNOWN."
    )
    max_seconds: float = Field(
        600.0, gt=0, description="Budget: wall time per world size; no round starts after it (UNKNOWN)."
    )

    @field_validator("max_rounds")
    @classmethod
    def _budget(cls, v: int, info: Any) -> int:
        low = info.data.get("min_rounds")
        if low is not None and v < low:
            raise ValueError(f"must be >= gate.ab.min_rounds ({low})")
        return v


class GateConfig(_Model):
    tolerances: Tolerances = Field(default_factory=Tolerances, description="What counts as a regression.")
    baseline_dir: Path = Field(
        Path(".benchgate/baselines"), description="Directory store of baselines, one per machine profile."
    )
    ab: ABConfig = Field(default_factory=ABConfig, description="The interleaved A/B timing decision.")
    update_baseline: Literal["auto", "always", "never"] = Field(
        "auto",
        description="auto: write the baseline on branch main from a clean tree when every timing check "
        "PASSes (never after WARN, UNKNOWN or FAIL); always: write it.",
    )


class TrackingConfig(_Model):
    enabled: bool = Field(True, description="Log each gate run to MLflow and take baselines from there.")
    uri: str = Field(
        "",
        description="MLflow tracking URI (empty: MLFLOW_TRACKING_URI, else the local store in local_dir).",
    )
    experiment: str = Field("benchgate", min_length=1, description="MLflow experiment of the gate runs.")
    local_dir: Path = Field(
        Path(".benchgate/mlflow"), description="The embedded store: SQLite (mlflow.db) and artifacts."
    )
    spool_dir: Path = Field(
        Path(".benchgate/spool"), description="Runs not yet logged to MLflow; `benchgate sync` sends them."
    )
    max_wait_s: float = Field(
        30.0, ge=0, description="Longest a run waits, in total, on an unreachable tracking server."
    )
    system_metrics: bool = Field(True, description="Sample CPU/GPU use and memory during the bench.")
    history_runs: int = Field(20, ge=1, le=500, description="Earlier runs of the profile in the report.")


class RunConfig(_Model):
    bench: BenchConfig = Field(default_factory=BenchConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    trace: TraceConfig = Field(default_factory=TraceConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    out: Path = Field(Path("benchgate-out"), description="Directory for this run's result files.")


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Build a RunConfig from an optional TOML file plus dotted overrides (CLI flags win)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"--config: file not found: {path}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"--config: {path} is not valid TOML ({e})") from None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return parse_config(data)


def parse_config(data: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e)) from None


def format_validation_error(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "config"
        value = item.get("input")
        lines.append(f"{field}: got {value!r} ({item['msg']})")
    return "; ".join(lines)
