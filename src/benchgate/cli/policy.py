"""`benchgate policy check`: whether the controller, installed with the chart's values, would admit a
BenchmarkRun or a BenchmarkSchedule's runs, and why not, before anything reaches a cluster.

It goes the controller's own way: the chart's values (its values.yaml, with `--values` files merged
over it as Helm merges them) give the policy through `controller/decide/policy_values.py`, the same
definition the chart's BENCHGATE_POLICY renders; each document is validated as the controller
validates a new run (`planning.submission`: the resource's model, then the pipeline's arguments) and
checked by `policy_checks.check`. A BenchmarkSchedule is checked as its runs would be: its runTemplate
with a placeholder commit, counted as the schedule's own runs (the controller proves that from each
run's owner and template; here it is assumed).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final

import typer
import yaml

from benchgate.cli.terminal import PlainCommand, console, exit_codes, option
from benchgate.cli.terminal import fail as _fail
from benchgate.controller.decide import planning as plan
from benchgate.controller.decide.admin_policy import Policy
from benchgate.controller.decide.policy_checks import check
from benchgate.controller.decide.policy_values import merged_values, policy_from_values
from benchgate.controller.spec.resources import BenchmarkScheduleSpec, parse_spec
from benchgate.errors import EXIT_BAD_INPUT, EXIT_PASS, ConfigError
from benchgate.kfp.run_request import pipeline_parameter_names

# Refused (or invalid) is what the user passed, and changing it fixes it: the bad-input code.
EXIT_REFUSED: Final = EXIT_BAD_INPUT
POLICY_CODES = exit_codes(
    (EXIT_PASS, "every document is admitted"),
    (
        EXIT_REFUSED,
        "a document is refused (the rule and the field named) or invalid, or bad input: a file that "
        "cannot be read, is not YAML or not a BenchmarkRun or BenchmarkSchedule, or bad values",
    ),
)
# The commit a schedule's template is checked with: the controller resolves the branch head later.
PLACEHOLDER_COMMIT: Final = "0" * 40
KINDS: Final = ("BenchmarkRun", "BenchmarkSchedule")
# The chart of this checkout: src/benchgate/cli/ -> the repository root.
CHART_DIR: Final = Path(__file__).resolve().parents[3] / "charts" / "benchgate"

policy_app = typer.Typer(
    no_args_is_help=True,
    help="The controller's admin policy, as the chart's values set it.",
    epilog=POLICY_CODES,
)


def _load_yaml(path: Path, what: str) -> list[Any]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot be read ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {path}: not YAML ({e})") from None


def chart_values(values_files: list[Path], chart: Path) -> dict[str, Any]:
    """The chart's values.yaml with each of `values_files` merged over it, in order, as Helm does."""
    merged: dict[str, Any] = {}
    for path in [chart / "values.yaml", *values_files]:
        documents = _load_yaml(path, "values file")
        if len(documents) > 1 or (documents and not isinstance(documents[0], dict)):
            raise ConfigError(f"values file {path}: expected one map of values, got {documents!r:.120}")
        merged = merged_values(merged, documents[0] if documents else {})
    return merged


def verdict(document: Any, where: str, policy: Policy, mlflow_uri: str, known: set[str]) -> list[str]:
    """The lines that say whether `policy` admits `document` (the first starts with `admitted` or
    `refused`); a ConfigError for a document that is no BenchmarkRun or BenchmarkSchedule."""
    if not isinstance(document, dict) or document.get("kind") not in KINDS:
        got = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise ConfigError(f"{where}: kind: got {got!r} (expected BenchmarkRun or BenchmarkSchedule)")
    meta = document.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "(unnamed)")
    spec = document.get("spec")
    kind = document["kind"]
    notes = []
    owned = kind == "BenchmarkSchedule"
    if owned:
        try:
            schedule = parse_spec(BenchmarkScheduleSpec, spec)
        except ConfigError as e:
            return [f"refused {kind} {namespace}/{name}: InvalidSpec", f"  {e}"]
        template = schedule.run_template.spec.model_dump(by_alias=True, exclude_none=True)
        spec = {**template, "branch": template.get("branch") or "main", "commit": PLACEHOLDER_COMMIT}
        notes.append(
            "  (its runTemplate with a placeholder commit; its runs counted as the schedule's own, which "
            "the controller checks against each run's owner and template, not checked here)"
        )
    found = plan.submission(
        spec if isinstance(spec, dict) else {}, {}, {}, namespace, name, "uid", mlflow_uri, known, _NOW
    )
    if isinstance(found, plan.Outcome):  # the model or the pipeline's validation refused it
        message = found.warning[1] if found.warning else str(found.give_up)
        return [f"refused {kind} {namespace}/{name}: InvalidSpec", f"  {message}", *notes]
    admission = check(found.spec, namespace, owned, policy)
    if not admission.admitted:
        lines = [f"refused {kind} {namespace}/{name}"]
        lines += [f"  {r.reason}: {r.message}" for r in admission.refusals]
        return lines + notes
    lines = [f"admitted {kind} {namespace}/{name}"]
    if admission.lowered:
        lines.append(f"  PromotionDisabled: {admission.lowered}")
    if admission.active_deadline_seconds is not None:
        lines.append(f"  activeDeadlineSeconds: {admission.active_deadline_seconds}")
    return lines + notes


# A fixed instant: no decision of the check reads the clock, only the status it would write.
_NOW: Final = datetime(2000, 1, 1, tzinfo=UTC)


@policy_app.command(name="check", cls=PlainCommand, epilog=POLICY_CODES)
def check_command(
    file: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="YAML of BenchmarkRuns or BenchmarkSchedules, one a document."),
    ],
    values: Annotated[
        list[Path] | None,
        option(
            "--values",
            "-f",
            metavar="FILE",
            text="Helm values, merged over the chart's defaults in order (repeatable).",
            default="the chart's values.yaml alone",
        ),
    ] = None,
    chart: Annotated[
        Path | None,
        option(
            metavar="DIR", text="The chart whose values.yaml holds the defaults.", default="this checkout's"
        ),
    ] = None,
) -> None:
    """Say whether the controller, with the chart's values, would admit each BenchmarkRun or
    BenchmarkSchedule in FILE, and name the rule and the field of each refusal."""
    try:
        settings = chart_values(list(values or []), chart or CHART_DIR)
        policy = policy_from_values(settings)
        mlflow = settings.get("mlflow")
        mlflow = mlflow if isinstance(mlflow, dict) else {}
        mlflow_uri = str(mlflow.get("trackingUri") or "")
        documents = [(f"{file}, document {i + 1}", d) for i, d in enumerate(_load_yaml(file, "file"))]
        if not documents:
            raise ConfigError(f"{file}: no YAML document")
        known = pipeline_parameter_names()
        verdicts = [verdict(d, where, policy, mlflow_uri, known) for where, d in documents]
    except ConfigError as e:
        _fail(e)
    for lines in verdicts:
        console.print("\n".join(lines), markup=False, highlight=False)
    refused = any(lines[0].startswith("refused") for lines in verdicts)
    raise typer.Exit(EXIT_REFUSED if refused else EXIT_PASS)


__all__ = ["CHART_DIR", "POLICY_CODES", "chart_values", "check_command", "policy_app", "verdict"]
