"""The admin policy's bounds on where a run reports and what it may hold (policy_bounds.py): experiments,
the one tracking server, deadlines, accelerators and the GPU pods' requests; and the quantities they
compare."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from benchgate.controller.decide import admission
from benchgate.controller.decide import planning as plan
from benchgate.controller.decide.admin_policy import Policy, policy_from_json
from benchgate.controller.decide.planning import Submission
from benchgate.controller.decide.policy_checks import check
from benchgate.controller.decide.quantity import quantity
from benchgate.controller.spec.resources import BenchmarkRunSpec, parse_spec
from benchgate.errors import ConfigError
from benchgate.kfp.run_request import pipeline_parameter_names

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SHA = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "https://github.com/acme/trainer.git"
SUITE = {
    "name": "nightly",
    "entries": [
        {"name": "small", "workload": "benchgate.workloads.toy:build"},
        {"name": "large", "workload": "benchgate.workloads.toy:build", "config": {"tracking": {}}},
    ],
}


def spec(**fields: Any) -> BenchmarkRunSpec:
    parsed: BenchmarkRunSpec = parse_spec(
        BenchmarkRunSpec, {"commit": SHA, "repository": REPOSITORY, **fields}
    )
    return parsed


def messages(policy: Policy, namespace: str = "team-a", **fields: Any) -> list[tuple[str, str]]:
    return [(r.reason, r.message) for r in check(spec(**fields), namespace, False, policy).refusals]


def reasons(policy: Policy, namespace: str = "team-a", **fields: Any) -> list[str]:
    return [reason for reason, _ in messages(policy, namespace, **fields)]


def submission(**fields: Any) -> Submission:
    found = plan.submission(
        {"commit": SHA, "repository": REPOSITORY, **fields},
        {"generation": 1},
        {},
        "team-a",
        "pr-1",
        "uid-1",
        "",
        pipeline_parameter_names(),
        NOW,
    )
    assert isinstance(found, Submission)
    return found


# ---------------------------------------------------------------- experiments (item 4)


RECOMMENDED = Policy(experiments={"*": ("{namespace}", "{namespace}/*")})


@pytest.mark.parametrize(
    ("namespace", "experiment", "admitted"),
    [
        ("team-a", "team-a", True),
        ("team-a", "team-a/nightly", True),
        ("team-a", "team-b", False),  # another team's experiment
        ("team-a", "team-b/nightly", False),
        ("team-a", "team-ab", False),  # a prefix wildcard after '/', not a substring of the name
        ("team-a", "benchgate", False),  # the default experiment is shared: outside this policy
    ],
)
def test_experiments_are_bounded_per_namespace(namespace: str, experiment: str, admitted: bool) -> None:
    found = reasons(RECOMMENDED, namespace, mlflowExperiment=experiment)
    assert found == ([] if admitted else ["ExperimentNotAllowed"])


def test_a_namespace_key_adds_to_every_namespace_and_empty_allows_any() -> None:
    policy = Policy(experiments={"ml-infra": ("benchgate",), "*": ("{namespace}",)})
    assert reasons(policy, "ml-infra", mlflowExperiment="benchgate") == []
    assert reasons(policy, "team-a", mlflowExperiment="benchgate") == ["ExperimentNotAllowed"]
    assert reasons(Policy(), "team-a", mlflowExperiment="team-b") == []


def test_a_refused_experiment_names_the_field_and_value() -> None:
    ((reason, message),) = messages(RECOMMENDED, "team-a", mlflowExperiment="team-b")
    assert reason == "ExperimentNotAllowed"
    assert message.startswith("spec.mlflowExperiment: got 'team-b'") and "team-a/*" in message


def test_experiments_named_in_a_config_are_bounded_too() -> None:
    suite = {
        **SUITE,
        "entries": [{**e, "config": {"tracking": {"experiment": "team-b"}}} for e in SUITE["entries"]],
    }
    found = messages(
        RECOMMENDED,
        "team-a",
        mlflowExperiment="team-a",
        config={"tracking": {"experiment": "team-b"}},
        suite=suite,
    )
    assert [m.split(":")[0] for _, m in found] == [
        "spec.config.tracking.experiment",
        "spec.suite.entries[0].config.tracking.experiment",
        "spec.suite.entries[1].config.tracking.experiment",
    ]


# ---------------------------------------------------------------- the tracking server (item 5)


@pytest.mark.parametrize(
    "fields",
    [
        {"config": {"tracking": {"uri": "https://mlflow.evil.example"}}},
        {
            "suite": {
                **SUITE,
                "entries": [{**SUITE["entries"][0], "config": {"tracking": {"uri": "http://x"}}}],
            }
        },
    ],
)
def test_a_tracking_uri_in_a_spec_is_refused_under_every_policy(fields: dict[str, Any]) -> None:
    ((reason, message),) = messages(Policy(), **fields)
    assert reason == "TrackingUriNotAllowed"
    assert "tracking.uri: got 'http" in message and "mlflow.trackingUri" in message


def test_an_empty_tracking_uri_is_the_default_and_admitted() -> None:
    assert reasons(Policy(), config={"tracking": {"uri": ""}}) == []


def test_only_the_controller_sets_the_tracking_server_of_an_admitted_run() -> None:
    # Every spec field reaches the pipeline through pipeline_arguments: the tracking URI argument is the
    # controller's own (here none), and no config of an admitted spec names another server.
    admitted = admission.admit(
        submission(config={"tracking": {"experiment": "x"}}), "team-a", False, Policy(), {}, NOW
    )
    assert isinstance(admitted, admission.Admitted)
    arguments = admitted.submission.arguments
    assert arguments["mlflow_tracking_uri"] == ""
    assert "uri" not in arguments["config"]["tracking"]
    refused = admission.admit(
        submission(config={"tracking": {"uri": "https://mlflow.evil.example"}}),
        "team-a",
        False,
        Policy(),
        {},
        NOW,
    )
    assert isinstance(refused, plan.Outcome) and refused.warning is not None
    assert refused.warning[0] == "TrackingUriNotAllowed"


# ---------------------------------------------------------------- deadlines and resources (item 10)


def test_the_default_deadline_applies_to_a_run_that_sets_none() -> None:
    policy = Policy(default_active_deadline_seconds=21600, max_active_deadline_seconds=86400)
    assert check(spec(), "team-a", False, policy).active_deadline_seconds == 21600
    assert check(spec(activeDeadlineSeconds=600), "team-a", False, policy).active_deadline_seconds == 600
    assert check(spec(), "team-a", False, Policy()).active_deadline_seconds is None


def test_a_deadline_past_the_maximum_is_refused() -> None:
    policy = Policy(max_active_deadline_seconds=3600)
    ((reason, message),) = messages(policy, activeDeadlineSeconds=7200)
    assert reason == "DeadlineNotAllowed" and message.startswith("spec.activeDeadlineSeconds: got 7200")
    assert reasons(policy, activeDeadlineSeconds=3600) == []


def test_a_default_deadline_past_the_maximum_is_a_bad_policy() -> None:
    with pytest.raises(ConfigError, match="defaultActiveDeadlineSeconds: got 7200"):
        policy_from_json('{"defaultActiveDeadlineSeconds": 7200, "maxActiveDeadlineSeconds": 3600}')


def test_the_admitted_status_carries_the_deadline_the_timer_goes_by() -> None:
    policy = Policy(default_active_deadline_seconds=60)
    admitted = admission.admit(submission(), "team-a", False, policy, {}, NOW)
    assert isinstance(admitted, admission.Admitted)
    status = admitted.submission.status.patch()
    assert status["activeDeadlineSeconds"] == 60
    started = {**status, "startTime": (NOW - timedelta(seconds=61)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert plan.past_deadline({}, started, NOW)
    assert not plan.past_deadline({}, {**started, "activeDeadlineSeconds": None}, NOW)
    assert "activeDeadlineSeconds=60" in str(plan.deadline_exceeded({}, started, True, NOW).status)


def test_accelerator_types_are_an_allow_list() -> None:
    policy = Policy(accelerator_types=("nvidia.com/gpu",))
    assert reasons(policy) == []
    ((reason, message),) = messages(policy, acceleratorType="amd.com/gpu")
    assert reason == "AcceleratorNotAllowed" and message.startswith("spec.acceleratorType: got 'amd.com/gpu'")


@pytest.mark.parametrize(
    ("field", "asked", "bound", "admitted"),
    [
        ("cpuRequest", "16", "16", True),
        ("cpuRequest", "16500m", "16", False),  # compared by value, not as strings
        ("cpuRequest", "0.5", "500m", True),
        ("cpuRequest", "100", "16", False),  # "100" < "16" as strings
        ("memoryRequest", "1Gi", "1000Mi", False),
        ("memoryRequest", "64G", "64Gi", True),
        ("memoryRequest", "300Gi", "256Gi", False),
    ],
)
def test_gpu_pod_requests_are_bounded_numerically(field: str, asked: str, bound: str, admitted: bool) -> None:
    key = "max_cpu_request" if field == "cpuRequest" else "max_memory_request"
    policy = Policy.model_validate({key: bound})
    assert reasons(policy, **{field: asked}) == ([] if admitted else ["RequestNotAllowed"])


def test_a_maximum_that_is_no_quantity_is_a_bad_policy() -> None:
    with pytest.raises(ConfigError, match="maxMemoryRequest: got '32 GB'"):
        policy_from_json('{"maxMemoryRequest": "32 GB"}')


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("8", Decimal(8)),
        ("1.5", Decimal("1.5")),
        ("2Ki", Decimal(2048)),
        ("3G", Decimal(3 * 10**9)),
    ],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert quantity(text) == value


def test_a_bad_quantity_is_named() -> None:
    with pytest.raises(ValueError, match="'8 cores' is not a Kubernetes quantity"):
        quantity("8 cores")


@pytest.mark.parametrize("config", [{"mlflow_tracking_uri": "http://x"}, {"mlflow": {"uri": "http://x"}}])
def test_no_other_config_key_names_a_tracking_server(config: dict[str, Any]) -> None:
    found = plan.submission(
        {"commit": SHA, "repository": REPOSITORY, "config": config},
        {"generation": 1},
        {},
        "team-a",
        "pr-1",
        "uid-1",
        "",
        pipeline_parameter_names(),
        NOW,
    )
    assert isinstance(found, plan.Outcome) and found.warning is not None
    assert found.warning[0] == "InvalidSpec" and "Extra inputs are not permitted" in found.warning[1]
