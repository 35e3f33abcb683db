"""A result bundle: the files one run leaves in its directory, read back and checked.

    env.json              environment and machine profile        (stage env)
    metrics-ws<N>.json    one per world size, with every sample   (stage bench)
    eval.json             perplexity and probes                   (stage eval, optional)
    history.json          run-level p50s of past baselines        (baseline store only)

A baseline is a bundle too, copied into the baseline store. Reading checks everything that compare, the
figures, the report, MLflow logging and the baseline store rely on, so a truncated, hand-edited or
foreign file is reported with its path, the bad field and its value (BaselineError, exit 2) instead of
failing later with a traceback. Readers get the checked values: numbers are JSON numbers (never "1.5"
or true) inside bounds that keep the gate's arithmetic finite, and the machine profile and workload
are safe as directory names of the baseline store.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from benchgate.errors import BaselineError
from benchgate.kit.files import read_json
from benchgate.results.eval_seeds import seed_records

METRICS_FILE = re.compile(r"^metrics-ws(\d+)\.json$")
# Written by the env stage (who ran it: the KFP run, when) and by the publish stage (where the run went).
RUN_FILE = "run.json"
PUBLISHED_FILE = "published.json"
# The machine profile and the workload name are directories of the baseline store (<profile>/<workload>)
# and words of the verdict table and of MLflow keys. env.py writes profiles from these characters only,
# and workload names follow the same rule; anything else ('..', '/', a NUL, markup) could leave the store.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def _name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(
            "expected up to 200 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return value


# Bounds on what the gate computes with. Compare takes ratios and logs of timings (the screen), sums of
# squares of losses (the slope) and sizes in MiB; a step of 1e-300 s or a loss of 1e300 would overflow
# that arithmetic instead of being judged. The bounds are far outside anything a run measures.
Name = Annotated[str, AfterValidator(_name)]
Seconds = Annotated[float, Field(ge=1e-9, le=1e9)]  # a nanosecond to 30 years per step
Rate = Annotated[float, Field(ge=1e-9, le=1e18)]  # tokens/s
Figure = Annotated[float, Field(ge=1e-12, le=1e18)]  # a run-level p50 in history.json (s, tokens/s, ratio)
Number = Annotated[float, Field(ge=-1e30, le=1e30)]
Amount = Annotated[float, Field(ge=0, le=1e30)]  # bytes, fractions, seconds since a start
Count = Annotated[int, Field(ge=1, le=2**53 - 1)]
Size = Annotated[int, Field(ge=0, le=2**53 - 1)]
Durations = Annotated[list[Seconds], Field(min_length=2)]  # per-step times: a spread needs two


class _Checked(BaseModel):
    # strict: a JSON string or boolean is never read as a number; finite: JSON's NaN and Infinity are
    # refused. Unknown fields are kept as they are: the files carry more than the readers need.
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _Samples(_Checked):
    step_time_s: Durations
    tokens_per_s: Annotated[list[Rate], Field(min_length=2)]
    loss: list[Number]
    reference_s: Durations | None = None


class _Memory(_Checked):
    peak_bytes: Amount


class _FlopsPerToken(_Checked):
    # Each estimator's FLOPs per trained token; null where it does not apply (no flops_per_token()).
    dense_6n: Amount | None = None
    attention_aware: Amount | None = None
    counted: Amount | None = None


class _Mfu(_Checked):
    dense_6n: Amount | None = None
    attention_aware: Amount | None = None
    counted: Amount | None = None
    flops_per_token: _FlopsPerToken | None = None


class _Slope(_Checked):
    slope: Number | None = None


class _System(_Checked):
    t_s: list[Amount]
    series: dict[Name, list[Number | None]] = {}


class _Diverged(_Checked):
    # Where the run's loss stopped being finite (measure/divergence.py); checks/loss.py reads it.
    step: Count
    phase: Literal["warmup", "measured"]
    rank: Size
    value: Literal["inf", "-inf", "nan"]


class _Metrics(_Checked):
    schema_version: Size
    machine_profile: Name
    workload: Name
    world_size: Annotated[int, Field(ge=1, le=2**20)]
    precision: str
    tokens_per_step_global: Count
    # What tokens_per_step counts (workloads/contract.UNIT_PATTERN); files written before it: tokens.
    unit: Annotated[str, Field(pattern=r"^[a-z]{1,20}$")] = "tokens"
    samples: _Samples
    memory: _Memory
    # Optional (older files lack them), but never null where a reader indexes into them.
    mfu: _Mfu = _Mfu()
    loss_slope: _Slope | None = None
    diverged: _Diverged | None = None
    system: _System | None = None
    device: str | None = None
    threads_per_rank: Count | None = None
    steps: Size | None = None
    warmup: Size | None = None


class _Git(_Checked):
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None


class _Gpu(_Checked):
    count: Annotated[int, Field(ge=0, le=2**20)] | None = None


class _Env(_Checked):
    machine_profile: Name
    git: _Git = _Git()
    gpu: _Gpu = _Gpu()
    # What A/B held fixed (fingerprint.py); absent from runs recorded before it existed.
    fingerprints: dict[str, str] | None = None


class _Probe(_Checked):
    accuracy_pct: Annotated[float, Field(ge=0, le=100)]


class _Eval(_Checked):
    skipped: str | None = None  # present (with the reason) when the workload has no eval hook
    perplexity: Annotated[float, Field(gt=0)] | None = None
    probes: dict[Name, _Probe] = {}


class _HistoryRun(_Checked):
    commit: str | None = None
    created_unix: Annotated[float, Field(ge=0, le=1e12)] | None = None
    p50: dict[str, dict[str, Figure | None]] = {}


class _History(_Checked):
    runs: list[_HistoryRun]


@dataclass
class Bundle:
    """One run's result directory as `load_bundle` read it back, every file validated.

    `path` is the directory; `env` is env.json (`machine_profile` its profile); `metrics` maps each
    world size to its metrics-ws<N>.json (at least one, all of one workload: `workload`); `eval` is
    eval.json, None where the run has none; `history` is history.json's earlier baseline runs (a
    baseline in the store only, else empty), whose run-to-run noise the timing screen judges by.
    """

    path: Path
    env: dict[str, Any]
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    eval: dict[str, Any] | None = None
    # Run-level p50s of earlier baselines of this profile (baseline store only): the run-to-run noise.
    history: list[dict[str, Any]] = field(default_factory=list)

    def history_figures(self, world_size: int) -> list[dict[str, float]]:
        """Earlier baseline runs' run-level figures at one world size (step_time_s, mean_step_time_s, and
        the *_per_reference figures where the run timed the drift reference), oldest first."""
        rows = (h.get("p50", {}).get(str(world_size)) for h in self.history)
        return [{k: float(v) for k, v in row.items() if v is not None} for row in rows if row]

    @property
    def machine_profile(self) -> str:
        return str(self.env["machine_profile"])

    @property
    def workload(self) -> str | None:
        for m in self.metrics.values():
            return str(m["workload"])
        return None


# Values in messages are shortened: a metrics file holds thousands of samples, and the message is one line.
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 60, 60, 40
_SHORT.maxlist = _SHORT.maxdict = 4
_SHORT.maxlevel = 2
_ERRORS_SHOWN = 3


def _key(key: str) -> str:
    return _SHORT.repr(key)[1:-1]  # escaped and shortened, without the quotes


def _field_name(loc: tuple[int | str, ...]) -> str:
    """pydantic's location as the file's own path to the field: samples.step_time_s[3]."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{_key(part)}" if text else _key(part)
    return text


def _describe(error: ValidationError) -> str:
    """One line per problem, each naming the field and the value found: 'samples.loss[3]: got 'x' (…)'."""
    parts = []
    for item in error.errors()[:_ERRORS_SHOWN]:
        found = "nothing" if item["type"] == "missing" else _SHORT.repr(item["input"])
        # pydantic's wording names this module's private classes; the file only knows JSON objects.
        problem = "expected a JSON object" if item["type"] == "model_type" else item["msg"]
        parts.append(f"{_field_name(item['loc'])}: got {found} ({problem.removeprefix('Value error, ')})")
    if error.error_count() > _ERRORS_SHOWN:
        parts.append(f"and {error.error_count() - _ERRORS_SHOWN} more")
    return "; ".join(parts)


def _read(path: Path) -> Any:
    """The parsed JSON of `path`; every way a file can be unreadable is a BaselineError naming it."""
    try:
        data = read_json(path)
    except ValueError as e:  # read_json names the file: missing, not UTF-8, not JSON, nested too deeply
        raise BaselineError(str(e)) from None
    where = _unencodable(data)
    if where is not None:
        # JSON escapes can hold half of a UTF-16 pair, which no file, terminal or MLflow tag can take.
        raise BaselineError(f"{path}: {where or 'the file'}: holds a lone surrogate escape (\\ud800-\\udfff)")
    return data


def _unencodable(data: Any) -> str | None:
    """The field holding a string that is not valid Unicode, or None. Iterative: files may nest deeply."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                name = f"{where}.{_key(key)}" if where else _key(key)
                if not _encodes(key):
                    return name
                stack.append((name, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, str) and not _encodes(value):
            return where
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _checked(path: Path, model: type[_Checked]) -> dict[str, Any]:
    data = _read(path)
    if not isinstance(data, dict):
        raise BaselineError(f"{path}: got {_SHORT.repr(data)} (expected a JSON object)")
    try:
        checked = model.model_validate(data)
    except ValidationError as e:
        raise BaselineError(f"{path}: {_describe(e)}") from None
    # The checked values (1 read as 1.0 where a float is meant), fields the file did not have left out.
    return checked.model_dump(exclude_unset=True)


def _check_samples(path: Path, metrics: dict[str, Any]) -> None:
    # One step gives one step time, one tokens/s and one loss: MLflow's per-step series pair them up.
    samples = metrics["samples"]
    steps = len(samples["step_time_s"])
    for name in ("tokens_per_s", "loss"):
        # A run that diverged keeps the losses before it only (measure/divergence.py), every step's time.
        if name == "loss" and metrics.get("diverged") and len(samples[name]) <= steps:
            continue
        if len(samples[name]) != steps:
            raise BaselineError(
                f"{path}: samples.{name}: got {len(samples[name])} values, but samples.step_time_s has "
                f"{steps} (one per measured step)"
            )
    system = metrics.get("system") or {}
    for name, values in system.get("series", {}).items():
        if len(values) != len(system["t_s"]):
            raise BaselineError(
                f"{path}: system.series.{name}: got {len(values)} values, but system.t_s has "
                f"{len(system['t_s'])} (one per sampling time)"
            )


def _metrics_name(metrics: dict[str, Any]) -> str:
    return f"metrics-ws{metrics['world_size']}.json"


def _read_metrics(path: Path, bundle: Bundle) -> None:
    metrics = _checked(path, _Metrics)
    world_size = metrics["world_size"]
    if path.name != _metrics_name(metrics):
        name_says = METRICS_FILE.match(path.name)
        raise BaselineError(
            f"{path}: world_size is {world_size}, file name says {name_says.group(1) if name_says else '?'}"
        )
    _check_samples(path, metrics)
    first = next(iter(bundle.metrics.values()), None)
    if first is not None and first["workload"] != metrics["workload"]:
        raise BaselineError(
            f"{path}: workload is {metrics['workload']!r}, {path.with_name(_metrics_name(first))} says "
            f"{first['workload']!r}: one run benchmarks one workload"
        )
    bundle.metrics[world_size] = metrics


def _read_eval(path: Path) -> dict[str, Any]:
    evaluation = _checked(path, _Eval)
    if "skipped" in evaluation:
        return evaluation
    if evaluation.get("perplexity") is None:
        raise BaselineError(f"{path}: perplexity: got nothing (an eval that was not skipped has one)")
    evaluation.setdefault("probes", {})  # an eval that ran no probes has none to compare
    try:  # each seed's figures and items, as compare reads them (results/eval_seeds.py)
        seed_records(evaluation)
    except BaselineError as e:
        raise BaselineError(f"{path}: {e}") from None
    return evaluation


def load_bundle(directory: Path) -> Bundle:
    """Read a run's result directory (or a baseline's) back as a Bundle, checking every file in it.

    Needs env.json and at least one metrics-ws<N>.json; reads history.json and eval.json where present.
    A missing, truncated, hand-edited or foreign file is a BaselineError (exit 2) naming the file, the
    field and the value, so that every later reader (compare, the report, the baseline store) gets
    checked values.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise BaselineError(f"{directory}: no such result directory")
    bundle = Bundle(path=directory, env=_checked(directory / "env.json", _Env))
    try:
        paths = sorted(directory.iterdir())
    except OSError as e:
        raise BaselineError(f"{directory}: cannot list the result directory ({e.strerror})") from None
    for path in paths:
        if METRICS_FILE.match(path.name):
            _read_metrics(path, bundle)
    if not bundle.metrics:
        raise BaselineError(f"{directory}: no metrics-ws<N>.json files")
    history_path = directory / "history.json"
    if history_path.exists():
        bundle.history = list(_checked(history_path, _History)["runs"])
    eval_path = directory / "eval.json"
    if eval_path.exists():
        bundle.eval = _read_eval(eval_path)
    return bundle
