"""The admin policy without kopf or a cluster: `policy` (what a spec may ask for, BENCHGATE_POLICY's
parsing) and `admission` (whether a schedule made a run, the refusal or the submission it gives)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.decide import admission
from benchgate.controller.decide import planning as plan
from benchgate.controller.decide.admin_policy import Policy, policy_from_json, under
from benchgate.controller.decide.planning import Outcome, Submission
from benchgate.controller.decide.policy_checks import check
from benchgate.controller.settings import settings_from_env
from benchgate.controller.spec.resources import BenchmarkRunSpec, Toleration, parse_spec
from benchgate.errors import ConfigError
from benchgate.kfp.run_request import pipeline_parameter_names

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SHA = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "https://github.com/acme/trainer.git"
GPU = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


def spec(**fields: Any) -> BenchmarkRunSpec:
    parsed: BenchmarkRunSpec = parse_spec(
        BenchmarkRunSpec, {"commit": SHA, "repository": REPOSITORY, **fields}
    )
    return parsed


def reasons(policy: Policy, namespace: str = "team-a", owned: bool = False, **fields: Any) -> list[str]:
    return [r.reason for r in check(spec(**fields), namespace, owned, policy).refusals]


def test_the_policy_needs_no_kopf() -> None:
    modules = (
        "benchgate.controller.decide.admin_policy, benchgate.controller.decide.admission, "
        "benchgate.controller.decide.policy_values"
    )
    code = f"import sys, {modules}; print('kopf' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# ---------------------------------------------------------------- repositories


ACME = Policy(repositories=("https://github.com/acme",))


@pytest.mark.parametrize(
    ("repository", "admitted"),
    [
        ("https://github.com/acme/trainer.git", True),
        ("https://github.com/acme", True),
        ("https://github.com/acme.git", True),  # the prefix itself, as a repository
        ("https://github.com/acme/", True),
        ("https://GitHub.COM/acme/trainer", True),  # hosts are case-insensitive
        ("https://github.com./acme/trainer", True),  # the same host, fully qualified
        ("https://github.com:443/acme/trainer", True),  # https's default port
        ("https://ci-bot@github.com/acme/trainer", True),  # a user does not choose the code
        ("https://github.com/acme-evil/trainer", False),  # a prefix is whole segments, never a substring
        ("https://github.com/acmecorp", False),
        ("https://github.com/ACME/trainer", False),  # paths are compared as written
        ("https://github.com:8443/acme/trainer", False),  # another port, another server
        ("https://github.com.evil.io/acme/trainer", False),
        ("https://github.com@evil.io/acme/trainer", False),  # the host is evil.io, the user github.com
        ("https://github.com/acme/../evil/trainer", False),  # curl would fetch /evil/trainer
        ("https://github.com/acme/%2e%2e/evil/trainer", False),
        ("https://github.com/acme/..%2Fevil", False),
        ("ssh://git@github.com/acme/trainer", False),  # another scheme: another origin
        ("git@github.com:acme/trainer.git", False),
    ],
)
def test_repositories_are_compared_by_origin_and_whole_segments(repository: str, admitted: bool) -> None:
    assert reasons(ACME, repository=repository) == ([] if admitted else ["RepositoryNotAllowed"])


@pytest.mark.parametrize(
    ("repository", "prefix", "admitted"),
    [
        ("git@github.com:acme/trainer.git", "git@github.com:acme/", True),
        ("git@GITHUB.com:acme/trainer.git", "git@github.com:acme", True),
        ("git@github.com:/acme/trainer", "git@github.com:acme", False),  # absolute, not in the home dir
        ("ssh://git@github.com:22/acme/x", "ssh://github.com/acme", True),
        ("ssh://git@github.com:2222/acme/x", "ssh://github.com/acme", False),
        ("file:///srv/git/acme/x", "file:///srv/git/", True),
        ("file:///srv/gitx/acme", "file:///srv/git", False),
        ("https://gitlab.example.com/a/b/c", "https://gitlab.example.com", True),  # a whole host
        ("https://gitlab.example.com/a/b/c", "https://gitlab.example.com/a/b/c.git", True),
    ],
)
def test_prefixes_of_every_url_form(repository: str, prefix: str, admitted: bool) -> None:
    assert under(repository, prefix) is admitted


def test_a_refused_repository_is_named_with_the_prefixes() -> None:
    (refusal,) = check(spec(repository="https://github.com/acme-evil/x"), "team-a", False, ACME).refusals
    assert refusal.message.startswith("spec.repository: got 'https://github.com/acme-evil/x'")
    assert "https://github.com/acme" in refusal.message


# ---------------------------------------------------------------- placement: node pools, tolerations


POOLS = Policy(node_selectors=({"pool": "a100"}, {"pool": "h100", "tier": "bench"}))


@pytest.mark.parametrize(
    ("selector", "admitted"),
    [
        ({"pool": "a100"}, True),
        ({"pool": "a100", "zone": "b"}, True),  # narrower than an allowed pool
        ({"pool": "h100", "tier": "bench"}, True),
        ({"pool": "h100"}, False),  # wider than the allowed h100 pool
        ({"pool": "cpu"}, False),
        ({}, False),  # anywhere the tolerations allow
    ],
)
def test_node_selectors_must_hold_an_allowed_pool(selector: dict[str, str], admitted: bool) -> None:
    assert reasons(POOLS, nodeSelector=selector) == ([] if admitted else ["NodePoolNotAllowed"])


TAINTS = Policy(tolerations=(GPU, Toleration(key="pool", operator="Equal", value="bench", effect="")))


@pytest.mark.parametrize(
    ("tolerations", "refused"),
    [
        (None, 0),  # the default: nvidia.com/gpu Exists NoSchedule
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], 0),
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "x", "effect": "NoSchedule"}], 0),
        ([{"key": "pool", "operator": "Equal", "value": "bench", "effect": "NoExecute"}], 0),
        ([], 0),
        ([{"key": "nvidia.com/gpu", "operator": "Exists"}], 1),  # every effect, NoExecute too
        ([{"key": "pool", "operator": "Exists"}], 1),  # every value of pool
        ([{"key": "pool", "operator": "Equal", "value": "prod"}], 1),
        ([{"operator": "Exists"}], 1),  # every taint of every node
        ([{"key": "dedicated", "operator": "Exists"}, {"operator": "Exists"}], 2),
    ],
)
def test_each_toleration_must_tolerate_no_more_than_an_allowed_one(
    tolerations: list[dict[str, str]] | None, refused: int
) -> None:
    fields = {} if tolerations is None else {"tolerations": tolerations}
    assert reasons(TAINTS, **fields) == ["TolerationNotAllowed"] * refused


def test_a_refused_toleration_is_named_by_its_index() -> None:
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"operator": "Exists"},
    ]
    (refusal,) = check(spec(tolerations=tolerations), "team-a", False, TAINTS).refusals
    assert refusal.message.startswith('spec.tolerations[1]: got {"operator": "Exists"}')


def test_every_taint_may_be_allowed() -> None:
    anything = Policy(tolerations=(Toleration(operator="Exists"),))
    assert reasons(anything, tolerations=[{"operator": "Exists"}, {"key": "x", "value": "y"}]) == []


# ---------------------------------------------------------------- PVCs per namespace


PVCS = Policy(pvcs={"team-a": ("bench-cache",), "*": ("shared-cache",)})


@pytest.mark.parametrize(
    ("namespace", "pvc", "admitted"),
    [
        ("team-a", "", True),  # no PVC at all
        ("team-a", "bench-cache", True),
        ("team-a", "shared-cache", True),
        ("team-b", "shared-cache", True),
        ("team-b", "bench-cache", False),  # team-a's PVC
        ("team-a", "kfp-artifacts", False),
    ],
)
def test_pvcs_are_allowed_per_namespace(namespace: str, pvc: str, admitted: bool) -> None:
    assert reasons(PVCS, namespace, baselinePvc=pvc) == ([] if admitted else ["PvcNotAllowed"])


def test_a_namespace_without_pvcs_mounts_none() -> None:
    (refusal,) = check(spec(baselinePvc="x"), "team-c", False, Policy(pvcs={"team-a": ("a",)})).refusals
    assert refusal.message == "spec.baselinePvc: got 'x' (runs of namespace team-c may mount none)"


# ---------------------------------------------------------------- promotion


@pytest.mark.parametrize(
    ("policy", "namespace", "owned", "asked", "refused", "goes_as"),
    [
        (Policy(), "team-a", False, "always", False, "always"),
        (Policy(), "team-a", False, "auto", False, "auto"),
        (Policy(promote_namespaces=("ml-infra",)), "ml-infra", False, "always", False, "always"),
        (Policy(promote_namespaces=("ml-infra",)), "team-a", False, "auto", False, "never"),
        (Policy(promote_namespaces=("ml-infra",)), "team-a", False, "always", True, "always"),
        (Policy(promote_namespaces=("ml-infra",)), "team-a", False, "never", False, "never"),
        (Policy(promote_namespaces=()), "team-a", True, "auto", False, "never"),  # nobody promotes
        (Policy(promote_schedule_owned_only=True), "team-a", True, "auto", False, "auto"),
        (Policy(promote_schedule_owned_only=True), "team-a", False, "auto", False, "never"),
        (Policy(promote_schedule_owned_only=True), "team-a", False, "always", True, "always"),
        # A schedule's run in a namespace that may not promote: the namespace decides.
        (
            Policy(promote_namespaces=("x",), promote_schedule_owned_only=True),
            "team-a",
            True,
            "auto",
            False,
            "never",
        ),
    ],
)
def test_promotion_is_lowered_or_refused_where_it_is_not_allowed(
    policy: Policy, namespace: str, owned: bool, asked: str, refused: bool, goes_as: str
) -> None:
    verdict = check(spec(updateBaseline=asked), namespace, owned, policy)
    assert [r.reason for r in verdict.refusals] == (["PromotionNotAllowed"] if refused else [])
    assert verdict.update_baseline == goes_as
    assert bool(verdict.lowered) == (asked == "auto" and goes_as == "never")


def test_the_promotion_refusal_names_the_field_and_the_rule() -> None:
    policy = Policy(promote_namespaces=("ml-infra",))
    (refusal,) = check(spec(updateBaseline="always"), "team-a", False, policy).refusals
    assert refusal.message.startswith("spec.updateBaseline: got 'always' (namespace team-a may not promote")
    lowered = check(spec(), "ml-infra", False, Policy(promote_schedule_owned_only=True)).lowered
    assert (
        lowered.startswith("spec.updateBaseline: auto runs as never")
        and "promoteScheduleOwnedOnly" in lowered
    )


# ---------------------------------------------------------------- GPUs per node


@pytest.mark.parametrize(
    ("max_gpus", "world_size", "admitted"), [(8, 8, True), (8, 16, False), (0, 1024, True), (4, 1, True)]
)
def test_a_world_size_must_fit_on_one_node(max_gpus: int, world_size: int, admitted: bool) -> None:
    policy = Policy(max_gpus_per_node=max_gpus)
    assert reasons(policy, worldSize=world_size) == ([] if admitted else ["WorldSizeExceedsNode"])


def test_the_world_size_refusal_says_multi_node_is_not_supported() -> None:
    (refusal,) = check(spec(worldSize=16), "team-a", False, Policy(max_gpus_per_node=8)).refusals
    assert refusal.message.startswith("spec.worldSize: got 16 (a world size must fit on one node")
    assert "maxGpusPerNode is 8" in refusal.message and "multi-node" in refusal.message


def test_the_empty_policy_admits_what_the_controller_did_without_one() -> None:
    everything = spec(
        repository="git@example.com:x/y.git",
        worldSize=1024,
        nodeSelector={"any": "pool"},
        tolerations=[{"operator": "Exists"}],
        baselinePvc="anything",
        updateBaseline="always",
    )
    assert check(everything, "team-a", False, Policy()) == check(
        everything, "team-a", False, policy_from_json("")
    )
    assert check(everything, "team-a", False, Policy()).admitted
    assert check(everything, "team-a", False, Policy()).update_baseline == "always"


def test_every_refusal_is_reported_at_once() -> None:
    strict = Policy(repositories=("https://github.com/acme",), max_gpus_per_node=8, pvcs={"*": ()})
    found = reasons(strict, repository="https://github.com/other/x", worldSize=16, baselinePvc="p")
    assert found == ["RepositoryNotAllowed", "PvcNotAllowed", "WorldSizeExceedsNode"]


# ---------------------------------------------------------------- workloads


@pytest.mark.parametrize(
    ("workload", "admitted"),
    [
        ("benchgate.workloads.gpt:make_workload", True),
        ("benchgate.workloads.hf:make_workload", True),
        ("models.gpt:make_workload", True),  # the repository's own module
        ("os:system", False),  # with workloadArgs {command: ...}: a shell command in every task
        ("subprocess:getoutput", False),
        ("importlib:import_module", False),
        ("benchgate.cli.main:main", False),  # benchgate, but not one of its workloads
    ],
)
def test_a_workload_must_be_the_repositorys_or_benchgates(workload: str, admitted: bool) -> None:
    # Under any policy, the empty one included: the repository allow-list means nothing otherwise.
    for policy in (Policy(), ACME):
        found = reasons(policy, workload=workload, workloadArgs={"command": "id"})
        assert found == ([] if admitted else ["WorkloadNotAllowed"]), (policy, workload)


def test_the_workload_refusal_names_the_field_the_value_and_why() -> None:
    (refusal,) = check(spec(workload="os:system"), "team-a", False, Policy()).refusals
    assert refusal.message.startswith("spec.workload: got 'os:system' ('os' is a standard-library module")


def test_each_suite_entrys_workload_is_checked() -> None:
    entries = [
        {"name": "fine", "workload": "benchgate.workloads.gpt:make_workload"},
        {"name": "shell", "workload": "subprocess:getoutput", "workloadArgs": {"cmd": "id"}},
    ]
    suite = spec(suite={"name": "models", "entries": entries})
    (refusal,) = check(suite, "team-a", False, Policy()).refusals
    assert refusal.reason == "WorkloadNotAllowed"
    assert refusal.message.startswith("spec.suite.entries[1].workload: got 'subprocess:getoutput'")


@pytest.mark.parametrize(
    ("workload", "admitted"),
    [
        ("models.gpt:make_workload", True),
        ("models:make_workload", True),
        ("modelsx.gpt:make_workload", False),  # whole dotted names, not text
        ("benchgate.workloads.gpt:make_workload", False),  # not listed
    ],
)
def test_workload_modules_narrows_to_the_listed_prefixes(workload: str, admitted: bool) -> None:
    policy = policy_from_json('{"workloadModules": ["models"]}')
    assert reasons(policy, workload=workload) == ([] if admitted else ["WorkloadNotAllowed"])


# ---------------------------------------------------------------- BENCHGATE_POLICY


def test_policy_from_json_reads_the_charts_keys() -> None:
    text = """{"repositories": ["https://github.com/acme/"], "nodeSelectors": [{"pool": "a100"}],
      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
      "pvcs": {"team-a": ["bench-cache"]}, "promoteNamespaces": ["ml-infra"],
      "promoteScheduleOwnedOnly": true, "maxGpusPerNode": 8}"""
    assert policy_from_json(text) == Policy(
        repositories=("https://github.com/acme/",),
        node_selectors=({"pool": "a100"},),
        tolerations=(GPU,),
        pvcs={"team-a": ("bench-cache",)},
        promote_namespaces=("ml-infra",),
        promote_schedule_owned_only=True,
        max_gpus_per_node=8,
    )
    assert policy_from_json("") == policy_from_json("{}") == Policy()
    assert (
        settings_from_env({"KFP_HOST": "http://kfp:8888", "BENCHGATE_POLICY": text}).policy.max_gpus_per_node
        == 8
    )


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{not json", "BENCHGATE_POLICY: got '{not json' (not JSON"),
        (
            '["https://github.com/acme"]',
            "BENCHGATE_POLICY: got ['https://github.com/acme'] (expected a JSON object",
        ),
        ('{"repos": []}', "BENCHGATE_POLICY.repos: got []"),
        (
            '{"repositories": "https://github.com/acme"}',
            "BENCHGATE_POLICY.repositories: got 'https://github.com/acme'",
        ),
        (
            '{"repositories": ["https://a/x", "ftp://b/y"]}',
            "BENCHGATE_POLICY.repositories.1: got 'ftp://b/y'",
        ),
        ('{"repositories": ["https://a/x/../y"]}', "BENCHGATE_POLICY.repositories.0: got 'https://a/x/../y'"),
        ('{"nodeSelectors": [{"pool": 1}]}', "BENCHGATE_POLICY.nodeSelectors.0.pool: got 1"),
        (
            '{"tolerations": [{"key": "a", "operator": "In"}]}',
            "BENCHGATE_POLICY.tolerations.0.operator: got 'In'",
        ),
        (
            '{"tolerations": [{"effect": "NoSchedule"}]}',
            "BENCHGATE_POLICY.tolerations.0: got {'effect': 'NoSchedule'}",
        ),
        ('{"pvcs": {"team-a": "cache"}}', "BENCHGATE_POLICY.pvcs.team-a: got 'cache'"),
        ('{"promoteScheduleOwnedOnly": "yes"}', "BENCHGATE_POLICY.promoteScheduleOwnedOnly: got 'yes'"),
        ('{"maxGpusPerNode": -1}', "BENCHGATE_POLICY.maxGpusPerNode: got -1"),
        ('{"maxGpusPerNode": "8"}', "BENCHGATE_POLICY.maxGpusPerNode: got '8'"),
        ('{"workloadModules": ["models/gpt"]}', "BENCHGATE_POLICY.workloadModules.0: got 'models/gpt'"),
    ],
)
def test_a_bad_policy_is_a_config_error_naming_the_key_and_value(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as raised:
        policy_from_json(text)
    assert str(raised.value).startswith(named), str(raised.value)


# ---------------------------------------------------------------- admission: schedule ownership


SCHEDULE_UID = "uid-schedule"
TEMPLATE = {"repository": REPOSITORY, "worldSize": 2, "updateBaseline": "auto"}


def owner(uid: str = SCHEDULE_UID, kind: str = "BenchmarkSchedule") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "name": "nightly", "uid": uid}


def schedules(namespace: str = "team-a", template: dict[str, Any] | None = None) -> dict[str, Any]:
    return {SCHEDULE_UID: [admission.template_of(namespace, {"runTemplate": {"spec": template or TEMPLATE}})]}


def owned(
    meta: dict[str, Any], namespace: str = "team-a", index: dict[str, Any] | None = None, **fields: Any
) -> bool:
    run = spec(**({"worldSize": 2, "branch": "main"} | fields))
    return admission.schedule_owned(meta, namespace, run, schedules() if index is None else index)


@pytest.mark.parametrize("spec", [{}, {"runTemplate": "x"}, {"runTemplate": {"spec": ["x"]}}])
def test_a_schedule_without_a_template_object_is_indexed_as_matching_nothing(spec: dict[str, Any]) -> None:
    entry = admission.template_of("team-a", spec)
    assert entry == ("team-a", {})
    assert not owned({"ownerReferences": [owner()]}, index={SCHEDULE_UID: [entry]})


def test_a_run_of_a_known_schedule_with_its_template_is_the_schedules() -> None:
    assert owned({"ownerReferences": [owner()]})
    # The schedule writes the branch main where the template names none.
    assert not owned({"ownerReferences": [owner()]}, branch="")


@pytest.mark.parametrize(
    ("meta", "namespace", "index", "fields"),
    [
        ({}, "team-a", None, {}),  # no owner
        ({"ownerReferences": [owner(uid="uid-unknown")]}, "team-a", None, {}),  # a uid no schedule has
        ({"ownerReferences": [owner(kind="Deployment")]}, "team-a", None, {}),
        ({"ownerReferences": [owner()]}, "team-b", None, {}),  # the schedule is in team-a
        ({"ownerReferences": [owner()]}, "team-a", None, {"worldSize": 4}),  # not the template
        ({"ownerReferences": [owner()]}, "team-a", None, {"repository": "https://github.com/acme/other"}),
        ({"ownerReferences": [owner()]}, "team-a", None, {"branch": "feature/x"}),
        ({"ownerReferences": [owner()]}, "team-a", None, {"updateBaseline": "always"}),
        ({"ownerReferences": [owner()]}, "team-a", {}, {}),  # the schedule is gone
        (
            {"ownerReferences": [owner()]},
            "team-a",
            schedules(template={"worldSize": "x"}),
            {},
        ),  # bad template
    ],
)
def test_an_owner_reference_alone_proves_nothing(
    meta: dict[str, Any], namespace: str, index: dict[str, Any] | None, fields: dict[str, Any]
) -> None:
    assert not owned(meta, namespace, index, **fields)


# ---------------------------------------------------------------- admission: the outcome


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


def conditions(status: Any) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_refused_run_fails_for_good_with_the_admitted_condition() -> None:
    earlier = {
        "conditions": [
            {
                "type": "Other",
                "status": "True",
                "reason": "X",
                "message": "",
                "lastTransitionTime": "2026-11-22T11:00:00Z",
            }
        ]
    }
    outcome = admission.admit(
        submission(worldSize=16), "team-a", False, Policy(max_gpus_per_node=8), earlier, NOW
    )
    assert isinstance(outcome, Outcome) and outcome.status is not None
    status = outcome.status.patch()
    assert status["phase"] == "Failed"
    found = conditions(status)
    assert found["Admitted"]["status"] == "False" and found["Admitted"]["reason"] == "WorldSizeExceedsNode"
    assert found["Finished"]["status"] == "True" and found["Submitted"]["reason"] == "WorldSizeExceedsNode"
    assert "Other" in found  # conditions of its own are kept
    assert outcome.warning is not None and outcome.warning[0] == "WorldSizeExceedsNode"
    assert outcome.give_up and "spec.worldSize: got 16" in outcome.give_up


def test_an_admitted_run_goes_with_the_lowered_update_baseline_and_says_so() -> None:
    policy = Policy(promote_namespaces=("ml-infra",))
    admitted = admission.admit(submission(), "team-a", False, policy, {}, NOW)
    assert isinstance(admitted, admission.Admitted)
    assert admitted.submission.arguments["update_baseline"] == "never"
    (condition,) = admitted.status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Admitted",
        "True",
        "PromotionDisabled",
    )
    # The outcomes after it are built from that status, so they carry the condition too.
    queued = plan.queued(admitted.status, "team-a", 1, NOW)
    assert queued.status is not None and "Admitted" in conditions(queued.status.patch())


def test_an_admitted_run_keeps_its_arguments_where_the_policy_allows_them() -> None:
    plain = submission(updateBaseline="always")
    admitted = admission.admit(plain, "team-a", False, Policy(), {}, NOW)
    assert isinstance(admitted, admission.Admitted)
    assert admitted.submission == plain
    assert conditions(admitted.status)["Admitted"]["reason"] == "PolicyAllowed"
