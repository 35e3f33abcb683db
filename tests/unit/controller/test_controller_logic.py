"""The controller's pure parts: KFP states to phases, conditions, the verdict summary, cron times and
history limits, settings, the status models, and the committed CRDs against the models they are
generated from."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hyp
from pydantic import ValidationError

from benchgate.controller.decide import schedule as sched
from benchgate.controller.settings import settings_from_env
from benchgate.controller.spec import crds
from benchgate.controller.spec import status as st
from benchgate.controller.spec.patterns import BRANCH_PATTERN, REPOSITORY_PATTERN
from benchgate.controller.spec.resources import (
    BenchmarkRunSpec,
    BenchmarkScheduleSpec,
    parse_spec,
    pipeline_arguments,
)
from benchgate.errors import ConfigError
from benchgate.kfp.run_request import pipeline_parameter_names
from benchgate.measure.source import MAX_BRANCH_LENGTH, validate_branch, validate_repository

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("state", "tasks", "phase", "reason"),
    [
        ("PENDING", [], "Submitted", "KfpPending"),
        ("RUNNING", [], "Running", "KfpRunning"),
        ("CANCELING", [], "Running", "KfpCanceling"),
        ("SOMETHING_NEW", [], "Running", "KfpSomethingNew"),
        ("SUCCEEDED", [("gate", "SUCCEEDED")], "Succeeded", "GatePassed"),
        ("FAILED", [("gate", "FAILED")], "Failed", "Regression"),
        ("FAILED", [("gate (A/B)", "FAILED")], "Failed", "Regression"),
        ("FAILED", [("bench ws=N", "FAILED")], "Failed", "RunFailed"),
        ("SKIPPED", [], "Failed", "RunFailed"),
        ("CANCELED", [], "Canceled", "KfpCanceled"),
    ],
)
def test_kfp_states_map_to_phases(state: str, tasks: list[tuple[str, str]], phase: str, reason: str) -> None:
    assert st.phase_for(state, tasks)[:2] == (phase, reason)


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    first = st.condition("Submitted", False, "Queued", "waiting", NOW)
    later = st.condition("Submitted", False, "KfpUnavailable", "down", NOW + timedelta(minutes=5))
    (kept,) = st.merge_conditions([first], later)
    assert kept["reason"] == "KfpUnavailable" and kept["lastTransitionTime"] == first["lastTransitionTime"]
    flipped = st.condition("Submitted", True, "KfpRunCreated", "ok", NOW + timedelta(minutes=9))
    (now_true,) = st.merge_conditions([kept], flipped)
    assert now_true["status"] == "True" and now_true["lastTransitionTime"] == "2026-11-22T12:09:00Z"
    other = st.condition("Finished", True, "GatePassed", "done", NOW)
    assert [c["type"] for c in st.merge_conditions([now_true], other)] == ["Submitted", "Finished"]


def test_verdict_summary_names_the_worst_world_size() -> None:
    metrics = {
        "gate/ws1/tokens_per_s_change_pct": -1.234,
        "gate/ws8/tokens_per_s_change_pct": -8.449,
        "gate/checks_pass": 7.0,
        "gate/checks_fail": 1.0,
        "ws1/tokens_per_s_p50": 1234.0,
    }
    summary = st.verdict_summary({"benchgate.verdict": "FAIL"}, metrics)
    assert summary == {
        "result": "FAIL",
        "tokensPerSecondChangePct": {"ws1": -1.23, "ws8": -8.45},
        "throughputChange": "-8.4% (ws=8)",
        "checks": {"PASS": 7, "FAIL": 1},
    }


def test_kfp_run_names_are_stable_per_object_and_differ_per_uid() -> None:
    a = st.kfp_run_name("team-a", "pr-1", "uid-1")
    assert a == st.kfp_run_name("team-a", "pr-1", "uid-1") and a.startswith("br-team-a-pr-1-")
    assert a != st.kfp_run_name("team-a", "pr-1", "uid-2")
    assert len(st.kfp_run_name("n" * 63, "x" * 253, "u")) <= 128


def spec(**fields: Any) -> BenchmarkScheduleSpec:
    data = {"schedule": "0 2 * * *", "runTemplate": {"spec": {"repository": "https://example.com/r.git"}}}
    return parse_spec(BenchmarkScheduleSpec, data | fields)  # type: ignore[no-any-return]


def test_due_time_honours_the_time_zone_and_collapses_missed_times() -> None:
    berlin = spec(timeZone="Europe/Berlin")  # 02:00 in Berlin is 01:00 UTC in winter
    last = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    assert sched.due_time(berlin, last, datetime(2026, 11, 22, 0, 59, tzinfo=UTC)) is None
    due = sched.due_time(berlin, last, datetime(2026, 11, 22, 1, 30, tzinfo=UTC))
    assert due is not None and due.astimezone(UTC) == datetime(2026, 11, 22, 1, 0, tzinfo=UTC)
    # A week down: one run for the newest time, not seven.
    week = sched.due_time(berlin, last - timedelta(days=7), datetime(2026, 11, 22, 1, 30, tzinfo=UTC))
    assert week is not None and week.astimezone(UTC) == due.astimezone(UTC)
    # Summer time: 02:00 in Berlin is 00:00 UTC.
    summer = sched.due_time(
        berlin, datetime(2026, 7, 1, 12, tzinfo=UTC), datetime(2026, 7, 2, 0, 30, tzinfo=UTC)
    )
    assert summer is not None and summer.astimezone(UTC) == datetime(2026, 7, 2, 0, 0, tzinfo=UTC)


def test_starting_deadline() -> None:
    due = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
    assert not sched.too_late(spec(), due, due + timedelta(days=3))
    assert sched.too_late(spec(startingDeadlineSeconds=600), due, due + timedelta(seconds=601))
    assert not sched.too_late(spec(startingDeadlineSeconds=600), due, due + timedelta(seconds=599))


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        # Spring forward (29 March 2026): 02:30 does not exist; the first minute after the gap, 03:00
        # CEST, is 01:00 UTC; the day after, 02:30 CEST is 00:30 UTC.
        (datetime(2026, 3, 28, 12, 0, tzinfo=UTC), "2026-03-29T01:00:00Z"),
        (datetime(2026, 3, 29, 1, 0, tzinfo=UTC), "2026-03-30T00:30:00Z"),
        # Fall back (25 October 2026): 02:30 CEST is 00:30 UTC; 02:30 comes again in CET, 01:30 UTC, and
        # a daily schedule does not run again then (as cron): the next time is the day after.
        (datetime(2026, 10, 24, 12, 0, tzinfo=UTC), "2026-10-25T00:30:00Z"),
        (datetime(2026, 10, 25, 0, 30, tzinfo=UTC), "2026-10-26T01:30:00Z"),
        (datetime(2026, 10, 25, 1, 30, tzinfo=UTC), "2026-10-26T01:30:00Z"),
    ],
)
def test_the_next_schedule_time_across_dst_is_the_time_the_schedule_acts_on(
    now: datetime, expected: str
) -> None:
    berlin = spec(schedule="30 2 * * *", timeZone="Europe/Berlin")
    reconciled = sched.reconcile(berlin.model_dump(by_alias=True), {}, {"generation": 1}, now)
    assert reconciled is not None and reconciled.patch()["nextScheduleTime"] == expected
    # What `nextScheduleTime` says is when the timer finds a run due: not a minute before, then.
    at = st.parse_time(expected)
    assert at is not None
    assert sched.due_time(berlin, now, at - timedelta(minutes=1)) is None
    due = sched.due_time(berlin, now, at)
    assert due is not None and due.astimezone(UTC) == at


def test_a_daily_schedule_runs_once_on_the_fall_back_day() -> None:
    """New York falls back on 1 November 2026: 01:30 EDT (05:30 UTC), then 01:30 EST (06:30 UTC). A
    daily 01:30 runs at the first only, whether the timer looks between the two or after both; an
    hourly schedule runs in both hours (an hour did pass)."""
    daily = spec(schedule="30 1 * * *", timeZone="America/New_York")
    before = datetime(2026, 10, 31, 12, 0, tzinfo=UTC)
    first = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    due = sched.due_time(daily, before, first)
    assert due is not None and due.astimezone(UTC) == first
    assert sched.due_time(daily, first, datetime(2026, 11, 1, 12, 0, tzinfo=UTC)) is None
    assert sched.next_time(daily, first).astimezone(UTC) == datetime(2026, 11, 2, 6, 30, tzinfo=UTC)
    # Far behind (more than MAX_CATCH_UP times): the newest time is still the day's one run.
    hourly_far = sched.due_time(daily, before - timedelta(days=200), datetime(2026, 11, 1, 7, tzinfo=UTC))
    assert hourly_far is not None and hourly_far.astimezone(UTC) == first
    hourly = spec(schedule="30 * * * *", timeZone="America/New_York")
    assert sched.next_time(hourly, first).astimezone(UTC) == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)


def test_a_schedule_is_reconciled_only_when_something_changed() -> None:
    nightly = {"schedule": "0 2 * * *", "runTemplate": {"spec": {"repository": "https://example.com/r.git"}}}
    first = sched.reconcile(nightly, {}, {"generation": 1}, NOW)
    assert first is not None
    status = first.patch()
    (valid,) = status["conditions"]
    assert (valid["type"], valid["status"], valid["observedGeneration"]) == ("Valid", "True", 1)
    assert status["observedGeneration"] == 1 and status["nextScheduleTime"] == "2026-11-23T02:00:00Z"
    # Every look until 02:00: nothing to write.
    for minutes in (1, 60, 839):
        assert sched.reconcile(nightly, status, {"generation": 1}, NOW + timedelta(minutes=minutes)) is None
    # The cron time passes: the next one is written.
    later = sched.reconcile(nightly, status, {"generation": 1}, NOW + timedelta(hours=14))
    assert later is not None and later.patch()["nextScheduleTime"] == "2026-11-24T02:00:00Z"
    # An edit (generation 2): written again, even though nothing else changed.
    edited = sched.reconcile(nightly, status, {"generation": 2}, NOW)
    assert edited is not None and edited.patch()["observedGeneration"] == 2
    assert edited.patch()["conditions"][0]["observedGeneration"] == 2
    # Edited into an invalid spec: Valid False, and no next time.
    broken = sched.reconcile({**nightly, "timeZone": "Mars/Olympus"}, status, {"generation": 3}, NOW)
    assert broken is not None
    (invalid,) = broken.patch()["conditions"]
    assert invalid["status"] == "False" and "spec.timeZone" in invalid["message"]
    assert broken.patch()["nextScheduleTime"] is None


def test_a_condition_may_be_unknown_and_name_its_generation() -> None:
    unknown = st.condition("Succeeded", None, "Running", "the KFP run is running", NOW, generation=4)
    assert unknown["status"] == "Unknown" and unknown["observedGeneration"] == 4
    assert "observedGeneration" not in st.condition("Finished", True, "GatePassed", "done", NOW)
    st.Condition.model_validate(unknown)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"schedule": "0 2 * * * *"}, "spec.schedule"),
        ({"schedule": "61 2 * * *"}, "spec.schedule"),
        ({"schedule": "@nightly"}, "spec.schedule"),
        ({"timeZone": "Europe/Nowhere"}, "spec.timeZone"),
        ({"timeZone": "../../etc/passwd"}, "spec.timeZone"),
    ],
)
def test_bad_schedules_name_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        sched.check_schedule(spec(**fields))


def run(name: str, phase: str, created: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": phase}}


def test_history_limits_prune_the_oldest_of_each_kind() -> None:
    runs = [
        run("s1", "Succeeded", "2026-11-01T00:00:00Z"),
        run("s3", "Succeeded", "2026-11-03T00:00:00Z"),
        run("s2", "Succeeded", "2026-11-02T00:00:00Z"),
        run("f1", "Failed", "2026-11-01T00:00:00Z"),
        run("c1", "Canceled", "2026-11-04T00:00:00Z"),
        run("r1", "Running", "2026-10-01T00:00:00Z"),
    ]
    assert sched.to_prune(runs, keep_succeeded=2, keep_failed=1) == ["s1", "f1"]
    assert sched.to_prune(runs, keep_succeeded=0, keep_failed=0) == ["s1", "s2", "s3", "f1", "c1"]
    assert [r["metadata"]["name"] for r in sched.active(runs)] == ["r1"]


def test_the_scheduled_run_is_owned_named_once_per_time_and_names_its_branch() -> None:
    owner = {"metadata": {"name": "nightly", "namespace": "team-a", "uid": "u-1"}}
    due = datetime(2026, 11, 22, 1, 0, tzinfo=UTC)
    manifest = sched.run_manifest(owner, spec(), "a" * 40, due)
    assert (
        manifest["metadata"]["name"] == sched.run_manifest(owner, spec(), "b" * 40, due)["metadata"]["name"]
    )
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert manifest["metadata"]["labels"][sched.SCHEDULE_LABEL] == "nightly"
    assert manifest["spec"]["commit"] == "a" * 40 and manifest["spec"]["branch"] == "main"
    assert sched.owned_runs([manifest, {"metadata": {"ownerReferences": []}}], "u-1") == [manifest]


def test_settings_name_the_variable_and_value() -> None:
    env = {"KFP_HOST": "https://kfp.example.com", "BENCHGATE_POLL_S": "soon"}
    with pytest.raises(ConfigError, match="BENCHGATE_POLL_S: got 'soon'"):
        settings_from_env(env)
    with pytest.raises(ConfigError, match="KFP_HOST"):
        settings_from_env({})
    settings = settings_from_env({"KFP_HOST": "https://kfp.example.com", "BENCHGATE_WATCH_NAMESPACE": "ml"})
    assert settings.watch_namespace == "ml" and settings.poll_s == 30.0


def test_a_status_model_writes_only_what_was_set_under_kubernetes_names() -> None:
    condition = st.condition("Submitted", True, "KfpRunCreated", "submitted", NOW)
    status = st.BenchmarkRunStatus(phase=st.RUNNING, kfp_run_id="run-1", conditions=[condition])
    assert status.patch() == {"phase": "Running", "kfpRunId": "run-1", "conditions": [condition]}
    verdict = st.Verdict.model_validate(st.verdict_summary({"benchgate.verdict": "PASS"}, {}))
    assert st.BenchmarkRunStatus(verdict=verdict).patch() == {"verdict": {"result": "PASS"}}
    schedule = st.BenchmarkScheduleStatus(last_schedule_time="2026-11-22T02:00:00Z", active=["a"])
    assert schedule.patch() == {"lastScheduleTime": "2026-11-22T02:00:00Z", "active": ["a"]}


@pytest.mark.parametrize(
    "status",
    [
        {"kfpRunID": "run-1"},  # a key the model lacks (here: a typo)
        {"phase": "Finished"},
        {"startTime": "yesterday"},
        {"verdict": {"result": "MAYBE"}},
        {"conditions": [{"type": "Finished", "status": "Yes"}]},
        {"conditions": [{"type": "Finished", "status": "True", "observed": 1}]},
    ],
)
def test_the_run_status_model_refuses_what_it_does_not_declare(status: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        st.BenchmarkRunStatus.model_validate(status)


def test_the_status_models_name_every_phase_and_verdict() -> None:
    assert set(get_args(st.Phase)) == {*st.ACTIVE_PHASES, *st.TERMINAL_PHASES, st.PENDING}
    assert set(st.KFP_PHASES.values()) | {st.PENDING} == set(get_args(st.Phase))
    assert st.VERDICTS == ("PASS", "WARN", "FAIL", "UNKNOWN")


@pytest.mark.parametrize(
    ("crd", "model"),
    [
        (crds.benchmarkrun_crd, st.BenchmarkRunStatus),
        (crds.benchmarkschedule_crd, st.BenchmarkScheduleStatus),
    ],
)
def test_the_crd_status_schemas_are_the_status_models(crd: Any, model: Any) -> None:
    """Every field of the model, described (`kubectl explain`); no defaults, which an API server would
    write into every status, and no nulls; kopf's own progress kept beside them."""
    status = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["type"] == "object" and status["x-kubernetes-preserve-unknown-fields"] is True
    assert set(status["properties"]) == {f.alias for f in model.model_fields.values()}

    def walk(node: dict[str, Any], path: str) -> None:
        assert "default" not in node and "nullable" not in node, path
        for key, child in node.get("properties", {}).items():
            assert child.get("description"), f"{path}.{key}"
            walk(child, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                walk(node[key], f"{path}[{key}]")

    walk(status, "status")


def test_committed_crds_match_the_models() -> None:
    """`make compile` regenerates them; a model change without it fails here."""
    for name, text in crds.rendered().items():
        committed = (REPO / crds.DEFAULT_DIR / name).read_bytes()
        assert committed == text.encode("utf-8"), f"{name} is stale: run `make compile`"


def test_crd_schemas_are_structural() -> None:
    """What the API server demands of a CRD schema: a type on every node, no false
    additionalProperties, no type-less anyOf."""

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        if "properties" in node or "items" in node or "additionalProperties" in node:
            assert "type" in node, path
        assert node.get("additionalProperties") is not False, path
        assert "anyOf" not in node and "$ref" not in node, path
        for key, child in node.get("properties", {}).items():
            assert "type" in child or child.get("x-kubernetes-preserve-unknown-fields"), f"{path}.{key}"
            walk(child, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            walk(node.get(key), f"{path}[{key}]")

    for crd in (crds.benchmarkrun_crd(), crds.benchmarkschedule_crd()):
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], crd["metadata"]["name"])


# ---------------------------------------------------------------- repository and branch: CRD vs controller

SHA = "0123456789abcdef0123456789abcdef01234567"
GOOD_RUN = {"commit": SHA, "repository": "https://github.com/example/trainer.git", "worldSize": 2}
FUZZ = settings(max_examples=200, deadline=None, derandomize=True)


def crd_spec_errors(spec: dict[str, Any]) -> list[str]:
    """What an API server with the shipped BenchmarkRun CRD says about `spec` (its pattern and length
    keywords; the committed file, as the chart installs it)."""
    (document,) = yaml.safe_load_all(
        (REPO / crds.DEFAULT_DIR / "benchmarkruns.benchgate.dev.yaml").read_text()
    )
    schema = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return [
        f"{'.'.join(map(str, e.path))}: {e.message}"
        for e in jsonschema.Draft4Validator(schema).iter_errors(spec)
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repository", "ssh://-oProxyCommand=x/r"),  # ssh would read the host as an option
        ("repository", "ssh://-oProxyCommand=x@host/r"),  # ... or the user
        ("repository", "git@-oProxyCommand=x:r"),
        ("repository", "https://-x/r"),
        ("repository", "ext::sh -c touch% /tmp/pwned"),
        ("branch", "a//b"),
        ("branch", "a/.b"),
        ("branch", "a..b"),
        ("branch", "-x"),
        ("branch", "a/"),
        ("branch", "a."),
        ("branch", "b" * (MAX_BRANCH_LENGTH + 1)),
    ],
)
def test_the_crd_refuses_repositories_and_branches_the_controller_refuses(field: str, value: str) -> None:
    spec = {**GOOD_RUN, field: value}
    errors = crd_spec_errors(spec)
    assert errors and all(e.startswith(f"{field}: ") for e in errors), errors
    # The controller, where the API server has no (or an old) CRD, refuses it too, naming field and value.
    with pytest.raises(ConfigError, match=re.escape(f"spec.{field}: got {value!r}")):
        parse_spec(BenchmarkRunSpec, spec)


@pytest.mark.parametrize("branch", ["HEAD", "x.lock/y", "release/v1.lock"])
def test_branches_no_schema_regex_can_refuse_are_refused_by_the_controller(branch: str) -> None:
    """Not 'HEAD' and no '.lock' component need a lookahead, which CRD patterns lack."""
    spec = {**GOOD_RUN, "branch": branch}
    assert crd_spec_errors(spec) == []
    with pytest.raises(ConfigError, match=re.escape(f"branch: got {branch!r}")):
        pipeline_arguments(
            parse_spec(BenchmarkRunSpec, spec), "http://mlflow.example", pipeline_parameter_names()
        )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repository", "https://github.com/example/trainer.git"),
        ("repository", "https://gitlab.example.com:8443/group/sub/repo"),
        ("repository", "ssh://git@git.example.com:22/org/repo.git"),
        ("repository", "git@github.com:org/repo.git"),
        ("repository", "file:///srv/git/repo"),
        ("branch", ""),
        ("branch", "main"),
        ("branch", "release/2.1"),
        ("branch", "user/fix-1_b"),
        ("branch", "a./b"),
        ("branch", "b" * MAX_BRANCH_LENGTH),
    ],
)
def test_the_crd_and_the_controller_accept_ordinary_repositories_and_branches(field: str, value: str) -> None:
    spec = {**GOOD_RUN, field: value}
    assert crd_spec_errors(spec) == []
    arguments = pipeline_arguments(
        parse_spec(BenchmarkRunSpec, spec), "http://mlflow.example", pipeline_parameter_names()
    )
    assert arguments.get(field, "") == value


FRAGMENTS = ["a", "Z", "0", "_", "-", ".", "/", "//", "..", ".lock", "HEAD", "@", ":", ":22", "~", "%"]
FRAGMENTS += ["https://", "ssh://", "file://", "git@", "-oProxyCommand=x", "host.example", "o/r.git", " "]
url_like = hyp.lists(hyp.sampled_from(FRAGMENTS), max_size=10).map("".join)


def refuses(validate: Any, value: str) -> str | None:
    try:
        validate(value)
    except ConfigError as e:
        return str(e)
    return None


@FUZZ
@given(value=url_like)
def test_the_crd_patterns_never_refuse_what_the_controller_accepts(value: str) -> None:
    if refuses(validate_branch, value) is None:
        assert re.fullmatch(BRANCH_PATTERN, value), value
    if refuses(validate_repository, value) is None:
        assert re.fullmatch(REPOSITORY_PATTERN, value), value


@FUZZ
@given(
    branch=hyp.from_regex(BRANCH_PATTERN, fullmatch=True),
    repository=hyp.from_regex(REPOSITORY_PATTERN, fullmatch=True),
)
def test_what_the_crd_patterns_accept_the_controller_accepts_but_for_the_documented_rules(
    branch: str, repository: str
) -> None:
    """The controller's own checks beyond the patterns: branch 'HEAD', a '.lock' component, the length
    (maxLength in the schema), and credentials in the repository URL."""
    if branch and branch != "HEAD" and not any(c.endswith(".lock") for c in branch.split("/")):
        assert len(branch) > MAX_BRANCH_LENGTH or refuses(validate_branch, branch) is None, branch
    refused = refuses(validate_repository, repository)
    assert refused is None or "credentials" in refused, refused
