"""`benchgate bisect --good REF --bad REF`: the first commit of the range slower than --good beyond
tolerance, found by interleaved A/B between commits (ranges/bisect.py, ranges/bisect_run.py). Thin:
parse, validate, run, print each step as it is decided (the step running: cli/run_output.step_display)
and the culprit at the end.

`--submit` runs it on a KFP cluster instead, as one pipeline run (kfp/bisect/pipeline.py): its pod runs
this command on a full clone, with $BENCHGATE_KFP_RUN_ID set (kfp/bisect/task.py), which tags the MLflow
run; `--wait` follows the run and reads the bisection back from MLflow by that tag.

Lines are printed without markup: commit subjects and author names are the user's text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from benchgate.ab.decision import ABDecision
from benchgate.attribution.lines import block_lines
from benchgate.cli.mlflow_access import mlflow_ui_command
from benchgate.cli.progress_lines import ProgressLines
from benchgate.cli.run_output import LiveSteps, step_display
from benchgate.cli.terminal import (
    SubmitExperimentOption,
    TrackingUriOption,
    WorkloadArgOption,
    WorkloadFactoryOption,
    config_option,
    console,
    errors,
    exit_codes,
    fail,
    option,
    parse_pairs,
)
from benchgate.config import RunConfig, load_config
from benchgate.errors import (
    EXIT_BAD_INPUT,
    EXIT_PASS,
    EXIT_REGRESSION,
    EXIT_RUN_FAILED,
    EXIT_UNKNOWN,
    BenchgateError,
    ConfigError,
    RunFailedError,
)
from benchgate.kit.files import read_json
from benchgate.ranges.bisect import Bisection, Step, max_decisions
from benchgate.ranges.bisect_run import (
    BISECT_FILE,
    BisectRange,
    BisectReport,
    resolve_bisect_range,
    run_bisect,
)

BISECT_CODES = exit_codes(
    (
        EXIT_PASS,
        "no regression beyond tolerance between --good and --bad (--submit without --wait: submitted)",
    ),
    (EXIT_REGRESSION, "culprit found: the first commit slower than --good beyond tolerance (printed)"),
    (
        EXIT_BAD_INPUT,
        "bad input: a ref, the range (--good not an ancestor of --bad), a flag, the config, the workload",
    ),
    (
        EXIT_RUN_FAILED,
        "a run failed (a rank crashed or hung, a disk refused a write), or it was interrupted; with "
        "--submit: KFP unreachable, the pipeline run failed, or --wait timed out",
    ),
    (EXIT_UNKNOWN, "UNKNOWN: a step stayed undecided after more rounds; the narrowed range is printed"),
)
DEFAULT_OUT = Path("benchgate-bisect")


def _say(text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def decision_text(decision: ABDecision) -> str:
    """'FAIL -33.1% [-35.0%, -31.2%] (98.7% two-sided, each end a 99.4% one-sided bound), 3 rounds'."""
    if decision.change_pct is None:
        return f"{decision.status}, no rounds"
    text = f"{decision.status} {decision.change_pct:+.1f}%"
    if decision.ci_low_pct is not None and decision.ci_high_pct is not None and decision.ci_level:
        one_sided = (1 + decision.ci_level) / 2
        text += (
            f" [{decision.ci_low_pct:+.1f}%, {decision.ci_high_pct:+.1f}%] ({decision.ci_level:.1%} "
            f"two-sided, each end a {one_sided:.1%} one-sided bound)"
        )
    return f"{text}, {decision.rounds} rounds"


class _Printer:
    """The bisect's listener: a line as each A/B starts (the display's step until then), one when decided."""

    def __init__(self, span: BisectRange, display: LiveSteps | ProgressLines) -> None:
        self.span, self.display = span, display

    def note(self, text: str) -> None:
        errors.print(f"note: {text}", markup=False, highlight=False, soft_wrap=True)

    def ab_started(self, number: int, base: str, candidate: str, more_rounds: bool) -> None:
        against = "good" if base == self.span.good.sha else "its parent"
        more = ", more rounds after an UNKNOWN" if more_rounds else ""
        self.display.say(f"step {number}: A/B of {candidate[:12]} against {against} {base[:12]}{more} ...")
        self.display.begin(f"step {number}: A/B of {candidate[:12]}")

    def step_decided(self, step: Step, subject: str) -> None:
        against = "its parent" if step.role == "culprit" else "good"
        more = " (after more rounds)" if step.more_rounds else ""
        left = f"{step.commits_left} commit{'s' if step.commits_left != 1 else ''} left"
        self.display.end()
        self.display.say(
            f"step {step.number}  {step.candidate[:12]} {subject!r} vs {against}: "
            f"{decision_text(step.decision)}{more}; {left}"
        )


def _header(span: BisectRange, config: RunConfig, world_size: int) -> None:
    n = len(span.commits)
    _say(
        f"bisect {n} commit{'s' if n != 1 else ''}: good {span.good.sha[:12]} {span.good.subject!r} .. "
        f"bad {span.bad.sha[:12]} {span.bad.subject!r}"
    )
    _say(
        f"  A/B at world size {world_size}, FAIL where tokens/s is slower than good's beyond "
        f"-{config.gate.tolerances.throughput_drop_pct:g}%; at most {max_decisions(n)} A/B decisions"
    )


def _print_outcome(report: BisectReport, span: BisectRange) -> None:
    found = report.bisection
    if found.status == "NO_REGRESSION":
        _say(f"no regression beyond tolerance in the range: bad is {decision_text(found.steps[0].decision)}")
    elif found.status == "UNKNOWN":
        _print_unknown(found, span)
    elif report.culprit is not None and found.vs_good is not None and found.own is not None:
        culprit = report.culprit
        _say(f"culprit: {culprit.sha}")
        _say(f"  subject: {culprit.subject}")
        _say(f"  author:  {culprit.author}")
        _say(f"  vs good {span.good.sha[:12]}: {decision_text(found.vs_good)}")
        _say(f"  its own change, vs its parent {str(found.parent)[:12]}: {decision_text(found.own)}")
        if found.own.status == "PASS":
            _say(
                "  its own change is within tolerance: the slowdown built up over several commits, and "
                "this is where the total first went beyond tolerance (see the steps above)"
            )
        elif found.own.status != "FAIL":
            _say("  its own change could not be decided; its change vs good could")
        attribution = (report.record.get("culprit") or {}).get("attribution")
        if attribution:  # the operators behind the culprit's own slowdown, as a gate run's FAIL says
            for line in block_lines(
                str(attribution.get("world_size", "")), attribution, found.own.change_pct
            ):
                _say(f"  {line}")
    _say(f"results: {report.path}")
    tracking = report.record.get("tracking") or {}
    if tracking.get("run_id"):
        _say(f"MLflow run {tracking['run_id']}: {tracking.get('url') or tracking['uri']}")
        if not tracking.get("url"):  # a store on this disk: how to serve it from here, as `run` says
            _say(f"browse: {mlflow_ui_command(tracking['uri'], tracking['experiment_id'], Path.cwd())}")
    if report.tracking_warning:
        errors.print(f"warning: {report.tracking_warning}", markup=False, highlight=False, soft_wrap=True)


def _print_unknown(found: Bisection, span: BisectRange) -> None:
    step = found.steps[-1]
    before = span.good.sha if found.first == 0 else span.commits[found.first - 1].sha
    last = span.commits[found.last].sha
    left = found.last - found.first + 1
    _say(f"UNKNOWN: step {step.number} stayed undecided after more rounds ({step.decision.reason})")
    _say(
        f"  the first slower commit, if there is one, is one of the {left} commit{'s' if left != 1 else ''} "
        f"{before[:12]}..{last[:12]}"
    )
    _say(
        "  next: a larger [gate.ab] budget (max_rounds, max_seconds) or a larger "
        "[gate.tolerances] throughput_drop_pct in --config, or a quieter machine"
    )


def bisect(
    good: Annotated[
        str,
        typer.Option(
            metavar="REF", help="The older commit, whose speed is the one to keep (SHA, branch, tag)."
        ),
    ],
    bad: Annotated[
        str, typer.Option(metavar="REF", help="A newer, slower commit; --good must be one of its ancestors.")
    ],
    workload: WorkloadFactoryOption = None,
    workload_arg: WorkloadArgOption = None,
    config: Annotated[
        Path | None,
        option(
            metavar="FILE",
            text="TOML config file: [gate.ab] (rounds, budget), [gate.tolerances] throughput_drop_pct, "
            "[bench] device; flags override it.",
            default="none",
        ),
    ] = None,
    world_size: Annotated[int, typer.Option(min=1, metavar="N", help="World size of every A/B.")] = 1,
    out: Annotated[
        Path,
        typer.Option(
            metavar="DIR",
            help="Directory for bisect.json, each step's A/B and, while it runs, the worktrees; a "
            "non-empty directory benchgate did not write is refused.",
        ),
    ] = DEFAULT_OUT,
    tracking_uri: TrackingUriOption = None,
    tracking: Annotated[
        bool | None,
        config_option(
            "--tracking/--no-tracking", text="Log the bisection to MLflow (one run).", key="tracking.enabled"
        ),
    ] = None,
    on_cluster: Annotated[
        bool,
        option(
            "--submit",
            text="Run the whole bisection on a KFP cluster (KFP_HOST, KFP_TOKEN, as `benchgate submit`) as "
            "one pipeline run on one GPU node, instead of here; --good and --bad are checked and resolved "
            "here when run inside the repository.",
            default="off",
        ),
    ] = False,
    repository: Annotated[
        str | None,
        option(
            metavar="URL",
            text="With --submit: the git URL the cluster clones (in full) to bisect.",
            default="$BENCHGATE_REPOSITORY, else origin",
        ),
    ] = None,
    wait: Annotated[
        bool,
        option(
            "--wait",
            text="With --submit: follow the run, then read the bisection from MLflow and exit as a local "
            "bisect does; without it, exit 0 once the run is submitted.",
            default="off",
        ),
    ] = False,
    experiment: SubmitExperimentOption = "benchgate",
    timeout_s: Annotated[  # a bisect is several A/B decisions of minutes each: longer than a gate
        float, typer.Option(metavar="SECONDS", help="With --wait: the longest wait for the run.")
    ] = 6 * 3600.0,
    poll_s: Annotated[
        float, typer.Option(metavar="SECONDS", help="With --wait: time between status checks.")
    ] = 15.0,
) -> None:
    """Find the first commit between --good and --bad whose tokens/s is slower than --good's beyond
    tolerance, by interleaved A/B between commits checked out as worktrees; never a stored baseline."""
    try:
        if not on_cluster and (repository is not None or wait):
            flag = "--repository" if repository is not None else "--wait"
            raise ConfigError(f"{flag}: only with --submit (a bisect without it runs here, on this machine)")
        overrides = {
            "bench.workload": workload,
            "bench.workload_args": parse_pairs(workload_arg, "--workload-arg") if workload_arg else None,
            "tracking.uri": tracking_uri,
            "tracking.enabled": tracking,
        }
        cfg = load_config(config, overrides)
        if on_cluster:
            cluster = _Cluster(repository, experiment, wait, timeout_s, poll_s)
            _submit(cfg, config, good, bad, world_size, cluster)
        span = resolve_bisect_range(Path.cwd(), good, bad)
        _header(span, cfg, world_size)
        from benchgate.kfp.bisect.task import KFP_RUN_ID_VARIABLE  # set by the pod of a --submit

        kfp_run_id = os.environ.get(KFP_RUN_ID_VARIABLE, "")
        with step_display() as display:
            report = run_bisect(cfg, span, out, world_size, _Printer(span, display), kfp_run_id)
    except BenchgateError as exc:
        if not on_cluster:
            _point_at_results(out)
        fail(exc)
    except KeyboardInterrupt:
        errors.print("interrupted")
        if not on_cluster:
            _point_at_results(out)
        raise typer.Exit(EXIT_RUN_FAILED) from None
    _print_outcome(report, span)
    raise typer.Exit(report.bisection.exit_code)


def _point_at_results(out: Path) -> None:
    """Where the steps decided before an error or Ctrl-C are (bisect.json is rewritten after each)."""
    path = out / BISECT_FILE
    try:
        ended = read_json(path).get("status") in ("FAILED", "INTERRUPTED")
    except (ValueError, AttributeError):  # none there, or not one a bisect wrote
        return
    if ended:
        errors.print(f"the steps decided so far: {path.resolve()}", markup=False, highlight=False)


@dataclass(frozen=True)
class _Cluster:
    """Where and how `--submit` runs the bisection."""

    repository: str | None
    experiment: str
    wait: bool
    timeout_s: float
    poll_s: float


def _submit(
    cfg: RunConfig, config: Path | None, good: str, bad: str, world_size: int, cluster: _Cluster
) -> NoReturn:
    """Submit the bisection as one pipeline run (or attach to the same one submitted before); with
    --wait, exit with its result as a local bisect would."""
    from benchgate.cli.cluster import default_repository
    from benchgate.kfp.api import connection_from_env
    from benchgate.kfp.bisect.pipeline import bisect_arguments, submit_bisect
    from benchgate.measure.source import local_repository
    from benchgate.tracking.client import is_local_store

    if not cfg.tracking.enabled:
        raise ConfigError(
            "tracking.enabled: got false (a bisect on the cluster logs its result to MLflow, where "
            "--wait reads it)"
        )
    url = cluster.repository if cluster.repository is not None else default_repository()
    if not url:
        raise ConfigError(
            "--repository: required with --submit (the git URL the cluster clones); none given, and "
            "neither $BENCHGATE_REPOSITORY nor an origin remote here"
        )
    if cluster.wait and is_local_store(cfg):
        raise ConfigError(
            "--tracking-uri: none given, nor MLFLOW_TRACKING_URI (--wait reads the bisection from the "
            "MLflow server the cluster logs it to)"
        )
    if local_repository(Path.cwd()):  # the range checked here, its refs resolved to the SHAs sent
        span = resolve_bisect_range(Path.cwd(), good, bad)
        good, bad = span.good.sha, span.bad.sha
    arguments = bisect_arguments(
        good,
        bad,
        url,
        cfg.bench.workload,
        dict(cfg.bench.workload_args),
        world_size,
        config.read_text(encoding="utf-8") if config is not None else "",
        cfg.tracking.uri or "",
    )
    conn = connection_from_env(os.environ)
    outcome = submit_bisect(
        arguments, conn, cluster.experiment, cluster.wait, cluster.timeout_s, cluster.poll_s, say=_say
    )
    where = (
        f"MLflow (experiment {cfg.tracking.experiment!r}), a run of kind bisect tagged "
        f"benchgate.kfp_run_id={outcome.run_id}"
    )
    if not cluster.wait:
        _say(f"the bisection runs in one task, 'bisect': bisect.json will be in its output and in {where}")
        _say("the same command with --wait follows the run and prints the bisection")
        raise typer.Exit(EXIT_PASS)
    if outcome.exit_code != EXIT_PASS:
        errors.print(f"run {outcome.run_name}: {outcome.state}: {outcome.message}", markup=False)
        raise typer.Exit(outcome.exit_code)
    raise typer.Exit(_print_logged(cfg, outcome.run_id, where))


def _print_logged(cfg: RunConfig, kfp_run_id: str, where: str) -> int:
    """The bisection a succeeded run logged, read from MLflow and printed; its exit code."""
    from benchgate.cli.mlflow_access import connect, talking_to
    from benchgate.tracking.bisection import logged_bisection
    from benchgate.tracking.client import run_url

    tracker = connect(cfg)
    with talking_to(tracker):
        found = logged_bisection(tracker, kfp_run_id)
    if found is None:
        raise RunFailedError(
            f"the run succeeded, but {where} is not at {tracker.uri}: the task's log says why it was not "
            "logged; bisect.json is in the task's output artifact"
        )
    run_id, record = found
    culprit = record.get("culprit")
    if record["status"] == "NO_REGRESSION":
        decision = ABDecision(**record["steps"][0]["decision"])
        _say(f"no regression beyond tolerance in the range: bad is {decision_text(decision)}")
    elif culprit is not None:
        _say(f"culprit: {culprit['sha']}")
        _say(f"  subject: {culprit['subject']}")
        _say(f"  author:  {culprit['author']}")
        _say(f"  vs good {record['good']['sha'][:12]}: {decision_text(ABDecision(**culprit['vs_good']))}")
        own = decision_text(ABDecision(**culprit["own"]))
        _say(f"  its own change, vs its parent {str(culprit['parent'])[:12]}: {own}")
    else:
        left = record.get("remaining") or {}  # the steps and the range left are in bisect.json
        _say(f"UNKNOWN: a step stayed undecided after more rounds; {left.get('commits')} commits left")
    _say(f"MLflow run {run_id}: {run_url(tracker, run_id) or tracker.uri}")
    return int(record["exit_code"])
