"""Validated configuration: one set of pydantic models feeds the CLI, the config file and the run files.

Values are checked once, at the edge. A bad value raises `ConfigError` naming the dotted field and the
value, e.g. ``gate.tolerances.throughput_drop_pct: got -3 (Input should be greater than 0)``.

Values keep the type they are written with: a number field takes a number (an integer one an
integer), a switch takes true or false, and nothing is read out of a string (`steps = "10"` is refused,
naming the field). Workload arguments keep theirs too: `hidden = 512` reaches the factory as the int
512, `tag = "512"` as the string. Those field types are `benchgate.config_types`'.

A config that validates can run: every minimum and maximum below is one the runner or the statistics
need (a reason is given where it is not obvious), so nothing is refused minutes later for a value that
was accepted here. What depends on the machine (world sizes against its devices) or on the workload
(eval.seq_len against its context) is checked by the pipeline's first task, before any bench.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from benchgate.config_types import (
    MAX_INT,
    Bool,
    Float,
    Int,
    UsablePath,
    WorkloadArg,
    check_world_sizes,
    is_workload_arg,
)
from benchgate.errors import ConfigError
from benchgate.kit.credentials import MLFLOW_INSTEAD, refuse_credentials

DEFAULT_WORKLOAD = "benchgate.workloads.gpt:make_workload"
# A name results are stored under (bench.name, a suite entry's name): a directory of the baseline store
# and a word of MLflow keys, so nothing that could leave the store ('..', '/', a NUL). The same rule as
# the workload names of results/bundle.py.
STORED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

# The longest any timeout or budget may be: 30 days. Far past any gate run, and far inside what the
# runner can wait on (threading's TIMEOUT_MAX, ~292 years; a timedelta for the collective timeout).
MAX_SECONDS = 30 * 24 * 3600.0
# torch takes thread counts as a C int and seeds as 64 bits; the bench seeds each rank's batch generator
# with seed * 1_000_003 + rank, so a seed must stay far below 2**64 / 1_000_003. 2**32 - 1 does, and is
# the range every other seeded tool accepts.
MAX_SEED = 2**32 - 1
MAX_THREADS = 4096
# The bench times every step and fits a line to the losses (the loss-slope check, which needs no
# baseline); a line with a confidence interval needs 3 points (stats.linear_slope). A run of 2 steps
# would have no slope row, and as a baseline it would break the slope row of every later comparison.
MIN_STEPS = 3
# A synchronised window longer than this is no longer a turn of an A/B: the other side would wait minutes.
MAX_STEPS_PER_WINDOW = 1000


class _Model(BaseModel):
    # Unknown keys are typos: reject them instead of silently ignoring a misspelt tolerance. NaN and
    # infinity are never meant (TOML has literals for both): NaN would disable every comparison it
    # takes part in, and an infinite timeout overflows the timers that enforce it.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BenchConfig(_Model):
    workload: str = Field(
        DEFAULT_WORKLOAD,
        description="Workload factory as 'module:function'; the function returns a benchgate Workload.",
    )
    name: str | None = Field(
        None,
        description="The name results are stored and compared under (baseline store, MLflow, the verdict): "
        "two setups of one workload (e.g. two batch sizes) each get their own baseline. Default: the "
        "workload's own name.",
    )
    workload_args: dict[str, WorkloadArg] = Field(
        default_factory=dict,
        description="Keyword arguments passed to the workload factory: strings, integers, floats and "
        'booleans, each passed as written (512 is an int, 512.0 a float, "512" a string).',
    )
    steps: Int = Field(
        60,
        ge=MIN_STEPS,
        description="Measured training steps per world size (at least 3: the loss-slope check fits a line).",
    )
    warmup: Int = Field(10, ge=0, description="Steps run before measuring (allocator, caches, autotuning).")
    world_sizes: list[Int] | None = Field(
        None,
        description="World sizes to run: [1] or [1, N], e.g. [1, 8]. Default: [1, N] with N = every GPU, "
        "or 2 on CPU.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where to train; auto picks cuda.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="bf16 autocast on CUDA, fp32 on CPU when auto."
    )
    compile: Bool = Field(
        False,
        description="torch.compile the model for the bench's and the A/B's steps; the first warmup step "
        "compiles it, so bench.warmup must be at least 1.",
    )
    threads_per_rank: Int | None = Field(
        None,
        gt=0,
        le=MAX_THREADS,
        description="torch intra-op threads per rank. Default: 1 on CPU (a rank stands for one device, so "
        "scaling efficiency compares equal per-rank resources); on GPU hosts the pod's CPU limit // ranks "
        "on the node, or 4 without a limit (never the node's CPU count: two nodes of one GPU type must "
        "compare).",
    )
    seed: Int = Field(
        0, ge=0, le=MAX_SEED, description="Seed for weights and batches; identical on every run."
    )
    sync_every: Int = Field(
        1,
        ge=1,
        le=MAX_STEPS_PER_WINDOW,
        description="On CUDA, synchronise the device after every this many steps, in the bench and the A/B "
        "alike (an A/B turn is one such window): within a window the host may run ahead of the GPU. "
        "Each step is timed by CUDA events either way. 1 (the default) times steps as a training loop "
        "that reads its loss every step runs them; raise it for steps of a few milliseconds, where the "
        "launch of the next step's first kernels shows.",
    )
    drift_reference: Bool = Field(
        True,
        description="On CPU, time a fixed matmul after every measured step: the host's speed at that moment, "
        "so compare can tell a slower host from slower code. Ignored on GPU.",
    )
    timeout_s: Float = Field(
        60.0,
        gt=0,
        le=MAX_SECONDS,
        description="Collective timeout: a rank waiting longer than this on a peer fails the run.",
    )
    run_timeout_s: Float = Field(
        900.0,
        gt=0,
        le=MAX_SECONDS,
        description="Wall-clock limit for one torchrun launch; the whole job is killed past it.",
    )
    # The bench multiplies it by 1e12 (FLOP/s); past ~1e296 that is inf and the bench would fail at the
    # end. A million TFLOP/s per device is far above any accelerator, and far below that.
    peak_tflops: Float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="Dense peak TFLOP/s of one device at the run's precision, for MFU where the built-in "
        "datasheet table has no entry (another GPU, or a CPU). Default: the table's, else no MFU.",
    )

    @field_validator("workload")
    @classmethod
    def _workload_spec(cls, v: str) -> str:
        module, sep, func = v.partition(":")
        # Checked here, not at import: every dotted part of the module and the function must be names.
        if not sep or not all(part.isidentifier() for part in [*module.split("."), func]):
            raise ValueError("expected 'module:function', e.g. 'my_pkg.workloads:make_workload'")
        return v

    @field_validator("name")
    @classmethod
    def _stored_name(cls, v: str | None) -> str | None:
        # A directory of the baseline store and a word of MLflow keys: the rule of results/bundle.py.
        if v is not None and not STORED_NAME.fullmatch(v):
            raise ValueError(
                "expected up to 200 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return v

    @field_validator("compile")
    @classmethod
    def _compile_warms_up(cls, v: bool, info: Any) -> bool:
        # The first compiled step compiles (seconds to minutes): timed, it would be the slowest step.
        if v and info.data.get("warmup", 1) < 1:
            raise ValueError("needs bench.warmup >= 1: the first compiled step compiles the model")
        return v

    @field_validator("workload_args", mode="before")
    @classmethod
    def _workload_args(cls, v: Any) -> Any:
        # One message naming the argument, rather than one per member of the value's union type.
        if isinstance(v, dict):
            for key, value in v.items():
                if not is_workload_arg(value):
                    raise ValueError(
                        f"the value of {key!r} must be a string, a boolean, or a finite number "
                        f"of at most {MAX_INT} in magnitude"
                    )
        return v

    @field_validator("world_sizes")
    @classmethod
    def _world_sizes(cls, v: list[int] | None) -> list[int] | None:
        return None if v is None else check_world_sizes(v)


class EvalConfig(_Model):
    enabled: Bool = Field(True, description="Run the deterministic eval stage.")
    train_steps: Int = Field(
        400,
        gt=0,
        description="Fixed-seed training steps before evaluating (gpt-tiny learns 2 of 3 probes by 400).",
    )
    seq_len: Int = Field(64, gt=1, description="Window length for eval training and perplexity (bytes).")
    batch_size: Int = Field(16, gt=0, description="Windows per eval training step.")
    # One by default, on every machine, never the machine's cores: the thread count changes the order of
    # the sums and so the numbers (1 and 2 threads differ in the perplexity's 7th digit), so a count that
    # followed the cores or the quota would make evals of two hosts incomparable, where one thread is
    # the same everywhere. It is also what a CPU rank of the bench gets (measure/launch.py), and one
    # thread never waits on a second that a busy host has descheduled: on 2 cores with one kept busy,
    # 2 threads took 2 to 26 times as long as 1, where on 2 quieter cores 1 costs 1.5x (36 s, not 24 s).
    threads: Int = Field(
        1,
        gt=0,
        le=MAX_THREADS,
        description="torch threads for the eval. Default 1 on every machine: the thread count changes the "
        "numbers, so it is fixed to keep them bit-for-bit repeatable and comparable across hosts. More "
        "are capped at the usable CPUs (affinity mask and CPU quota); eval.json records the count that "
        "ran, and compare compares only evals of equal settings.",
    )
    seed: Int = Field(1234, ge=0, le=MAX_SEED, description="Seed for the eval's weights and batch order.")
    # Another seed is another model: gpt-tiny's perplexity spread 3.9% and its probes up to 44 pts over 5
    # seeds, so one seed beyond tolerance is no evidence. Seeds seed+1.. run only then (measure/seeds.py).
    seeds: Int = Field(
        3,
        ge=1,
        le=16,
        description="Seeds in all (seed, seed+1, ...) when the first seed's perplexity is beyond tolerance "
        "of the stored baseline's: it is then judged on the mean over seeds, with the seed-to-seed spread "
        "as noise (checks/quality.py). 1: never more than one.",
    )


class TraceConfig(_Model):
    enabled: Bool = Field(True, description="Record a torch.profiler trace for TensorBoard.")
    wait: Int = Field(1, ge=0, description="Profiler schedule: steps skipped before warmup.")
    warmup: Int = Field(1, ge=0, description="Profiler schedule: steps traced but discarded.")
    active: Int = Field(3, gt=0, description="Profiler schedule: steps recorded into the trace.")


class Tolerances(_Model):
    throughput_drop_pct: Float = Field(
        5.0, gt=0, lt=100, description="FAIL when tokens/s drops more, with confidence (the timing check)."
    )
    memory_increase_pct: Float = Field(10.0, gt=0, description="WARN when peak memory grows more.")
    perplexity_increase_pct: Float = Field(1.5, gt=0, description="FAIL when perplexity worsens more.")
    probe_accuracy_drop_points: Float = Field(
        2.0, gt=0, le=100, description="FAIL when probe accuracy drops more (percentage points)."
    )
    loss_slope_max: Float = Field(
        0.0, description="FAIL when the loss slope (nats/step) over the measured window exceeds this."
    )
    loss_slope_slower_pct: Float = Field(
        25.0,
        gt=0,
        le=100,
        description="FAIL when the loss falls more slowly than the baseline's by more than this share of "
        "the baseline's slope, with confidence (compared only where the baseline's loss falls).",
    )
    loss_increase_pct: Float = Field(
        1.0,
        gt=0,
        description="A/B: FAIL when the candidate's loss, step by step on the same batches, is higher than "
        "the base's by more than this (percent of the base's mean loss), with confidence.",
    )
    scaling_efficiency_drop_points: Float = Field(
        5.0, gt=0, le=100, description="WARN when scaling efficiency drops more (percentage points)."
    )
    energy_per_token_increase_pct: Float = Field(
        10.0,
        gt=0,
        description="WARN when the GPUs' energy per trained token (NVML's energy counter) grows more.",
    )
    confidence: Float = Field(0.95, gt=0.5, lt=1, description="Confidence level of intervals and tests.")


class ABConfig(_Model):
    """The interleaved A/B decision: base and candidate benchmarked side by side, step by step."""

    # A round's sides are bench runs of `steps` steps (ab/runner.round_config), checked as bench.steps is.
    steps: Int = Field(
        30, ge=MIN_STEPS, description="Measured steps per side in one round (A and B alternate)."
    )
    warmup: Int = Field(5, ge=0, description="Steps each side runs before a round is measured.")
    min_rounds: Int = Field(
        4,
        ge=2,
        description="Rounds before the first decision: fewer give no estimate of round-to-round noise.",
    )
    max_rounds: Int = Field(
        27,
        gt=0,
        description="Rounds per world size before the answer is UNKNOWN; the looks (4, 6, 9, 14, 21, 27) "
        "are planned up to it.",
    )
    min_measured_s: Float = Field(
        2.0,
        ge=0,
        le=MAX_SECONDS,
        description="Measured time per side in a round: short steps get more than gate.ab.steps, so one "
        "host spike moves a round's total time little.",
    )
    pin_cores: Bool = Field(
        True,
        description="On CPU, pin rank r of both sides to the same cores: they take turns, so they share "
        "the cores' speed instead of each drawing its own placement.",
    )
    layout: Literal["auto", "interleaved", "sequential"] = Field(
        "auto",
        description="How the two sides share the machine. interleaved: both alive, taking turns step by "
        "step (the CPU default). sequential: one side alive at a time, launches alternating A B B A "
        "(fits a model that takes more than half of a GPU, and a GPU in exclusive-process mode). auto: "
        "sequential on CUDA when two sides cannot fit in the GPU's free memory or the GPU is in "
        "exclusive-process mode, interleaved otherwise.",
    )
    cores_per_rank: Int = Field(
        2,
        ge=0,
        description="On CPU, the usable cores an A/B at ws=N wants per rank: with fewer than this x N, "
        "ws=N is not A/B'd (its row is INFO, WARN where the screen said FAIL, and ws=1 decides timing), "
        "since anything else running lands on the ranks' cores and no number of rounds decides. 1: A/B "
        "on a quiet host with exactly N cores; 0: never skip.",
    )
    explain: Literal["fail", "always", "never"] = Field(
        "fail",
        description="When an A/B runs profiled rounds after its decision, to name the operators behind the "
        "change (compare.json `attribution`): fail (after a FAIL), always (`benchgate run --explain`), "
        "never.",
    )
    explain_rounds: Int = Field(
        1,
        ge=1,
        le=2,
        description="Profiled rounds per world size when explaining (interleaved or sequential as the "
        "decision's); they come after the decision and never count in it.",
    )
    max_seconds: Float = Field(
        600.0,
        gt=0,
        le=MAX_SECONDS,
        description="Budget: wall time per world size and run; no round starts that would end after it. "
        "Where it ends before max_rounds, the rounds so far take the last look (UNKNOWN only where that "
        "look cannot decide; resumable with `benchgate run --resume`).",
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
    baseline_dir: UsablePath = Field(
        Path(".benchgate/baselines"), description="Directory store of baselines, one per machine profile."
    )
    ab: ABConfig = Field(default_factory=ABConfig, description="The interleaved A/B timing decision.")
    on_unknown: Literal["fail", "neutral"] = Field(
        "fail",
        description="What an UNKNOWN verdict does to the exit code: fail (exit 4, the default) or neutral "
        "(exit 0 with a notice: the job passes, the verdict still says UNKNOWN).",
    )
    update_baseline: Literal["auto", "always", "never"] = Field(
        "auto",
        description="auto: write the baseline on branch main from a clean tree when every timing check "
        "PASSes (never after WARN, UNKNOWN or FAIL); always: write it.",
    )


class TrackingConfig(_Model):
    enabled: Bool = Field(True, description="Log each gate run to MLflow and take baselines from there.")
    uri: str = Field(
        "",
        description="MLflow tracking URI (empty: MLFLOW_TRACKING_URI, else the local store in local_dir).",
    )
    experiment: str = Field("benchgate", min_length=1, description="MLflow experiment of the gate runs.")

    @field_validator("uri")
    @classmethod
    def _no_credentials(cls, value: str) -> str:
        refuse_credentials(value, "tracking.uri", MLFLOW_INSTEAD)
        return value

    local_dir: UsablePath = Field(
        Path(".benchgate/mlflow"), description="The embedded store: SQLite (mlflow.db) and artifacts."
    )
    spool_dir: UsablePath = Field(
        Path(".benchgate/spool"), description="Runs not yet logged to MLflow; `benchgate sync` sends them."
    )
    max_wait_s: Float = Field(
        30.0,
        ge=0,
        le=MAX_SECONDS,
        description="Longest a run waits, in total, on an unreachable tracking server.",
    )
    system_metrics: Bool = Field(True, description="Sample CPU/GPU use and memory during the bench.")
    history_runs: Int = Field(20, ge=1, le=500, description="Earlier runs of the profile in the report.")


class RunConfig(_Model):
    """The whole configuration of one gate run, as the config file, the CLI flags and the pipeline carry it.

    One section per stage (`bench`, `eval`, `trace`, `gate` with its tolerances, `tracking`) and `out`,
    the run's result directory; every field has a default. Frozen, and unknown keys are refused; build
    one with `load_config`, which turns a bad value into a ConfigError (exit 2) naming the dotted field.
    """

    bench: BenchConfig = Field(default_factory=BenchConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    trace: TraceConfig = Field(default_factory=TraceConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    out: UsablePath = Field(Path("benchgate-out"), description="Directory for this run's result files.")


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Build a RunConfig from an optional TOML file plus dotted overrides (CLI flags win)."""
    data: dict[str, Any] = {} if path is None else _read_toml(Path(path))
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for depth, key in enumerate(parents):
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                where = ".".join(parents[: depth + 1])
                raise ConfigError(f"{where}: got {shown(node)} (expected a table, as {dotted} is set in it)")
        node[leaf] = value
    return parse_config(data)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"--config: file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:  # a directory, no permission, not UTF-8
        raise ConfigError(f"--config: cannot read {path} ({e})") from None
    try:
        return tomllib.loads(text)
    except ValueError as e:
        # TOMLDecodeError, and the plain ValueError tomllib lets through for an integer of more than
        # 4300 digits (Python's limit on converting text to int).
        raise ConfigError(f"--config: {path} is not valid TOML ({e})") from None
    except RecursionError:
        raise ConfigError(
            f"--config: {path} is not usable TOML (arrays or tables nested too deeply)"
        ) from None


def parse_config(data: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e)) from None


def shown(value: Any, limit: int = 200) -> str:
    """repr(value) for a message, cut to `limit` characters.

    Python refuses to write an int of more than 4300 digits as text (ValueError), and a TOML file or a
    JSON flag can hold one: such a value is described instead.
    """
    if isinstance(value, int) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except ValueError:  # a huge int inside a list or table
        return f"a {type(value).__name__} holding an integer too large to print"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def format_validation_error(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "config"
        lines.append(f"{field}: got {shown(item.get('input'))} ({item['msg']})")
    return "; ".join(lines)
