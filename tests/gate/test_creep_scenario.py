"""Creep with real runs: three commits, each slower than the last by about half the tolerance, each
PASSing against the one before it, while the creep row FAILs against the pinned anchor.

Real torchrun launches of real commits (tests/support/stack_repo.py: more layers, more compute in every step),
measured and compared by the stage functions a gate run calls (`stage_env`, `stage_bench`, `stage_compare`),
which skip what a whole `benchgate run` adds around them (the pipeline, the report, MLflow) and keep this
test to six launches. On a 2-core host shared with other jobs, launches of one commit differ by 10% to
35% (the raw figure, which a PASS needs too, by the most), so the tolerance is 80% and the confidence
70%: this test shows the creep logic on real runs; how well the row decides at the shipped settings is
`benchmarks/power.py creep`. Steps of half the tolerance in log terms (each commit has 2.2
times the layers: tokens/s -55%, against a floor of -80%) leave each commit and the sum of three about
the same margin; a third of it could never FAIL (1 - (1 - t/3)^3 < t).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import make_config
from stack_repo import git, stack_history

from benchgate.ab import creep_ab
from benchgate.ab.runner import Side
from benchgate.ab.stage import stage_ab, worlds_for_ab
from benchgate.checks.stage import stage_compare
from benchgate.config import RunConfig
from benchgate.kit.files import read_json, write_json
from benchgate.measure.launch import stage_bench
from benchgate.measure.stage import stage_env
from benchgate.results.bundle import load_bundle
from benchgate.results.comparison import CREEP, TIMING, Comparison, load_comparison
from benchgate.store.anchor import save_anchor
from benchgate.store.baseline import find_baseline, save_baseline

# Layers per commit: every step about 2.2 times as long as at the commit before (tokens/s -55%).
LAYERS = [8, 18, 40, 88]


def measure(config: RunConfig, repo: Path, sha: str, out: Path) -> Path:
    """One real run of commit `sha`: env.json (this machine, that commit), then the bench at ws=1."""
    git(repo, "checkout", "-q", sha)
    stage_env(out, cwd=repo, branch="main", config=config)
    stage_bench(config, 1, out, source_paths=(repo,))
    return out


def row(comparison: Comparison, metric: str) -> tuple[str, float | None, str]:
    found = next(c for c in comparison.checks if c.metric == metric and c.world_size == 1)
    return found.status, found.change, found.note


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(900)  # six launches, then the creep A/B's rounds (two launches each)
def test_commits_that_each_pass_add_up_to_a_creep_fail(repo: Path, tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        bench={"workload": "stackwork:make_workload", "steps": 30, "warmup": 3},
        gate={
            "tolerances": {"throughput_drop_pct": 80.0, "confidence": 0.7},
            # Small rounds, a few seconds each (as tests/gate/test_ab.py's): the creep A/B at the end.
            "ab": {"steps": 12, "min_measured_s": 0.2, "warmup": 2, "min_rounds": 3, "max_rounds": 5},
        },
    )
    baselines = config.gate.baseline_dir
    anchor_sha, *later = stack_history(repo, LAYERS)
    # The anchor's code three times: the baseline store's history (identical code: the noise every row is
    # judged by); the last run is the baseline of the next commit, and the pinned anchor.
    for i in range(3):
        anchor_dir = measure(config, repo, anchor_sha, tmp_path / f"anchor{i}")
        save_baseline(load_bundle(anchor_dir), baselines, "the anchor's code")
    anchor = load_bundle(anchor_dir)
    save_anchor(anchor, baselines, "release 1.0", time.time(), {})
    stored = find_baseline(baselines, anchor.machine_profile, "stack")
    assert stored is not None and len(stored.history) == 3
    outcomes = []
    for k, sha in enumerate(later, start=1):
        run_dir = measure(config, repo, sha, tmp_path / f"commit{k}")
        comparison, _, _ = stage_compare(config, run_dir)
        outcomes.append((row(comparison, TIMING), row(comparison, CREEP), comparison.verdict))
        # A PASS becomes the next commit's baseline; the noise stays that of the anchor's code.
        save_baseline(load_bundle(run_dir), baselines, "passed", history=stored.history)
    described = "; ".join(
        f"commit {k}: timing {t}, creep {c}, {v}" for k, (t, c, v) in enumerate(outcomes, 1)
    )
    timing = [t[0] for t, _, _ in outcomes]
    creep = [c[:2] for _, c, _ in outcomes]
    assert timing == ["PASS", "PASS", "PASS"], described  # each commit within tolerance of the one before
    assert creep[0][0] != "FAIL", described  # one step of half the tolerance is within it
    assert creep[-1][0] == "FAIL" and outcomes[-1][2] == "FAIL", described  # three are not
    assert creep[-1][1] is not None and creep[0][1] is not None and creep[-1][1] < creep[0][1], described
    # The screen's FAIL is a question: the A/B stage (the pipeline's, as a run with a base commit reaches
    # it) runs an interleaved A/B of the anchor's commit, checked out of the repository, against this
    # run, and only its FAIL fails the row. The timing row PASSed, so no per-commit A/B runs.
    last = tmp_path / f"commit{len(later)}"
    compared = load_comparison(last / "compare.json")
    assert creep_ab.pending(compared) == {1: anchor_sha}
    env = read_json(last / "env.json")
    write_json(last / "env.json", env | {"source": {"repository": f"file://{repo}", "commit": later[-1]}})
    assert worlds_for_ab(compared, find_baseline(baselines, anchor.machine_profile, "stack"), True) == [1]
    candidate = Side(f"candidate {later[-1][:12]}", later[-1], (repo,))
    decided = stage_ab(config, last, [1], Side("base (not run)"), candidate)
    status, _, note = row(decided, CREEP)
    assert (status, decided.verdict) == ("FAIL", "FAIL"), note
    found = next(c for c in decided.checks if c.metric == CREEP)
    assert found.decided_by == "ab" and "by A/B" in note and f"A/B vs anchor {anchor_sha[:12]}" in note, note
    assert row(decided, TIMING)[0] == "PASS" and not (last / "ab").exists()  # no per-commit A/B
    assert read_json(last / "creep" / "ab" / "ws1" / "ab.json")["base"]["commit"] == anchor_sha
