"""No ratchet: which runs may become the baseline (and so enter the noise history) on their own."""

from __future__ import annotations

from typing import Any

import pytest

from benchgate.config import parse_config
from benchgate.publish.policy import should_update_baseline
from benchgate.results.comparison import Check, Comparison


def comparison(*statuses: str) -> Comparison:
    checks = [
        Check(f"tokens/s (ws={i + 1})", "tok/s", 1.0, status=s, metric="tokens_per_s", world_size=i + 1)  # type: ignore[arg-type]
        for i, s in enumerate(statuses)
    ]
    checks.append(Check("peak memory (ws=1)", "MiB", 1.0, status="PASS"))
    return Comparison("p", "w", None, checks)


def env(branch: str = "main", dirty: bool | None = False) -> dict[str, Any]:
    return {"git": {"branch": branch, "dirty": dirty}}


@pytest.mark.parametrize(
    ("run_env", "result", "promoted"),
    [
        pytest.param(env(), comparison("PASS", "PASS"), True, id="clean-main-pass"),
        pytest.param(env(), comparison("NEW", "NEW"), True, id="first-baseline"),
        pytest.param(env(), comparison("PASS", "UNKNOWN"), False, id="unknown-timing"),
        pytest.param(env(), comparison("FAIL", "PASS"), False, id="fail"),
        pytest.param(env(), comparison("WARN", "PASS"), False, id="warn-timing"),
        pytest.param(env(dirty=True), comparison("PASS", "PASS"), False, id="dirty-tree"),
        pytest.param(env(dirty=None), comparison("PASS", "PASS"), False, id="tree-state-unknown"),
        pytest.param(env(branch="feature"), comparison("PASS", "PASS"), False, id="not-main"),
    ],
)
def test_auto_promotion_only_for_clean_main_runs_whose_timing_passed(
    run_env: dict[str, Any], result: Comparison, promoted: bool
) -> None:
    config = parse_config({"gate": {"update_baseline": "auto"}})
    assert (should_update_baseline(config, run_env, result) is not None) is promoted


def test_memory_warning_alone_does_not_block_promotion() -> None:
    result = comparison("PASS")
    result.checks.append(Check("peak memory (ws=2)", "MiB", 1.0, status="WARN"))
    config = parse_config({"gate": {"update_baseline": "auto"}})
    assert should_update_baseline(config, env(), result) == "branch main"


def test_explicit_promotion_is_the_user_s_call() -> None:
    always = parse_config({"gate": {"update_baseline": "always"}})
    never = parse_config({"gate": {"update_baseline": "never"}})
    assert should_update_baseline(always, env(dirty=True), comparison("UNKNOWN")) == "--update-baseline"
    assert should_update_baseline(never, env(), comparison("PASS")) is None
