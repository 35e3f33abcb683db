"""A run whose setup differs from its baseline run's (ab/environment.py): the A/B decision stands for the
code, the setup's change is measured in an environment row of its own (INFO, WARN when confidently
slower than the tolerance), and such a PASS on main is promoted, so no UNKNOWN waits for a person.

The A/B outcomes are real ab.json dicts written by ab/runner.run_ab over stand-in benches (metrics
files of jittered 20 ms steps, as test_timing_decisions's); the runs are tests/support/bundles.py's with the
bench's "loaded" record and the env stage's fingerprints, as measure/bench.py and measure/stage.py write
them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bundles import bundle
from harness import make_config
from scipy import stats as scipy_stats

from benchgate.ab import runner as ab_runner
from benchgate.ab.environment import DECIDED_BY, ENVIRONMENT, environment_shift, with_environment
from benchgate.ab.rows import apply_ab
from benchgate.ab.runner import Side, run_ab
from benchgate.ab.stage import fingerprints_unseen_by_ab
from benchgate.checks.compare import compare
from benchgate.checks.next_steps import next_steps
from benchgate.checks.tables import markdown
from benchgate.config import ABConfig, Tolerances
from benchgate.kit.files import write_json
from benchgate.measure import fingerprint
from benchgate.publish.policy import AUTO_REASON, should_update_baseline
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import Comparison

BASE_COMMIT = "0123abcd" * 5
PYTHON = "CPython 3.12.3"
OLD = ["numpy==2.1.3", "pydantic==2.9.2", "torch==2.4.0"]
NEW = ["numpy==2.1.3", "pydantic==2.9.2", "torch==2.5.1"]


class InstantCoordinator:
    """The turn coordinator's interface without sockets: the stand-in bench needs no turns."""

    def __init__(self, ranks_per_side: int, timeout_s: float, seed: int = 0, **_: Any) -> None:
        self.seed = seed

    @property
    def address(self) -> str:
        return "127.0.0.1:0"

    def run(self, steps: int, alive: Any, warmup: int = 0, **_: Any) -> list[str]:
        return ["AB" if (self.seed + i) % 2 else "BA" for i in range(steps)]


def ab_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The ab.json of an A/B whose both sides run 20 ms steps (1% jitter, 512 tokens): a PASS."""

    def bench_side(config: Any, world_size: int, out_dir: Path, *args: Any, **kwargs: Any) -> Path:
        seed = 1000 * int(out_dir.parent.name.removeprefix("round")) + (kwargs["turns"][1] == "B")
        n = config.bench.steps
        times = [float(t) for t in 0.02 * (1 + 0.01 * np.random.default_rng(seed).standard_normal(n))]
        metrics = {
            "workload": "w",
            "world_size": world_size,
            "precision": "fp32",
            "tokens_per_step_global": 512,
            "memory": {"peak_bytes": 400 * 2**20},
            "samples": {"step_time_s": times, "tokens_per_s": [512 / t for t in times], "loss": [3.0] * n},
        }
        return write_json(out_dir / f"metrics-ws{world_size}.json", metrics)

    monkeypatch.setattr(ab_runner, "stage_bench", bench_side)
    monkeypatch.setattr(ab_runner, "TurnCoordinator", InstantCoordinator)
    config = make_config(tmp_path, gate={"ab": {"steps": 30}})
    base, candidate = Side("base 0123abcd", BASE_COMMIT), Side("candidate fedc9876", "fedc9876" * 5)
    return run_ab(config, 1, tmp_path, base, candidate, step_s=0.02).to_dict(base, candidate)


def run(seed: int, packages: list[str], installed: str, step_s: float = 0.02) -> Bundle:
    """A run of commit BASE_COMMIT on main whose benches loaded `packages`; `installed` stands for the
    env stage's digest of every installed distribution (which the loaded record overrides). ws=1 steps
    take `step_s`; ws=2 (screened only) always 22 ms."""
    made = bundle(seed, step_s=step_s, step_s_ws2=0.022)
    metrics = {
        ws: {**m, fingerprint.LOADED: {"python": PYTHON, "packages": packages}}
        for ws, m in made.metrics.items()
    }
    env = {
        "machine_profile": made.env["machine_profile"],
        "git": {"commit": BASE_COMMIT, "branch": "main", "dirty": False},
        "fingerprints": {"benchgate": "a" * 16, "packages": installed, "config": "c" * 16},
    }
    return replace(made, env=env, metrics=metrics)


def decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, baseline: Bundle, current: Bundle
) -> tuple[Comparison, list[str]]:
    """The compare stage's comparison, then the A/B (every round the same code: a PASS) applied as
    stage_ab applies it: the timing row, then the environment row."""
    tol = Tolerances()
    outcome = ab_outcome(tmp_path, monkeypatch)
    assert outcome["decision"]["status"] == "PASS"
    unseen = fingerprints_unseen_by_ab(baseline, current)
    comparison = apply_ab(compare(baseline, current, tol), outcome, tol, ABConfig(), unseen)
    return with_environment(comparison, outcome, unseen, baseline, current, tol), unseen


def promoted(tmp_path: Path, current: Bundle, comparison: Comparison) -> str | None:
    config = make_config(tmp_path, gate={"update_baseline": "auto"})
    return should_update_baseline(config, current.env, comparison)


def environment_rows(comparison: Comparison) -> list[Any]:
    return [c for c in comparison.checks if c.metric == ENVIRONMENT]


def test_a_distribution_the_bench_never_loads_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The `hf` extra installed between two runs: env.json's digest of everything installed differs,
    # but both benches loaded the same distributions.
    baseline, current = run(1, OLD, "1" * 16), run(2, OLD, "2" * 16)
    assert fingerprint.differing(baseline.env["fingerprints"], current.env["fingerprints"]) == ["packages"]
    comparison, unseen = decided(tmp_path, monkeypatch, baseline, current)
    assert unseen == []
    assert environment_rows(comparison) == []
    assert comparison.timing(1).status == "PASS"  # type: ignore[union-attr]


def test_a_pass_over_a_dependency_bump_stays_pass_with_an_info_environment_row_and_promotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline, current = run(1, OLD, "1" * 16), run(2, NEW, "2" * 16)
    comparison, unseen = decided(tmp_path, monkeypatch, baseline, current)
    assert unseen == ["packages"]
    timing = comparison.timing(1)
    assert timing is not None and (timing.status, timing.decided_by) == ("PASS", "ab")
    assert timing.note.startswith(fingerprint.describe(["packages"]))
    (row,) = environment_rows(comparison)
    assert (row.name, row.status, row.decided_by, row.world_size) == (
        "environment (ws=1)",
        "INFO",
        DECIDED_BY,
        1,
    )
    # Right after the timing row it stands beside.
    assert comparison.checks[comparison.checks.index(timing) + 1] is row
    # The base rounds (20 ms steps, 1% jitter) against the baseline's 20 ms: no real change, and an
    # interval that holds it.
    assert row.ci_low < 0 < row.ci_high and abs(row.change) < 2
    assert row.note.startswith(
        f"environment changed: {row.change:+.1f}% [{row.ci_low:+.1f}, {row.ci_high:+.1f}]"
    )
    assert "packages: torch 2.4.0 -> 2.5.1" in row.note and "numpy" not in row.note
    assert comparison.verdict == "PASS" and comparison.exit_code == 0
    assert next_steps(comparison, Path("/runs/r1")) == []
    assert "environment (ws=1)" in markdown(comparison)
    assert promoted(tmp_path, current, comparison) == AUTO_REASON


def test_an_environment_confidently_slower_than_the_tolerance_warns_and_still_promotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The baseline ran 16 ms steps under the old setup; the base code now takes 20 ms (-20%).
    baseline, current = run(1, OLD, "1" * 16, step_s=0.016), run(2, ["python-only==1"], "2" * 16)
    comparison, _ = decided(tmp_path, monkeypatch, baseline, current)
    (row,) = environment_rows(comparison)
    assert row.status == "WARN" and row.ci_high < -5
    assert row.change == pytest.approx(-20, abs=1.5)
    assert "torch 2.4.0 gone" in row.note and "python-only 1 added" in row.note
    assert comparison.timing(1).status == "PASS"  # type: ignore[union-attr]
    assert comparison.verdict == "WARN" and comparison.exit_code == 0
    assert promoted(tmp_path, current, comparison) == AUTO_REASON


def test_a_baseline_without_the_loaded_record_compares_env_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = run(1, OLD, "1" * 16)
    old = replace(
        old, metrics={ws: {k: v for k, v in m.items() if k != "loaded"} for ws, m in old.metrics.items()}
    )
    # Stored before the record existed: everything installed on both sides, as before.
    assert fingerprints_unseen_by_ab(old, run(2, NEW, "1" * 16)) == []
    comparison, unseen = decided(tmp_path, monkeypatch, old, run(2, NEW, "2" * 16))
    assert unseen == ["packages"]
    (row,) = environment_rows(comparison)
    assert "did not record which it loaded" in row.note


def test_the_interval_counts_the_baselines_one_launch() -> None:
    rates = [1000.0, 1030.0, 985.0, 1012.0, 995.0]
    shift = environment_shift(rates, 1000.0, 0.95)
    assert shift is not None
    logs = [math.log(r) for r in rates]
    mean, sd, n = statistics.fmean(logs), statistics.stdev(logs), len(logs)
    half = scipy_stats.t.ppf(0.975, n - 1) * sd * math.sqrt(1 / n + 1)
    assert shift.change_pct == pytest.approx(100 * math.expm1(mean - math.log(1000.0)))
    assert shift.ci_low_pct == pytest.approx(100 * math.expm1(mean - math.log(1000.0) - half))
    assert shift.ci_high_pct == pytest.approx(100 * math.expm1(mean - math.log(1000.0) + half))
    # Wider than the mean's own interval (sd / sqrt(n)): the baseline is one launch, not a mean.
    assert shift.ci_high_pct - shift.ci_low_pct > 2.4 * 100 * scipy_stats.t.ppf(
        0.975, n - 1
    ) * sd / math.sqrt(n)
    one = environment_shift([1100.0], 1000.0, 0.95)
    assert one is not None and one.change_pct == pytest.approx(10.0) and one.ci_low_pct is None
    assert environment_shift([], 1000.0, 0.95) is None


def test_a_second_ab_of_the_same_world_size_replaces_its_environment_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline, current = run(1, OLD, "1" * 16), run(2, NEW, "2" * 16)
    comparison, unseen = decided(tmp_path, monkeypatch, baseline, current)
    outcome = ab_outcome(tmp_path / "again", monkeypatch)
    again = with_environment(comparison, outcome, unseen, baseline, current, Tolerances())
    assert len(environment_rows(again)) == 1
    # A world size the baseline never measured, or nothing differing: no row.
    elsewhere = {**outcome, "world_size": 8}
    assert with_environment(comparison, elsewhere, unseen, baseline, current, Tolerances()) is comparison
    assert with_environment(comparison, outcome, [], baseline, current, Tolerances()) is comparison
