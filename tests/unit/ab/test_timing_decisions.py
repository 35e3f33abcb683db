"""The timing decisions as they now are: tokens/s over total time, calibrated looks, mean-step screen,
scaling with a noise model, unchanged code, fingerprints both A/B sides share, and resumable A/B files.

Each test is built so that the previous behaviour fails it: the median pair (round figure and screen),
Bonferroni looks, a decision between looks, an A/B decision that stands over a fingerprint change.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bundles import bundle
from harness import make_config

from benchgate.ab import decision as ab
from benchgate.ab import runner as ab_runner
from benchgate.ab.decision import (
    TAIL_SHARE,
    concentration,
    decide,
    look_rounds,
    round_change,
    round_diagnostics,
)
from benchgate.ab.round_figures import round_throttling
from benchgate.ab.round_plan import MAX_ROUND_STEPS, round_steps
from benchgate.ab.rows import apply_ab, apply_ab_scaling, undecided_world_sizes
from benchgate.ab.runner import AB_FILE, ABOutcome, Side, run_ab, saved_rounds
from benchgate.ab.stage import worlds_for_ab
from benchgate.checks import scaling
from benchgate.checks.compare import compare, unchanged_code
from benchgate.checks.screen import screen
from benchgate.config import ABConfig, Tolerances
from benchgate.errors import BadInputError, BaselineError, ConfigError
from benchgate.kit.files import read_json, write_json
from benchgate.measure import fingerprint
from benchgate.measure.device_state import device_state_block, summarize_window
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import SCALING, TIMING, Check, Comparison, Status
from benchgate.results.figures import STALL_CAP, corrected_mean, mean_step_time

TOL, CONF = 5.0, 0.95
LIMIT = math.log1p(-TOL / 100)  # the round figure at exactly -tolerance
BASE_COMMIT, CANDIDATE_COMMIT = "0123abcd" * 5, "fedc9876" * 5


def every_fifth_slower(steps: list[float], factor: float) -> list[float]:
    """A minority slowdown: every 5th step (a sync, a periodic eval) `factor` times slower."""
    return [t * factor if i % 5 == 0 else t for i, t in enumerate(steps)]


def jittered(step_s: float, n: int, seed: int, sd: float = 0.01) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(t) for t in step_s * (1 + sd * rng.standard_normal(n))]


# ---------------------------------------------------------------- the round figure


def test_round_change_counts_a_minority_slowdown_in_full() -> None:
    base = [0.02] * 100
    cand = every_fifth_slower(base, 1.5)  # 20 steps of 30 ms: 2.2 s instead of 2.0 s
    assert round_change(base, cand) == pytest.approx(math.log(1 / 1.1), rel=1e-9)
    assert 100 * math.expm1(round_change(base, cand)) == pytest.approx(-9.09, abs=0.01)
    # The typical step did not change: the median pair, kept as a diagnostic, says so.
    diagnostics = round_diagnostics(base, cand)
    assert diagnostics["median_change_log"] == pytest.approx(0.0, abs=1e-12)
    assert diagnostics["total_excess_s"] == pytest.approx(0.2)


def test_round_change_caps_a_stall_at_ten_times_the_median_step() -> None:
    steady = [0.02] * 100
    stalled = [*steady[:-1], 0.02 * 50]  # one 1-second stall
    bound = math.log((99 + STALL_CAP) / 100)  # the stall counted as STALL_CAP steps, no more
    assert round_change(steady, stalled) == pytest.approx(-bound, rel=1e-9)
    assert round_change(stalled, steady) == pytest.approx(bound, rel=1e-9)
    assert abs(round_change(steady, stalled)) < abs(math.log(100 / 149)) / 4  # uncapped it would be -40%
    # Up to the cap, a slow step counts in full: 8x is 8x.
    eight = [*steady[:-1], 0.02 * 8]
    assert round_change(steady, eight) == pytest.approx(math.log(100 / 107), rel=1e-9)


def round_of(base: list[float], cand: list[float]) -> dict[str, Any]:
    return {"change_log": round_change(base, cand), **round_diagnostics(base, cand)}


def test_concentration_tells_a_uniform_slowdown_from_one_in_few_steps() -> None:
    uniform = [round_of(jittered(0.02, 100, s), jittered(0.022, 100, s + 50)) for s in range(4)]
    share, expected = concentration(uniform) or (math.nan, math.nan)
    assert expected == pytest.approx(TAIL_SHARE, abs=0.02)  # 10% of nearly equal steps: ~10% of time
    assert share == pytest.approx(expected, abs=0.05)

    minority = []
    for s in range(4):
        base = jittered(0.02, 100, s)
        minority.append(round_of(base, every_fifth_slower(jittered(0.02, 100, s + 50), 1.5)))
    share, expected = concentration(minority) or (math.nan, math.nan)
    assert share > 0.4 and share > 2 * expected + 0.1  # what compare calls "concentrated in few steps"


def test_concentration_is_none_when_the_candidate_is_not_slower() -> None:
    base = jittered(0.02, 100, 1)
    assert concentration([round_of(base, base)]) is None
    assert concentration([round_of(base, [t * 0.9 for t in base])]) is None
    assert concentration([]) is None


# ---------------------------------------------------------------- looks and their level


# The looks' bounds and their error rates: tests/unit/ab/test_ab_error_control.py.


def test_decide_takes_no_decision_between_looks() -> None:
    clear = [math.log1p(-0.2)] * 3 + [math.log1p(-0.21), math.log1p(-0.19)]  # 20% slower, 5 rounds
    assert decide(clear, TOL, CONF, 4, 27).status == "CONTINUE"
    # Unless the time budget ends there: then these rounds take the last look (test_ab_error_control.py).
    out = decide(clear, TOL, CONF, 4, 27, out_of_time=True)
    assert out.status == "FAIL" and "time budget's last look" in out.reason
    assert out.change_pct == pytest.approx(100 * math.expm1(statistics.fmean(clear)))
    assert out.ci_high_pct is not None and out.ci_high_pct < -TOL
    # At the next look the same rounds and one more FAIL.
    assert decide([*clear, math.log1p(-0.2)], TOL, CONF, 4, 27).status == "FAIL"
    # Every round that is not a look, up to the budget, continues; every look decides.
    for n in range(4, 28):
        status = decide((clear * 6)[:n], TOL, CONF, 4, 27).status
        assert status == ("FAIL" if n in look_rounds(4, 27) else "CONTINUE"), n
    # More rounds than the budget (resumed with a smaller max_rounds): UNKNOWN, never a look, even
    # where the time budget ends there too.
    assert decide(clear * 6, TOL, CONF, 4, 27).status == "UNKNOWN"
    assert decide(clear * 6, TOL, CONF, 4, 27, out_of_time=True).status == "UNKNOWN"


# ---------------------------------------------------------------- the screen


def run_samples(steps: list[float], reference_s: float | None = None) -> dict[str, Any]:
    """metrics-ws<N>.json "samples" as bench.py writes them (512 tokens per step)."""
    out: dict[str, Any] = {"step_time_s": steps, "tokens_per_s": [512 / t for t in steps]}
    if reference_s is not None:
        out["reference_s"] = [reference_s] * len(steps)
    return out


def past_runs(step_s: float = 0.02, per_reference: float | None = None) -> list[dict[str, float]]:
    """Three quiet earlier baseline runs, 0.5% apart, as baseline._run_p50s records them."""
    rows = []
    for f in (0.995, 1.0, 1.005):
        row = {"step_time_s": step_s * f, "mean_step_time_s": step_s * f, "tokens_per_s": 512 / (step_s * f)}
        if per_reference is not None:
            row["mean_step_time_per_reference"] = per_reference * f
        rows.append(row)
    return rows


def test_mean_step_time_caps_stalls_and_corrected_mean_needs_a_reference_per_step() -> None:
    assert mean_step_time([0.1] * 9 + [100.0]) == pytest.approx((0.9 + 0.1 * STALL_CAP) / 10)
    assert mean_step_time([0.1, 0.2, 0.6]) == pytest.approx(0.3)  # the mean, not the median 0.2
    assert corrected_mean(run_samples([0.1, 0.2, 0.6], reference_s=0.01)) == pytest.approx(30.0)
    assert corrected_mean(run_samples([0.1, 0.2, 0.6])) is None
    assert corrected_mean({"step_time_s": [0.1, 0.2], "reference_s": [0.01]}) is None


def test_screen_sees_a_minority_slowdown_that_the_median_hides() -> None:
    base = jittered(0.02, 100, 1, sd=0.002)
    current = every_fifth_slower(jittered(0.02, 100, 2, sd=0.002), 1.5)
    assert statistics.median(current) == pytest.approx(statistics.median(base), rel=0.01)
    result = screen(run_samples(base), run_samples(current), past_runs(), TOL, CONF)
    assert result.figure == "mean"
    assert result.change_pct == pytest.approx(-9.1, abs=0.5)
    assert result.status == "FAIL"


def test_screen_pass_needs_the_raw_and_the_drift_corrected_figure() -> None:
    steps = jittered(0.02, 100, 1, sd=0.002)
    same = jittered(0.02, 100, 2, sd=0.002)
    quiet = past_runs(per_reference=2.0)
    # Both PASS: PASS, on the drift-corrected figure.
    both = screen(run_samples(steps, 0.01), run_samples(same, 0.01), quiet, TOL, CONF)
    assert (both.status, both.figure) == ("PASS", "drift-corrected mean")
    # The raw history is noisy (20%): the raw figure is UNKNOWN, so the corrected PASS does not stand.
    noisy_raw = [
        {"mean_step_time_s": 0.02 * f, "mean_step_time_per_reference": 2.0 * g}
        for f, g in ((0.8, 0.995), (1.0, 1.0), (1.2, 1.005))
    ]
    result = screen(run_samples(steps, 0.01), run_samples(same, 0.01), noisy_raw, TOL, CONF)
    assert (result.status, result.figure) == ("UNKNOWN", "drift-corrected mean")
    assert "raw one does not (UNKNOWN" in result.reason and "a PASS needs both" in result.reason
    # The reference ran 20% faster in the current run, the steps did not: the host sped up and hid a 20%
    # slowdown of the code. Raw PASS, drift-corrected FAIL: the FAIL stands.
    faster_host = screen(run_samples(steps, 0.01), run_samples(same, 0.008), quiet, TOL, CONF)
    assert faster_host.status == "FAIL" and faster_host.change_pct == pytest.approx(-20.0, abs=0.5)
    assert faster_host.host_change_pct == pytest.approx(-20.0)


# ---------------------------------------------------------------- scaling efficiency


def test_scaling_from_ab_warns_on_a_clear_efficiency_drop_only() -> None:
    rng = np.random.default_rng(3)
    at_1 = list(0.005 * rng.standard_normal(8))
    same_n = list(0.005 * rng.standard_normal(8))
    drop_n = list(math.log(0.85) + 0.005 * rng.standard_normal(8))  # 15% less tokens/s at N only
    dropped = scaling.from_ab(0.9, at_1, drop_n, 5.0, CONF)
    assert dropped is not None and dropped.status == "WARN"
    expected = 100 * 0.9 * math.expm1(statistics.fmean(drop_n) - statistics.fmean(at_1))
    assert dropped.change_pts == pytest.approx(expected) and dropped.change_pts == pytest.approx(-13.5, abs=1)
    assert dropped.ci_low_pts is not None and dropped.ci_high_pts is not None
    assert dropped.ci_low_pts < dropped.change_pts < dropped.ci_high_pts < -5.0
    unchanged = scaling.from_ab(0.9, at_1, same_n, 5.0, CONF)
    assert unchanged is not None and unchanged.status == "PASS"
    # A drop of ~8 pts under 10% round noise is not known with confidence: no WARN, and no PASS either:
    # its interval straddles -5 pts, so the row is INFO.
    noisy = scaling.from_ab(0.9, at_1, list(math.log(0.91) + 0.1 * rng.standard_normal(4)), 5.0, CONF)
    assert noisy is not None and noisy.status == "INFO"
    assert noisy.ci_low_pts is not None and noisy.ci_high_pts is not None
    assert noisy.ci_low_pts < -5.0 < noisy.ci_high_pts
    assert scaling.from_ab(0.9, at_1[:1], drop_n, 5.0, CONF) is None


def test_scaling_from_history_warns_passes_and_is_info_without_enough_runs() -> None:
    quiet = [0.899, 0.9, 0.901]
    drop = scaling.from_history(0.9, 0.8, quiet, 5.0, CONF)
    assert drop.status == "WARN" and drop.change_pts == pytest.approx(-10.0)
    assert drop.ci_high_pts is not None and drop.ci_high_pts < -5.0
    assert scaling.from_history(0.9, 0.9, quiet, 5.0, CONF).status == "PASS"
    # Noise this large cannot tell a 10-point drop: the interval straddles -5 pts, so INFO, not PASS.
    assert scaling.from_history(0.9, 0.8, [0.7, 0.9, 1.1], 5.0, CONF).status == "INFO"
    info = scaling.from_history(0.9, 0.5, quiet[:2], 5.0, CONF)
    assert (info.status, info.ci_low_pts, info.ci_high_pts) == ("INFO", None, None)
    assert info.change_pts == pytest.approx(-40.0) and "2 of 3" in info.how


def test_compare_scaling_row_is_judged_by_the_history_of_efficiencies() -> None:
    row = next(
        c for c in compare(bundle(1), bundle(2, step_s_ws2=0.13), Tolerances()).checks if c.metric == SCALING
    )
    assert (row.status, row.change_unit) == ("WARN", "pts")
    base = bundle(1)
    base.history = base.history[:2]
    row = next(
        c for c in compare(base, bundle(2, step_s_ws2=0.13), Tolerances()).checks if c.metric == SCALING
    )
    assert row.status == "INFO" and "2 of 3" in row.note


# ---------------------------------------------------------------- unchanged code


def with_env(b: Bundle, commit: str | None, dirty: bool | None, prints: dict[str, str] | None) -> Bundle:
    env: dict[str, Any] = {
        "machine_profile": b.env["machine_profile"],
        "git": {"commit": commit, "dirty": dirty},
    }
    if prints is not None:
        env["fingerprints"] = prints
    return replace(b, env=env)


PRINTS = {"benchgate": "a" * 16, "packages": "b" * 16, "config": "c" * 16}


@pytest.mark.parametrize(
    ("base_env", "cur_env", "unchanged"),
    [
        pytest.param((BASE_COMMIT, False, PRINTS), (BASE_COMMIT, False, PRINTS), True, id="same-clean"),
        pytest.param((BASE_COMMIT, False, PRINTS), (BASE_COMMIT, True, PRINTS), False, id="dirty"),
        pytest.param((BASE_COMMIT, False, PRINTS), (BASE_COMMIT, None, PRINTS), False, id="dirty-unknown"),
        pytest.param(
            (BASE_COMMIT, False, PRINTS), (CANDIDATE_COMMIT, False, PRINTS), False, id="other-commit"
        ),
        pytest.param((None, False, PRINTS), (None, False, PRINTS), False, id="no-commit"),
        pytest.param(
            (BASE_COMMIT, False, PRINTS),
            (BASE_COMMIT, False, PRINTS | {"packages": "d" * 16}),
            False,
            id="packages-differ",
        ),
        pytest.param((BASE_COMMIT, False, None), (BASE_COMMIT, False, PRINTS), False, id="base-has-none"),
        pytest.param((BASE_COMMIT, False, PRINTS), (BASE_COMMIT, False, None), False, id="current-has-none"),
        pytest.param((BASE_COMMIT, False, PRINTS), (BASE_COMMIT, False, {}), False, id="current-empty"),
    ],
)
def test_unchanged_code_only_for_the_same_commit_clean_and_same_fingerprints(
    base_env: tuple[Any, ...], cur_env: tuple[Any, ...], unchanged: bool
) -> None:
    assert unchanged_code(with_env(bundle(1), *base_env), with_env(bundle(2), *cur_env)) is unchanged
    assert unchanged_code(None, with_env(bundle(2), *cur_env)) is False


def test_unchanged_code_passes_its_timing_rows_and_leaves_nothing_for_ab() -> None:
    base = with_env(bundle(1), BASE_COMMIT, False, PRINTS)
    slower = bundle(2, step_s=0.12)  # 17% slower: the screen FAILs it, yet it is the same code
    result = compare(base, with_env(slower, BASE_COMMIT, False, PRINTS), Tolerances())
    row = result.timing(1)
    assert row is not None and (row.status, row.decided_by) == ("PASS", "unchanged")
    assert "unchanged code (screen: FAIL)" in row.note
    assert undecided_world_sizes(result) == []
    # The same run from a dirty tree is judged by the screen.
    dirty = compare(base, with_env(slower, BASE_COMMIT, True, PRINTS), Tolerances()).timing(1)
    assert dirty is not None and (dirty.status, dirty.decided_by) == ("FAIL", "screen")


# ---------------------------------------------------------------- A/B end to end, with a stand-in bench


class InstantCoordinator:
    """The turn coordinator's interface without sockets: the stand-in bench needs no turns."""

    def __init__(self, ranks_per_side: int, timeout_s: float, seed: int = 0) -> None:
        self.seed = seed

    @property
    def address(self) -> str:
        return "127.0.0.1:0"

    def run(self, steps: int, alive: Callable[[], bool], warmup: int = 0) -> list[str]:
        return ["AB" if (self.seed + i) % 2 else "BA" for i in range(steps)]


def stand_in_bench(
    monkeypatch: pytest.MonkeyPatch, candidate: Callable[[list[float]], list[float]], step_s: float = 0.02
) -> list[int]:
    """ab_runner's bench replaced by one that writes metrics-ws<N>.json of `steps` jittered steps per side
    (the candidate's passed through `candidate`); returns the list the steps per round are recorded in."""
    steps_seen: list[int] = []

    def fake(config: Any, world_size: int, out_dir: Path, *args: Any, **kwargs: Any) -> Path:
        label = kwargs["turns"][1]
        round_index = int(out_dir.parent.name.removeprefix("round"))
        n = config.bench.steps
        steps_seen.append(n)
        times = jittered(step_s, n, seed=1000 * round_index + (label == "B"))
        if label == "B":
            times = candidate(times)
        tokens = 512 * world_size
        metrics = {
            "workload": "w",
            "world_size": world_size,
            "precision": "fp32",
            "tokens_per_step_global": tokens,
            "memory": {"peak_bytes": 400 * 2**20},
            "samples": {"step_time_s": times, "tokens_per_s": [tokens / t for t in times], "loss": [3.0] * n},
        }
        return write_json(out_dir / f"metrics-ws{world_size}.json", metrics)

    monkeypatch.setattr(ab_runner, "stage_bench", fake)
    monkeypatch.setattr(ab_runner, "TurnCoordinator", InstantCoordinator)
    return steps_seen


BASE = Side("base 0123abcd", BASE_COMMIT)
CANDIDATE = Side("candidate fedc9876", CANDIDATE_COMMIT)


def ab_config(tmp_path: Path, **ab: Any) -> Any:
    return make_config(tmp_path, gate={"tolerances": {"throughput_drop_pct": TOL}, "ab": {"steps": 30, **ab}})


def test_round_steps_measure_at_least_min_measured_s(tmp_path: Path) -> None:
    config = make_config(tmp_path, gate={"ab": {"steps": 30, "min_measured_s": 2.0}})
    assert round_steps(config, None) == 30
    assert round_steps(config, 0.0) == 30
    assert round_steps(config, 1.0) == 30  # 30 steps of a second measure 30 s already
    assert round_steps(config, 0.02) == 100
    assert round_steps(config, 0.003) == 667  # ceil(2 / 0.003)
    assert round_steps(config, 1e-6) == MAX_ROUND_STEPS == 2000
    unbounded = make_config(tmp_path, gate={"ab": {"steps": 30, "min_measured_s": 0.0}})
    assert round_steps(unbounded, 0.001) == 30


def test_ab_sees_a_minority_slowdown_and_its_file_carries_the_new_round_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps_seen = stand_in_bench(monkeypatch, lambda t: every_fifth_slower(t, 1.5))
    outcome = run_ab(ab_config(tmp_path), 1, tmp_path, BASE, CANDIDATE, step_s=0.02)
    assert (outcome.decision.status, outcome.decision.rounds) == ("FAIL", 4)
    assert outcome.decision.change_pct == pytest.approx(-9.1, abs=0.5)
    assert set(steps_seen) == {100}  # 2 s at 20 ms a step
    saved = read_json(tmp_path / "ab" / "ws1" / AB_FILE)
    first = saved["rounds"][0]
    assert first["pairs"] == len(first["base_step_s"]) == len(first["candidate_step_s"]) == 100
    assert first["change_log"] == pytest.approx(round_change(first["base_step_s"], first["candidate_step_s"]))
    assert abs(first["median_change_log"]) < 0.01  # the typical step is as fast as before
    assert first["candidate_tokens_per_s"] == pytest.approx(
        512 * 100 / sum(first["candidate_step_s"])
    )  # whole-round tokens/s
    assert {"tail_excess_s", "total_excess_s", "tail_time_share"} <= set(first)


def test_saved_rounds_refuse_other_commits_and_decided_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_bench(monkeypatch, lambda t: t)
    path = tmp_path / "ab" / "ws1" / AB_FILE
    # A budget too small for a second round: UNKNOWN after one round, between looks: resumable.
    first = run_ab(ab_config(tmp_path, max_seconds=1e-6), 1, tmp_path, BASE, CANDIDATE, step_s=0.02)
    assert (first.decision.status, first.decision.rounds) == ("UNKNOWN", 1)
    assert saved_rounds(path, BASE, CANDIDATE) == first.rounds
    other_base = Side("base 1111", "1" * 40)
    with pytest.raises(BadInputError, match=f"base {BASE_COMMIT}, not of {'1' * 40}"):
        saved_rounds(path, other_base, CANDIDATE)
    with pytest.raises(BadInputError, match="candidate"):
        saved_rounds(path, BASE, Side("candidate 2222", "2" * 40))
    with pytest.raises(BadInputError, match="a working tree"):
        saved_rounds(path, BASE, Side("working tree"))
    # Resumed, the sequence goes on from round 2 and decides at the first look.
    resumed = run_ab(ab_config(tmp_path), 1, tmp_path, BASE, CANDIDATE, step_s=0.02, resume=True)
    assert (resumed.decision.status, resumed.decision.rounds) == ("PASS", 4)
    assert resumed.rounds[0] == first.rounds[0]
    with pytest.raises(BadInputError, match=r"decided already \(PASS\)"):
        saved_rounds(path, BASE, CANDIDATE)
    # A FAIL written by hand from the real types is refused alike.
    failed = ABOutcome(1, decide([math.log(0.8)] * 4, TOL, CONF, 4, 27), resumed.rounds[:4], 1.0)
    write_json(path, failed.to_dict(BASE, CANDIDATE))
    with pytest.raises(BadInputError, match=r"decided already \(FAIL\)"):
        saved_rounds(path, BASE, CANDIDATE)


def ab_outcome(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    candidate: Callable[[list[float]], list[float]],
    ws: int = 1,
) -> dict[str, Any]:
    stand_in_bench(monkeypatch, candidate)
    return run_ab(ab_config(tmp_path), ws, tmp_path, BASE, CANDIDATE, step_s=0.02).to_dict(BASE, CANDIDATE)


def test_apply_ab_row_carries_whole_round_rates_and_where_the_slowdown_sits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = ab_outcome(tmp_path, monkeypatch, lambda t: every_fifth_slower(t, 1.5))
    screened = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    row = apply_ab(screened, outcome, Tolerances(), ABConfig()).timing(1)
    assert row is not None and (row.status, row.decided_by) == ("FAIL", "ab")
    rounds = outcome["rounds"]
    assert row.baseline == pytest.approx(statistics.fmean(r["base_tokens_per_s"] for r in rounds))
    assert row.current == pytest.approx(statistics.fmean(r["candidate_tokens_per_s"] for r in rounds))
    assert row.current / row.baseline == pytest.approx(1 / 1.1, abs=0.01)  # type: ignore[operator]
    assert re.search(r"median step [+-]0\.\d% \(diagnostic\)", row.note), row.note
    assert "slowdown concentrated in few steps" in row.note


def test_rounds_where_the_idle_side_used_cpu_are_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = ab_outcome(tmp_path, monkeypatch, lambda t: t)
    screened = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    quiet = apply_ab(screened, outcome, Tolerances(), ABConfig()).timing(1)
    assert quiet is not None and "idle side used CPU" not in quiet.note
    rounds = outcome["rounds"]
    rounds[0] = {**rounds[0], "base_idle_cpu_share": 0.2}
    rounds[1] = {**rounds[1], "candidate_idle_cpu_share": 0.03}  # under the 5% flag
    assert ab.idle_cpu_rounds(rounds) == (1, pytest.approx(0.2))
    busy = apply_ab(screened, {**outcome, "rounds": rounds}, Tolerances(), ABConfig()).timing(1)
    assert busy is not None
    assert f"the idle side used CPU in 1 of {len(rounds)} rounds (up to 20%" in busy.note


def test_rounds_on_a_throttled_gpu_are_flagged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcome = ab_outcome(tmp_path, monkeypatch, lambda t: t)
    screened = compare(bundle(1), bundle(2, step_s=0.12), Tolerances())
    rounds = outcome["rounds"]
    # A round's throttling as the runner records it from each side's metrics' device_state (NVML).
    power_capped = device_state_block([summarize_window(1.0, [], None, 0.2, 0.0)], tokens=100)
    cool = device_state_block([summarize_window(1.0, [], None, 0.0, 0.0)], tokens=100)
    rounds[1] = {**rounds[1], **round_throttling({"device_state": cool}, {"device_state": power_capped})}
    assert rounds[1]["candidate_throttled_by"] == ["power cap"] and rounds[1]["base_throttled_by"] == []
    row = apply_ab(screened, {**outcome, "rounds": rounds}, Tolerances(), ABConfig()).timing(1)
    assert row is not None
    assert f"GPU throttled (power cap) in 1 of {len(rounds)} rounds" in row.note
    assert round_throttling({"samples": {}}, {"samples": {}}) == {}  # a CPU round: nothing to say


def test_a_turn_client_counts_the_cpu_it_used_while_waiting() -> None:
    import socket
    import threading

    from benchgate.measure.turns import TurnClient

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def coordinator() -> None:
        conn, _ = server.accept()
        conn.makefile("rb").readline()  # HELLO
        # Busy for 0.3 s of this thread's own CPU before answering (CPU, not wall time: on a loaded host
        # 0.3 s of wall time may hold far less CPU): the client's wait blocks in a read and uses none.
        deadline = time.thread_time() + 0.3
        while time.thread_time() < deadline:
            pass
        conn.sendall(b"GO\n")
        conn.close()

    thread = threading.Thread(target=coordinator)
    thread.start()
    client = TurnClient(f"127.0.0.1:{port}", "A", 0, timeout_s=10)
    started = time.process_time()
    client.wait()
    # The coordinator thread spun in this same process, so process CPU during the wait is ~0.3 s: what
    # the idle side of a real round would report if a thread of its own competed with the timed side.
    assert client.idle_cpu_s == pytest.approx(time.process_time() - started, abs=0.05)
    assert client.idle_cpu_s > 0.15
    client.close()
    thread.join()
    server.close()


@pytest.mark.parametrize(
    ("screened_step_s", "ab_slowdown", "unseen", "status"),
    [
        pytest.param(0.12, 1.0, ["packages"], "PASS", id="ab-pass-over-a-screen-fail-stands"),
        pytest.param(0.105, 1.0, ["benchgate", "config"], "PASS", id="ab-pass-over-a-screen-unknown-stands"),
        pytest.param(0.1, 1.0, ["packages"], "PASS", id="ab-pass-over-a-screen-pass-stands"),
        pytest.param(0.12, 1.5, ["packages"], "FAIL", id="ab-fail-stays-fail"),
        pytest.param(0.12, 1.0, [], "PASS", id="nothing-differs"),
        pytest.param(0.12, 1.0, None, "PASS", id="unseen-not-given"),
    ],
)
def test_apply_ab_decides_the_code_whatever_setup_both_sides_shared(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    screened_step_s: float,
    ab_slowdown: float,
    unseen: list[str] | None,
    status: str,
) -> None:
    outcome = ab_outcome(tmp_path, monkeypatch, lambda t: every_fifth_slower(t, ab_slowdown))
    screened = compare(bundle(1), bundle(2, step_s=screened_step_s), Tolerances())
    row = apply_ab(screened, outcome, Tolerances(), ABConfig(), unseen).timing(1)
    assert row is not None and (row.status, row.decided_by) == (status, "ab")
    assert row.status == outcome["decision"]["status"]
    if unseen:
        # The note says what the setup changed; the environment row (ab/environment.py) measures it.
        assert row.note.startswith(fingerprint.describe(unseen))
        assert "the environment row measures the setup" in row.note
    else:
        assert fingerprint.SETUP_CHANGED not in row.note


def test_apply_ab_with_differing_fingerprints_and_no_stored_baseline_keeps_its_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = ab_outcome(tmp_path, monkeypatch, lambda t: t)
    first = compare(None, bundle(2), Tolerances())
    assert undecided_world_sizes(first, include_new=True) == [1, 2]
    row = apply_ab(first, outcome, Tolerances(), ABConfig(), ["config"]).timing(1)
    assert row is not None and row.status == "PASS"
    assert apply_ab(first, outcome, Tolerances(), ABConfig()).timing(1).status == "PASS"  # type: ignore[union-attr]


def test_apply_ab_scaling_judges_efficiency_from_the_rounds_at_both_world_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steady = ab_outcome(tmp_path / "one", monkeypatch, lambda t: t, ws=1)
    slower_at_2 = ab_outcome(tmp_path / "two", monkeypatch, lambda t: [x * 1.2 for x in t], ws=2)
    comparison = compare(bundle(1), bundle(2), Tolerances())
    judged = apply_ab_scaling(comparison, {1: steady, 2: slower_at_2}, Tolerances())
    row = next(c for c in judged.checks if c.metric == SCALING)
    assert row.status == "WARN" and "A/B at both world sizes (4 and 4 rounds)" in row.note
    # The base sides measured the same 20 ms at ws=1 and 2 (1024 tokens at 2): 100% efficient; -1/6 of it.
    assert row.baseline == pytest.approx(100.0, abs=0.5)
    assert row.change == pytest.approx(100 * (1 / 1.2 - 1), abs=0.5)
    assert apply_ab_scaling(comparison, {1: steady}, Tolerances()) is comparison


# ---------------------------------------------------------------- the comparison: on_unknown, undecided


def unknown_comparison(on_unknown: str) -> Comparison:
    checks = [
        Check("tokens/s (ws=1)", "tok/s", 100.0, 101.0, -1.0, status="UNKNOWN", metric=TIMING, world_size=1),
        Check("peak memory (ws=1)", "MiB", 400.0, 400.0, 0.0, status="PASS"),
    ]
    return Comparison("p", "w", "/b", checks, ["n"], on_unknown)


def test_on_unknown_neutral_keeps_the_verdict_and_exits_0() -> None:
    neutral = unknown_comparison("neutral")
    assert (neutral.verdict, neutral.exit_code) == ("UNKNOWN", 0)
    data = neutral.to_dict()
    assert (data["verdict"], data["exit_code"], data["on_unknown"]) == ("UNKNOWN", 0, "neutral")
    assert Comparison.from_dict(data) == neutral
    assert Comparison.from_dict(data).exit_code == 0
    failing = unknown_comparison("fail")
    assert failing.exit_code == 4 and Comparison.from_dict(failing.to_dict()).exit_code == 4
    # neutral is about UNKNOWN only: a FAIL still exits 1.
    fail_row = replace(neutral.checks[0], status="FAIL")
    assert replace(neutral, checks=[fail_row]).exit_code == 1
    # A compare.json written before on_unknown existed reads as "fail".
    old = {k: v for k, v in data.items() if k != "on_unknown"}
    assert Comparison.from_dict(old).on_unknown == "fail"
    with pytest.raises(BaselineError, match="on_unknown"):
        Comparison.from_dict(data | {"on_unknown": "ignore"})


def test_gate_on_unknown_is_fail_or_neutral(tmp_path: Path) -> None:
    assert make_config(tmp_path).gate.on_unknown == "fail"
    assert make_config(tmp_path, gate={"on_unknown": "neutral"}).gate.on_unknown == "neutral"
    with pytest.raises(ConfigError, match="on_unknown"):
        make_config(tmp_path, gate={"on_unknown": "ignore"})


def test_undecided_world_sizes_with_an_explicit_base_include_new_and_unchanged_rows() -> None:
    def row(ws: int, status: Status, decided_by: str = "screen") -> Check:
        return Check(
            f"tokens/s (ws={ws})",
            "tok/s",
            1.0,
            status=status,
            metric=TIMING,
            world_size=ws,
            decided_by=decided_by,
        )

    comparison = Comparison(
        "p",
        "w",
        None,
        [
            row(1, "PASS"),
            row(2, "FAIL"),
            row(4, "NEW", ""),
            row(8, "UNKNOWN"),
            row(16, "UNKNOWN", "ab"),
            row(32, "PASS", "unchanged"),
        ],
    )
    assert undecided_world_sizes(comparison) == [2, 8]
    # An explicit base also decides the baseline's own code: "slower than that base?" is still open.
    assert undecided_world_sizes(comparison, include_new=True) == [2, 4, 8, 32]
    first_run = compare(None, bundle(1), Tolerances())
    assert undecided_world_sizes(first_run) == []
    assert undecided_world_sizes(first_run, include_new=True) == [1, 2]
    # An explicit base decides NEW rows by A/B even without a stored baseline; without one, nothing.
    assert worlds_for_ab(first_run, None, base_available=True, explicit_base=True) == [1, 2]
    assert worlds_for_ab(first_run, None, base_available=True) == []
    assert worlds_for_ab(first_run, None, base_available=False, explicit_base=True) == []
