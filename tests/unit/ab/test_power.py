"""The A/B planner (ab/power.py): its resolution is decide()'s own margin, its budget the runner's, and a
true change at its figures is decided with the power it claims."""

from __future__ import annotations

import contextlib
import io
import math
import statistics

import numpy as np
import pytest
from rich.console import Console
from rich.progress import Progress

from benchgate.ab.decision import ABDecision, decide, look_rounds
from benchgate.ab.power import OPENING_MARK, OpeningFigure, is_opening_line, plan
from benchgate.cli.run_output import RichReporter
from benchgate.kit.progress import MarkerRelay, MarkerReporter

# The gate's defaults: 5% tolerance, 95% confidence, looks after rounds 4, 6, 9, 14, 21, 27, 600 s.
DEFAULTS = {"tolerance_pct": 5.0, "confidence": 0.95, "min_rounds": 4, "max_rounds": 27, "max_seconds": 600.0}


def test_resolution_is_decides_mde_minus_the_tolerance_at_every_look() -> None:
    rng = np.random.default_rng(7)
    for n in look_rounds(4, 27):
        changes = list(rng.normal(-0.01, 0.03, n))
        decision = decide(changes, 5.0, 0.95, 4, 27)
        assert decision.mde_pct is not None and decision.round_sd_pct is not None
        figure = plan(statistics.stdev(changes), 10.0, **DEFAULTS)
        look = next(look for look in figure.looks if look.rounds == n)
        assert look.resolution_pct == pytest.approx(decision.mde_pct - 5.0, rel=1e-12, abs=1e-12)
        assert look.fail_at_pct == pytest.approx(decision.mde_pct, rel=1e-12)


def test_the_looks_and_their_level_are_decides() -> None:
    figure = plan(0.02, 10.0, **DEFAULTS)
    assert [look.rounds for look in figure.looks] == look_rounds(4, 27) == [4, 6, 9, 14, 21, 27]
    # More rounds, finer resolution; the PASS side mirrors the FAIL side around the tolerance in log units.
    deltas = [look.resolution_log for look in figure.looks]
    assert deltas == sorted(deltas, reverse=True)
    limit = math.log1p(-0.05)
    for look in figure.looks:
        assert math.log1p(-look.fail_at_pct / 100) == pytest.approx(limit - look.resolution_log)
        assert math.log1p(-look.pass_below_pct / 100) == pytest.approx(limit + look.resolution_log)
        assert look.resolves == (look.pass_below_pct >= 0)


def test_budget_counts_rounds_as_the_runner_starts_them() -> None:
    # 600 s of 45 s rounds: 13 rounds end within it (585 s), a 14th would end at 630 s.
    figure = plan(0.02, 45.0, **DEFAULTS)
    assert figure.rounds_in_budget == 13
    assert figure.seconds_in_budget == pytest.approx(585.0)
    assert [look.rounds for look in figure.looks if look.in_budget] == [4, 6, 9]
    assert figure.last_look is not None and figure.last_look.rounds == 9
    # Short rounds: max_rounds binds, not the time.
    assert plan(0.02, 1.0, **DEFAULTS).rounds_in_budget == 27


def test_quiet_machine_reaches_the_tolerance_and_says_how_soon() -> None:
    figure = plan(0.02, 10.0, **DEFAULTS)
    first = figure.first_resolving
    assert figure.reachable and first is not None
    # The first look where an unchanged commit PASSes with 80% power: δ <= T in log units.
    assert first.resolution_log <= -math.log1p(-0.05)
    earlier = [look for look in figure.looks if look.rounds < first.rounds]
    assert all(look.resolution_log > -math.log1p(-0.05) for look in earlier)
    text = figure.sentence()
    assert text.startswith(f"this machine resolves changes of {first.resolution_pct:.1f}% in about ")
    assert f"a {first.fail_at_pct:.1f}% slowdown FAILs and an unchanged commit PASSes (80% power)" in text
    assert figure.to_dict()["first_resolving"]["rounds"] == first.rounds


def test_noisy_machine_is_too_noisy_and_names_what_it_can_see() -> None:
    figure = plan(0.15, 30.0, **DEFAULTS)  # 15% round sd, 20 rounds in 600 s
    assert not figure.reachable and figure.first_resolving is None
    last = figure.last_look
    assert last is not None and last.rounds == 14
    assert figure.sentence() == (
        f"too noisy for 5%: the smallest change it can see here in {last.seconds / 60:.1f} min is "
        f"{last.resolution_pct:.1f}% (a slowdown FAILs from {last.fail_at_pct:.1f}%, and an unchanged "
        "commit mostly ends UNKNOWN)"
    )
    # A look past the budget may resolve; it does not count.
    assert not plan(0.06, 100.0, **DEFAULTS).reachable
    assert plan(0.06, 1.0, **DEFAULTS).reachable


def test_a_budget_shorter_than_the_first_look_is_said() -> None:
    figure = plan(0.01, 200.0, **DEFAULTS)  # 3 rounds fit, the first look needs 4
    assert figure.last_look is None and not figure.reachable
    assert figure.sentence().startswith("too slow for the budget: the first look needs 4 rounds")


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("sd_log", {"sd_log": -0.1}),
        ("seconds_per_round", {"seconds_per_round": 0.0}),
        ("tolerance_pct", {"tolerance_pct": 0.0}),
        ("max_rounds", {"min_rounds": 6, "max_rounds": 4}),
    ],
)
def test_bad_inputs_name_the_field_and_value(field: str, kwargs: dict[str, float]) -> None:
    arguments = {"sd_log": 0.02, "seconds_per_round": 10.0, **DEFAULTS, **kwargs}
    with pytest.raises(ValueError, match=f"^{field}: got "):
        plan(**arguments)  # type: ignore[arg-type]


def _decisions(true_log: float, sd: float, n: int, sequences: int, seed: int) -> list[str]:
    """The sequential rule's outcome by look n, for Gaussian rounds of mean true_log and spread sd."""
    rng = np.random.default_rng(seed)
    outcomes = []
    for draws in rng.normal(true_log, sd, (sequences, n)):
        status = "CONTINUE"
        for look in (k for k in look_rounds(4, 27) if k <= n):
            status = decide(list(draws[:look]), 5.0, 0.95, 4, 27).status
            if status != "CONTINUE":
                break
        outcomes.append(status)
    return outcomes


@pytest.mark.parametrize("n", [9, 14])
def test_a_change_at_the_planners_figures_is_decided_with_80_percent_power(n: int) -> None:
    sd = 0.03
    look = next(look for look in plan(sd, 10.0, **DEFAULTS).looks if look.rounds == n)
    # A true slowdown of T + δ: FAIL by this look about 80% of the time (a little more, since the
    # earlier looks may FAIL it too; the planner's t margins stand in for the random sample sd).
    slower = _decisions(math.log1p(-look.fail_at_pct / 100), sd, n, 1200, seed=n)
    assert 0.76 <= slower.count("FAIL") / len(slower) <= 0.88
    # A true slowdown of T - δ (the PASS side): PASS by this look about as often.
    within = _decisions(math.log1p(-look.pass_below_pct / 100), sd, n, 1200, seed=100 + n)
    assert 0.76 <= within.count("PASS") / len(within) <= 0.88


def _decision(rounds: int, sd_pct: float | None) -> ABDecision:
    return ABDecision("CONTINUE", rounds, None, None, None, None, None, sd_pct, "")


def test_opening_figure_is_said_once_at_the_first_look() -> None:
    now = [100.0]
    opening = OpeningFigure(1, 5.0, 0.95, 4, 27, 600.0, clock=lambda: now[0])
    for rounds in (1, 2, 3):
        now[0] += 10.0
        assert opening.line(_decision(rounds, None)) is None
    now[0] += 10.0
    line = opening.line(_decision(4, 2.0))
    assert line is not None and is_opening_line(line)
    expected = plan(0.02, 10.0, **DEFAULTS).sentence()
    assert line == (
        "A/B opening figure ws=1: after 4 rounds (40 s, round sd 2.0%, 9.3 min of gate.ab.max_seconds "
        f"left), {expected}"
    )
    assert opening.line(_decision(6, 2.0)) is None


def test_the_opening_figure_reaches_the_terminal_once_and_keeps_one_bar() -> None:
    # As ab_task emits it (kfp/ab_task.py): the rounds' stage, the figure, the stage again; relayed as
    # `benchgate run` relays a task's stdout (kfp/local_run.py) to its terminal reporter.
    emitted = io.StringIO()
    name, line = "A/B ws=1 (rounds)", f"{OPENING_MARK} ws=1: after 4 rounds, this machine resolves ..."
    with contextlib.redirect_stdout(emitted):
        task = MarkerReporter()
        task.stage_started(name, 27)
        for i in (1, 2, 3, 4):
            if i == 4:
                print(line)
                task.stage_started(line)
                task.stage_started(name, 27)
            task.advance(i, 27)
        task.advance(5, 27)
    screen = io.StringIO()
    progress = Progress(console=Console(file=screen, width=300))
    reporter = RichReporter(progress)
    with progress:
        relay = MarkerRelay(reporter)
        for text in emitted.getvalue().splitlines():
            relay.feed(text)
        assert len(progress.tasks) == 1
        assert progress.tasks[0].completed == 5 and progress.tasks[0].total == 27
    assert screen.getvalue().count(line) == 1
