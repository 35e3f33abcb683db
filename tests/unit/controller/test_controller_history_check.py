"""A schedule's history check, decided (controller/decide/history_check.py): which ended run it follows, when
it is made again, and what it finds over a history, as status and Event; the spec field's bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from benchgate.controller.decide import history_check as hc
from benchgate.controller.spec.resources import BenchmarkScheduleSpec, HistoryCheck, parse_spec
from benchgate.controller.spec.status import BenchmarkScheduleStatus, timestamp
from benchgate.errors import ConfigError
from benchgate.results.figures import HistoryPoint
from benchgate.tracking.read import RunHistory

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
TEMPLATE = {"spec": {"repository": "https://github.com/example/trainer.git", "branch": "main"}}


def spec(**history: Any) -> dict[str, Any]:
    return {"schedule": "0 2 * * *", "runTemplate": TEMPLATE, "historyCheck": history}


def run(name: str, phase: str, ended: str, kfp_run_id: str = "kfp-1", **spec: Any) -> dict[str, Any]:
    status = {"phase": phase, "completionTime": ended} | ({"kfpRunId": kfp_run_id} if kfp_run_id else {})
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": spec,
        "status": status,
    }


def test_the_check_follows_the_newest_run_that_reached_kfp_and_ended() -> None:
    runs = [
        run("n-1", "Succeeded", "2026-11-20T03:00:00Z", "kfp-1"),
        run("n-2", "Failed", "2026-11-21T03:00:00Z", "kfp-2", mlflowExperiment="nightly"),
        run("n-3", "Canceled", "2026-11-22T03:00:00Z", "kfp-3"),  # no verdict: not checked
        run("n-4", "Failed", "2026-11-22T04:00:00Z", ""),  # refused before KFP: nothing logged
        run("n-5", "Running", "", "kfp-5"),
    ]
    todo = hc.pending(spec(recent=5), {}, runs, NOW)
    assert todo == hc.Pending("n-2", "kfp-2", "nightly", HistoryCheck(recent=5))
    assert hc.pending(spec(), {}, runs[:1], NOW) == hc.Pending("n-1", "kfp-1", "benchgate", HistoryCheck())
    assert hc.pending(spec(), {}, runs[2:], NOW) is None
    without = {"schedule": "0 2 * * *", "runTemplate": TEMPLATE}
    assert hc.pending(without, {}, runs, NOW) is None and not hc.checks_history(without)
    assert hc.checks_history(spec())  # an empty historyCheck is on, with its defaults
    assert hc.pending(spec(recent=0), {}, runs, NOW) is None  # invalid: the schedule timer says so


def test_a_check_is_made_once_per_ended_run_and_an_error_again_after_a_while() -> None:
    runs = [run("n-1", "Succeeded", "2026-11-20T03:00:00Z")]
    for result in ("ok", "regression"):
        done = {"historyCheck": {"runName": "n-1", "result": result, "checkedAt": timestamp(NOW)}}
        assert hc.pending(spec(), done, runs, NOW + timedelta(days=1)) is None
    failed = {"historyCheck": {"runName": "n-1", "result": "error", "checkedAt": timestamp(NOW)}}
    assert hc.pending(spec(), failed, runs, NOW + hc.RETRY_AFTER - timedelta(seconds=1)) is None
    assert hc.pending(spec(), failed, runs, NOW + hc.RETRY_AFTER) is not None
    newer = [*runs, run("n-2", "Succeeded", "2026-11-21T03:00:00Z", "kfp-2")]
    done = {"historyCheck": {"runName": "n-1", "result": "ok", "checkedAt": timestamp(NOW)}}
    assert hc.pending(spec(), done, newer, NOW).run_name == "n-2"  # type: ignore[union-attr]


def history(slower_from: int, n: int = 14, acknowledged: str | None = None) -> RunHistory:
    """n nightly runs as tracking.read.history_point reads them, every step 20% slower from one on."""
    rng = np.random.default_rng(7)
    points = []
    for i in range(n):
        mean_ms = 100.0 * (1.2 if i >= slower_from else 1.0) * (1 + rng.normal(0, 0.01))
        figures = {"ws8/step_time_ms_mean": mean_ms, "ws8/tokens_per_s_p50": 4096e3 / mean_ms}
        ack = acknowledged if i == slower_from else None
        points.append(HistoryPoint(f"{i:02d}" * 20, 1e9 + 86_400 * i, figures, f"r{i}", acknowledged=ack))
    return RunHistory("h100-x8", "gpt-small", points)


def test_a_recent_regression_is_the_status_and_a_warning_naming_how_to_accept_it() -> None:
    todo = hc.Pending("n-14", "kfp-14", "benchgate", HistoryCheck(recent=5))
    outcome = hc.checked(todo, history(slower_from=10), NOW)
    assert isinstance(outcome.status, BenchmarkScheduleStatus)
    written = outcome.status.patch()["historyCheck"]
    assert written["result"] == "regression" and written["runName"] == "n-14" and written["runs"] == 14
    assert (written["profile"], written["workload"], written["checkedAt"]) == (
        "h100-x8",
        "gpt-small",
        timestamp(NOW),
    )
    (regression,) = written["regressions"]
    assert regression["figure"] == "tokens/s ws=8" and regression["commit"] == "10" * 20
    assert regression["runId"] == "r10" and regression["changePct"] == pytest.approx(-16.7, abs=1.5)
    assert outcome.warning is not None
    reason, message = outcome.warning
    assert reason == "HistoryRegression" and "from commit 101010101010 (run r10)" in message
    assert "benchgate history ack RUN_ID --reason TEXT" in message


@pytest.mark.parametrize(
    ("found", "why"),
    [
        (history(slower_from=4), "the change starts before the newest 5 runs"),
        (history(slower_from=10, acknowledged="bigger model"), "the change was acknowledged"),
        (history(slower_from=99), "no change"),
    ],
)
def test_no_recent_unacknowledged_regression_is_ok_without_an_event(found: RunHistory, why: str) -> None:
    todo = hc.Pending("n-14", "kfp-14", "benchgate", HistoryCheck(recent=5))
    outcome = hc.checked(todo, found, NOW)
    written = outcome.status.patch()["historyCheck"]  # type: ignore[union-attr]
    assert written["result"] == "ok", why
    assert written["regressions"] == [] and outcome.warning is None
    assert written["message"] == "no unacknowledged regression starts in the newest 5 of 14 runs"


def test_a_check_that_cannot_be_made_is_an_error_naming_why_without_an_event() -> None:
    todo = hc.Pending("n-3", "kfp-3", "nightly", HistoryCheck())
    unlogged = hc.checked(todo, None, NOW)
    written = unlogged.status.patch()["historyCheck"]  # type: ignore[union-attr]
    assert written["result"] == "error" and unlogged.warning is None
    assert "MLflow has no gate run of n-3 (KFP run kfp-3) in experiment 'nightly'" in written["message"]
    down = hc.failed(todo, "x" * 5000, NOW).status.patch()["historyCheck"]  # type: ignore[union-attr]
    assert len(down["message"]) == 1000 and down["runs"] == 0 and down["profile"] == ""


@pytest.mark.parametrize(
    ("history_check", "field"),
    [({"recent": 0}, "spec.historyCheck.recent: got 0"), ({"runs": 501}, "spec.historyCheck.runs: got 501")],
)
def test_bad_history_check_fields_are_refused_naming_them(history_check: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_spec(BenchmarkScheduleSpec, spec(**history_check))
