"""A suite's family-wise false FAIL (suite/family.py): the bound it states, and each entry gated at its
share of the budget by the runner, with a gate function standing in for the pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchgate.ab.levels import look_bounds
from benchgate.config import RunConfig, load_config
from benchgate.kit.files import read_json
from benchgate.kit.progress import Reporter
from benchgate.suite.family import apply_family, plan_family
from benchgate.suite.runner import EntryOutcome, run_entries
from benchgate.suite.spec import load_suite
from benchgate.suite.table import suite_markdown

GPT = "benchgate.workloads.gpt:make_workload"


def config(world_sizes: list[int], confidence: float = 0.95) -> RunConfig:
    return load_config(overrides={"bench.world_sizes": world_sizes, "gate.tolerances.confidence": confidence})


def test_bonferroni_splits_each_entrys_budget_over_the_suites_timing_decisions() -> None:
    configs = [config([1, 2]), config([1]), config([1])]  # 4 decisions: entries x world sizes
    plan = plan_family(configs, "bonferroni")
    assert plan.decisions == 4
    assert plan.alpha == pytest.approx(0.05)
    assert plan.independent == pytest.approx(1 - (1 - 0.0125) ** 4)
    gated = [apply_family(c, plan) for c in configs]
    assert [g.gate.tolerances.confidence for g in gated] == pytest.approx([0.9875] * 3)
    assert gated[0].bench == configs[0].bench  # only the confidence moves
    assert "4 timing decisions" in plan.sentence() and "at most 5.0%" in plan.sentence()


def test_without_control_the_stated_bound_is_k_times_each_decisions() -> None:
    configs = [config([1]), config([1]), config([1, 2], confidence=0.9)]
    plan = plan_family(configs, "none")
    assert plan.alpha == pytest.approx(0.05 + 0.05 + 2 * 0.1)
    assert plan.independent == pytest.approx(1 - 0.95**2 * 0.9**2)
    assert all(apply_family(c, plan) is c for c in configs)
    assert "up to 30.0%" in plan.sentence() and "26.9% were they independent" in plan.sentence()


def test_one_decision_keeps_its_confidence_and_an_unknown_method_is_named() -> None:
    one = config([1])
    assert apply_family(one, plan_family([one], "bonferroni")) is one
    assert (
        plan_family([], "bonferroni").sentence() == "Family-wise false FAIL: no entry ran a timing decision."
    )
    with pytest.raises(ValueError, match="family: got 'holm'"):
        plan_family([one], "holm")  # type: ignore[arg-type]


def test_the_ab_bounds_follow_the_stricter_confidence() -> None:
    # The split only holds if the A/B spends the smaller budget: every look's bounds are wider.
    loose, strict = look_bounds(0.95, 4, 27), look_bounds(1 - 0.05 / 4, 4, 27)
    assert all(s.fail_t > lo.fail_t and s.pass_t > lo.pass_t for s, lo in zip(strict, loose, strict=True))


def test_the_runner_gates_each_entry_at_its_share_and_suite_md_states_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(
        "[suite]\nname = 's'\n"
        f"[[entries]]\nname = 'a'\nworkload = '{GPT}'\nconfig = {{ bench = {{ world_sizes = [1, 2] }} }}\n"
        f"[[entries]]\nname = 'b'\nworkload = '{GPT}'\n"
        "[[entries]]\nname = 'c'\nworkload = 'm:f'\nvariant = { x = 1 }\n"  # refused: runs no decision
    )
    seen: dict[str, float] = {}

    def gate(entry: RunConfig, reporter: Reporter) -> EntryOutcome:
        seen[str(entry.bench.name)] = entry.gate.tolerances.confidence
        return EntryOutcome("PASS", 0, entry.out)

    out = tmp_path / "out"
    record = run_entries(load_suite(path), out, gate)
    # a's two world sizes, and b's default [1, N]: counted as two, the most it can run
    assert seen == pytest.approx({"a": 1 - 0.05 / 4, "b": 1 - 0.05 / 4})
    saved = read_json(out / "suite.json")
    assert saved["family"]["method"] == "bonferroni" and saved["family"]["decisions"] == 4
    assert saved["entries"][0]["confidence"] == pytest.approx(1 - 0.05 / 4)
    assert saved["family"]["sentence"] in suite_markdown(out, record.data)


def test_family_none_in_the_suite_table_keeps_the_entries_confidence(tmp_path: Path) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(
        "[suite]\nname = 's'\nfamily = 'none'\n"
        + "".join(f"[[entries]]\nname = '{n}'\nworkload = '{GPT}'\n" for n in ("a", "b"))
    )
    seen: list[float] = []

    def gate(entry: RunConfig, reporter: Reporter) -> EntryOutcome:
        seen.append(entry.gate.tolerances.confidence)
        return EntryOutcome("PASS", 0, entry.out)

    record = run_entries(load_suite(path), tmp_path / "out", gate)
    assert seen == [0.95, 0.95]
    assert record.data["family"]["alpha"] == pytest.approx(0.2)  # 2 entries x [1, N]
