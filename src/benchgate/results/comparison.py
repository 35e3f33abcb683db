"""The comparison as data: one Check row per metric, the verdict they add up to, and compare.json.

`compare.py` builds a Comparison; every later reader (the A/B task, the report, the baseline policy, the
gate task, `benchgate run`'s gathering, sync) reads compare.json back through `load_comparison`, which
refuses a file that is not one (hand-edited, cut short) naming the file, the field and the value.
"""

from __future__ import annotations

import reprlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from benchgate.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_UNKNOWN, BaselineError
from benchgate.kit.files import read_json

Status = Literal["PASS", "WARN", "UNKNOWN", "FAIL", "NEW", "INFO"]
STATUSES: tuple[Status, ...] = get_args(Status)  # every row status, e.g. for counts per status
Verdict = Literal["PASS", "WARN", "UNKNOWN", "FAIL"]
SEVERITY = {"INFO": 0, "NEW": 0, "PASS": 0, "WARN": 1, "UNKNOWN": 2, "FAIL": 3}
VERDICTS: tuple[Verdict, ...] = ("PASS", "WARN", "UNKNOWN", "FAIL")
TIMING = "tokens_per_s"
SCALING = "scaling_efficiency"
CREEP = "tokens_per_s_since_anchor"  # the run against the pinned anchor (checks/creep.py), per world size


@dataclass(frozen=True)
class Check:
    """One row of a comparison: a figure of this run, its baseline, the change and the row's status.

    `name` and `unit` label the row ("tokens/s (ws=2)", "tok/s"); `current` and `baseline` are the
    figures (`baseline` None without one); `change` is in `change_unit` (percent, or points), with its
    interval `ci_low`..`ci_high` where the rule has one; `rule` says what decides the row and `note` how
    it was decided. `status` is PASS, WARN, UNKNOWN or FAIL (each adds to the verdict), NEW (no baseline)
    or INFO (shown, never judged). Timing rows also carry `metric`, `world_size` and `decided_by`.
    """

    name: str
    unit: str
    current: float | None
    baseline: float | None = None
    change: float | None = None  # percent, or points for *_points rows
    change_unit: str = "%"
    ci_low: float | None = None
    ci_high: float | None = None
    rule: str = ""
    status: Status = "PASS"
    note: str = ""
    # For timing checks: "tokens_per_s", its world size, and what decided it ("screen", "ab",
    # "unchanged", or "host": a CPU host too small to A/B that world size, ab/host_fit.py);
    # "tokens_per_s_since_anchor" for the creep rows (decided by "screen", "unchanged", or by an A/B of
    # the anchor's commit where the screen would FAIL: ab/creep_ab.py);
    # "scaling_efficiency" for the efficiency row ("ab" where A/B rounds at both world sizes judged it).
    metric: str = ""
    world_size: int | None = None
    decided_by: str = ""
    # The worsening the row's rule tolerates, in the change's unit (a drop of tokens/s or efficiency:
    # 5.0 is -5%), where the rule has one: a PASS beyond it says why in its row (checks/tables.py).
    tolerance: float | None = None
    # A row an A/B decided: the A/B's own pair, base and candidate measured in turns (tokens/s over
    # each round's total time, the mean over rounds; or their scaling efficiency), whose paired change
    # is `change`. `baseline` stays the stored baseline's figure and `current` this run's bench figure
    # (checks/paired.py): one figure per run wherever it is shown.
    ab_base: float | None = None
    ab_candidate: float | None = None


@dataclass
class Comparison:
    """Baseline against this run: the Check rows, notes, and the verdict and exit code they add up to.

    `verdict` is the worst row status (PASS, WARN, UNKNOWN or FAIL; NEW and INFO count as PASS), and
    `exit_code` what the gate exits with: 0 for PASS and WARN, 1 (EXIT_REGRESSION) for FAIL, 4
    (EXIT_UNKNOWN) for UNKNOWN, or 0 there where `on_unknown` is "neutral". `to_dict` is compare.json;
    `load_comparison` reads it back.
    """

    machine_profile: str
    workload: str | None
    baseline_path: str | None
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # What an UNKNOWN verdict does to the exit code (gate.on_unknown): "fail" (exit 4) or "neutral" (0).
    on_unknown: str = "fail"
    # Per world size ("1", "2"), what an explained A/B's change is made of (attribution/attribute.py).
    attribution: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        worst = max((SEVERITY[c.status] for c in self.checks), default=0)
        return VERDICTS[worst]

    @property
    def exit_code(self) -> int:
        unknown = EXIT_PASS if self.on_unknown == "neutral" else EXIT_UNKNOWN
        return {"FAIL": EXIT_REGRESSION, "UNKNOWN": unknown}.get(self.verdict, EXIT_PASS)

    def timing(self, world_size: int) -> Check | None:
        return next((c for c in self.checks if c.metric == TIMING and c.world_size == world_size), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "on_unknown": self.on_unknown,
            "machine_profile": self.machine_profile,
            "workload": self.workload,
            "baseline_path": self.baseline_path,
            "notes": self.notes,
            "checks": [asdict(c) for c in self.checks],
            **({"attribution": self.attribution} if self.attribution else {}),
        }

    @classmethod
    def from_dict(cls, data: Any, source: Path | str = "compare.json") -> Comparison:
        """The inverse of to_dict: a pipeline task reads the comparison an earlier task wrote. What is not
        one (hand-edited, cut short, another file) is a BaselineError naming `source` and the field."""
        if not isinstance(data, dict):
            raise BaselineError(f"{source}: got {_SHORT.repr(data)} (expected a JSON object)")
        read = _validated(_ComparisonFile, data, source, ())
        rows = [_validated(_CheckRow, row, source, ("checks", i)) for i, row in enumerate(read.checks)]
        checks = [Check(**row.model_dump()) for row in rows]
        return cls(
            read.machine_profile,
            read.workload,
            read.baseline_path,
            checks,
            list(read.notes),
            read.on_unknown,
            dict(read.attribution),
        )


def load_comparison(path: Path) -> Comparison:
    """compare.json read back; missing, cut short or not a comparison: a BaselineError naming the file."""
    try:
        data = read_json(path)
    except ValueError as e:  # read_json's message names the file
        raise BaselineError(str(e)) from None
    return Comparison.from_dict(data, path)


# compare.json as read back. Strict: a number is a JSON number (never "1.5" or true), never NaN. Each row
# has every field of a Check, as to_dict writes them (but LATER_FIELDS, absent from older files), and no
# other key: a row without its status (or with a misspelt one) must not read as Check's default, PASS.
# The verdict, exit code and schema version at the top are derived from the rows when written, so they
# are not read back.
class _ComparisonFile(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    machine_profile: str
    workload: str | None
    baseline_path: str | None
    checks: list[Any]
    notes: list[str]
    on_unknown: Literal["fail", "neutral"] = "fail"
    attribution: dict[str, dict[str, Any]] = {}  # absent before attribution existed


# Fields added after compare.json files were first written: optional, read as their default when absent.
LATER_FIELDS = {"tolerance": None, "ab_base": None, "ab_candidate": None}
_ROW_FIELDS: dict[str, Any] = {  # every other field is required
    name: (hint, LATER_FIELDS.get(name, ...)) for name, hint in get_type_hints(Check).items()
}
_CheckRow = create_model(
    "Check", __config__=ConfigDict(strict=True, allow_inf_nan=False, extra="forbid"), **_ROW_FIELDS
)
_SHORT = reprlib.Repr()  # a value in a message is shortened: the message is one line
_SHORT.maxstring = _SHORT.maxother = 60


def _validated(model: Any, data: Any, source: Path | str, at: tuple[str | int, ...]) -> Any:
    """`data` checked by `model`; else a BaselineError naming `source`, and each field (the first three)
    as the file's own path to it (checks[2].status) with the value found."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = []
        for item in e.errors()[:3]:
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in (*at, *item["loc"]))
            found = "nothing" if item["type"] == "missing" else _SHORT.repr(item["input"])
            problems.append(f"{where.lstrip('.')}: got {found} ({item['msg']})")
        if e.error_count() > 3:
            problems.append(f"and {e.error_count() - 3} more")
        raise BaselineError(f"{source}: {'; '.join(problems)}") from None
