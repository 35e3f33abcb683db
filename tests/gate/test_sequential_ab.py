"""A/B layouts with real runs: two commits of a git repository (tests/support/stack_repo.py: more layers, more
compute in every step), real torchrun launches on this CPU, no stand-ins.

- sequential, through the A/B stage a gate run calls (`stage_env`, `stage_bench`, `stage_compare`, then
  `stage_ab`): a candidate with 20% more layers FAILs, one launch per side per round in A B | B A order,
  and the row says which layout ran;
- sequential, unchanged code PASSes.

(auto on CPU runs interleaved and says why: tests/gate/test_ab.py's A/B of the same code checks it.)

Settings, for this 2-core host shared with other jobs: a sequential round pairs two launches seconds
apart, and launches of identical code land at different speeds here, so sequential rounds of this
workload had a round-to-round sd of 12% to 25% where interleaved ones stay within a few percent
(benchmarks/ab_layouts.py measures both on gpt-tiny). So each sequential test takes 4 rounds at one
look (about 50 s) at confidence 0.9 (the bounds 0.82 sd from the mean), and the tolerances are set to
decide this noise rather than to be the gate's: 2% for the slower commit (about -19%), 25% for the
unchanged code. Up to a round sd of NOISY_SD_PCT both decisions are near-certain, and an UNKNOWN is
accepted only above it (the message says so); at 25% sd a wrong decision (the slower commit PASSing,
unchanged code FAILing) would still take a mean more than 3 standard errors off.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from harness import make_config
from stack_repo import checked_out_side, commit, gate_run_through_ab

from benchgate.ab.runner import AB_FILE, run_ab
from benchgate.config import RunConfig
from benchgate.kit.files import read_json

LAYERS = 15
SLOWER = 18  # +20% layers: about -16% to -21% tokens/s on this host (A/B)
ROUNDS, CONFIDENCE = 4, 0.9
# Below this round-to-round sd (percent) the settings here decide (see the docstring): at 8% the slower
# commit's upper bound stays below -2% unless its mean misses a -16% truth by 1.9 standard errors (3%),
# and unchanged code's lower bound above -25% unless its mean misses by 4.6.
NOISY_SD_PCT = 8.0


def ab_settings(tmp_path: Path, layout: str, tolerance_pct: float, rounds: int = ROUNDS) -> RunConfig:
    return make_config(
        tmp_path,
        bench={"workload": "stackwork:make_workload", "steps": 20, "warmup": 3},
        gate={
            "tolerances": {"throughput_drop_pct": tolerance_pct, "confidence": CONFIDENCE},
            "ab": {
                "layout": layout,
                "steps": 12,
                "warmup": 3,
                "min_measured_s": 0.5,
                "min_rounds": rounds,
                "max_rounds": rounds,
            },
        },
    )


def undecided_only_where_noisy(ab: dict[str, Any], expected: str) -> None:
    decision = ab["decision"]
    changes = [f"{100 * math.expm1(r['change_log']):+.1f}%" for r in ab["rounds"]]
    described = f"{decision['status']}: {decision['reason']}; rounds {changes}, sd {decision['round_sd_pct']}"
    if decision["status"] != expected:
        assert decision["status"] == "UNKNOWN", described
        assert decision["round_sd_pct"] > NOISY_SD_PCT, (
            f"undecided on a host quiet enough to decide: {described}"
        )
        print(f"sequential A/B undecided on a noisy host (round sd above {NOISY_SD_PCT}%): {described}")


def check_sequential_rounds(ab: dict[str, Any], ws_dir: Path) -> None:
    """One launch per side per round, the first side alternating (A B | B A | ..., which side opens drawn
    from the seed: ab/round_plan.py); no turn-taking."""
    firsts = [r["first_side"] for r in ab["rounds"]]
    assert set(firsts) <= {"A", "B"} and all(a != b for a, b in itertools.pairwise(firsts))
    for i, r in enumerate(ab["rounds"], start=1):
        assert r["base_first"] == (r["pairs"] if r["first_side"] == "A" else 0)
        assert "base_idle_cpu_share" not in r  # nothing idles: the other side is not alive
        for label in ("A", "B"):
            metrics = read_json(ws_dir / f"round{i}" / label / "metrics-ws1.json")
            assert len(metrics["samples"]["step_time_s"]) == r["pairs"]
            assert "idle_cpu_s" not in metrics["samples"]  # launched without a turn coordinator


@pytest.mark.slow
@pytest.mark.serial
def test_sequential_ab_fails_a_commit_with_a_fifth_more_layers(repo: Path, tmp_path: Path) -> None:
    base = commit(repo, "base", layers=LAYERS)
    slower = commit(repo, "a fifth more layers", layers=SLOWER)
    config = ab_settings(tmp_path, "sequential", tolerance_pct=2.0)
    # The candidate's run as a gate run measures it, up to the A/B: env, bench, compare (no baseline: NEW).
    run_dir = tmp_path / "run"
    base_side = checked_out_side(repo, base, "base", tmp_path)
    comparison = gate_run_through_ab(
        config, repo, run_dir, base_side, checked_out_side(repo, slower, "candidate", tmp_path)
    )
    ab = read_json(run_dir / "ab" / "ws1" / AB_FILE)
    assert ab["layout"] == {"name": "sequential", "why": "gate.ab.layout = sequential"}
    check_sequential_rounds(ab, run_dir / "ab" / "ws1")
    row = comparison.timing(1)
    assert row is not None and row.decided_by == "ab"
    assert "sequential layout: one side at a time (gate.ab.layout = sequential)" in row.note
    assert row.status != "PASS", row.note  # at any noise
    assert ab["decision"]["change_pct"] < 0, row.note
    undecided_only_where_noisy(ab, "FAIL")
    assert row.status == ab["decision"]["status"]
    if row.status == "FAIL":  # explained in its own layout: one launch per side, one profiled round
        block = comparison.attribution["1"]
        assert block["layout"] == "sequential" and block["entries"], block
        assert all((run_dir / trace).is_file() for trace in block["traces"]) and len(block["traces"]) == 2


@pytest.mark.slow
@pytest.mark.serial
def test_sequential_ab_passes_unchanged_code(repo: Path, tmp_path: Path) -> None:
    base = commit(repo, "base", layers=LAYERS)
    same = commit(repo, "docs only", layers=LAYERS)
    config = ab_settings(tmp_path, "sequential", tolerance_pct=25.0)
    outcome = run_ab(
        config,
        1,
        tmp_path / "out",
        checked_out_side(repo, base, "base", tmp_path),
        checked_out_side(repo, same, "candidate", tmp_path),
    )
    ab = read_json(tmp_path / "out" / "ab" / "ws1" / AB_FILE)
    assert ab["layout"]["name"] == outcome.layout.name == "sequential"
    check_sequential_rounds(ab, tmp_path / "out" / "ab" / "ws1")
    assert outcome.decision.status != "FAIL", ab["decision"]  # at any noise
    undecided_only_where_noisy(ab, "PASS")
