"""A result bundle: the files one run leaves in its directory, read back and checked.

    env.json              environment and machine profile        (stage env)
    metrics-ws<N>.json    one per world size, with every sample   (stage bench)
    eval.json             perplexity and probes                   (stage eval, optional)
    history.json          run-level p50s of past baselines        (baseline store only)

A baseline is a bundle too, copied into the baseline store. Reading checks what compare relies on, so a
truncated or hand-edited file is reported with its path and the bad field instead of failing later.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from benchgate.config import format_validation_error
from benchgate.errors import BaselineError
from benchgate.files import read_json

METRICS_FILE = re.compile(r"^metrics-ws(\d+)\.json$")


class _Checked(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Samples(_Checked):
    step_time_s: list[float]
    tokens_per_s: list[float]
    loss: list[float]
    reference_s: list[float] | None = None

    @field_validator("step_time_s", "tokens_per_s", "reference_s")
    @classmethod
    def _positive(cls, v: list[float] | None) -> list[float] | None:
        if v is None:
            return v
        if len(v) < 2:
            raise ValueError(f"needs at least 2 samples, got {len(v)}")
        if any(not math.isfinite(x) or x <= 0 for x in v):
            raise ValueError("every sample must be a positive finite number")
        return v


class _Memory(_Checked):
    peak_bytes: float


class _Metrics(_Checked):
    schema_version: int
    machine_profile: str
    workload: str
    world_size: int
    precision: str
    tokens_per_step_global: int
    samples: _Samples
    memory: _Memory


class _Env(_Checked):
    machine_profile: str


@dataclass
class Bundle:
    path: Path
    env: dict[str, Any]
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    eval: dict[str, Any] | None = None
    # Run-level p50s of earlier baselines of this profile (baseline store only): the run-to-run noise.
    history: list[dict[str, Any]] = field(default_factory=list)

    def history_figures(self, world_size: int) -> list[dict[str, float]]:
        """Earlier baseline runs' run-level figures at one world size (step_time_s, and
        step_time_per_reference where the run timed the drift reference), oldest first."""
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


def _checked(path: Path, model: type[_Checked]) -> dict[str, Any]:
    try:
        data = read_json(path)
    except ValueError as e:
        raise BaselineError(str(e)) from None
    try:
        model.model_validate(data)
    except ValidationError as e:
        raise BaselineError(f"{path}: {format_validation_error(e)}") from None
    return data  # type: ignore[no-any-return]


def load_bundle(directory: Path) -> Bundle:
    directory = Path(directory)
    if not directory.is_dir():
        raise BaselineError(f"{directory}: no such result directory")
    bundle = Bundle(path=directory, env=_checked(directory / "env.json", _Env))
    for path in sorted(directory.iterdir()):
        match = METRICS_FILE.match(path.name)
        if match:
            metrics = _checked(path, _Metrics)
            if metrics["world_size"] != int(match.group(1)):
                raise BaselineError(
                    f"{path}: world_size is {metrics['world_size']}, file name says {match.group(1)}"
                )
            bundle.metrics[metrics["world_size"]] = metrics
    if not bundle.metrics:
        raise BaselineError(f"{directory}: no metrics-ws<N>.json files")
    history_path = directory / "history.json"
    if history_path.exists():
        try:
            bundle.history = list(read_json(history_path)["runs"])
        except (ValueError, KeyError, TypeError) as e:
            raise BaselineError(f"{history_path}: unreadable baseline history ({e})") from None
    eval_path = directory / "eval.json"
    if eval_path.exists():
        bundle.eval = _checked(eval_path, _Checked)
    return bundle
