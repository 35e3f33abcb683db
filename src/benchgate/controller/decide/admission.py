"""The admin policy applied to a BenchmarkRun before its submission: whether a BenchmarkSchedule really
made the run, the refusal (an `Outcome`, Failed for good) or the submission as the policy lets it go
(`updateBaseline` perhaps lowered), with the `Admitted` condition that tells the user which.

A run's ownerReferences are not proof of anything: whoever may create a BenchmarkRun writes them. A
run counts as a schedule's when its owner's uid is a BenchmarkSchedule the controller knows (its kopf
index of schedules), in the run's namespace, and the run's spec is that schedule's template with a
commit, as `schedule.run_manifest` writes it. The commit itself is not checked: a user who may create
runs can still copy a template and name another commit of its repository (docs/kubernetes.md, "Admin
policy").

Pure: no kopf, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from benchgate.controller.access import GROUP, VERSION
from benchgate.controller.decide import planning as plan
from benchgate.controller.decide.admin_policy import Policy
from benchgate.controller.decide.planning import Outcome, Submission, View
from benchgate.controller.decide.policy_checks import check
from benchgate.controller.spec import status as st
from benchgate.controller.spec.resources import BenchmarkRunSpec, RunParameters, parse_spec
from benchgate.errors import ConfigError

# What the index of schedules holds per schedule uid: (namespace, runTemplate.spec as plain JSON).
ScheduleTemplate = tuple[str, Mapping[str, Any]]


def template_of(namespace: str, spec: View) -> ScheduleTemplate:
    """A schedule's entry in the index: its namespace and its run template's spec ({} when the schedule
    has none, or not an object: such a template matches no run)."""
    run_template = spec.get("runTemplate")
    template = run_template.get("spec") if isinstance(run_template, Mapping) else None
    return namespace, _plain(template) if isinstance(template, Mapping) else {}


def _plain(value: Any) -> Any:
    """A copy of kopf's read-only views as plain dicts and lists (the index outlives the event)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def schedule_owned(
    meta: View, namespace: str, spec: BenchmarkRunSpec, schedules: Mapping[str, Iterable[ScheduleTemplate]]
) -> bool:
    """Whether a BenchmarkSchedule made this run: an owner of its that is a known schedule of the same
    namespace, of which the run's spec is the template (plus a commit; the branch main when the template
    names none)."""
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") != "BenchmarkSchedule" or owner.get("apiVersion") != f"{GROUP}/{VERSION}":
            continue
        for schedule_namespace, template in schedules.get(str(owner.get("uid")), ()):
            if schedule_namespace == namespace and _made_from(template, spec):
                return True
    return False


def _made_from(template: Mapping[str, Any], spec: BenchmarkRunSpec) -> bool:
    try:
        parameters: RunParameters = parse_spec(RunParameters, dict(template))
    except ConfigError:  # a schedule with a bad template makes no runs
        return False
    expected = parameters.model_dump() | {"commit": spec.commit, "branch": parameters.branch or "main"}
    return expected == spec.model_dump()


@dataclass(frozen=True)
class Admitted:
    """A run the policy admits: its submission as the policy lets it go, and the run's status with the
    `Admitted` condition, which every later outcome of the submission is built from."""

    submission: Submission
    status: dict[str, Any]


def admit(
    submission: Submission, namespace: str, owned: bool, policy: Policy, status: View, now: datetime
) -> Admitted | Outcome:
    """The run under `policy` (`owned`: `schedule_owned`): admitted, with `update_baseline` lowered
    where it may not promote and its effective deadline in the first status (`past_deadline` reads it
    there), or refused (Failed with the condition and a Warning Event, not retried)."""
    admission = check(submission.spec, namespace, owned, policy)
    if not admission.admitted:
        first = admission.refusals[0]
        message = "; ".join(r.message for r in admission.refusals)
        noted = _noted(status, st.condition("Admitted", False, first.reason, message, now))
        return plan.refused(noted, first.reason, message, now, give_up=f"refused by the policy: {message}")
    if admission.lowered:
        condition = st.condition("Admitted", True, "PromotionDisabled", admission.lowered, now)
    else:
        condition = st.condition("Admitted", True, "PolicyAllowed", "the controller's policy admits it", now)
    arguments = submission.arguments
    # Lowered, it goes in even where the pipeline would not know it: KFP then refuses the run, rather
    # than promoting by the pipeline's default.
    if "update_baseline" in arguments or admission.lowered:
        arguments = {**arguments, "update_baseline": admission.update_baseline}
    opening = submission.status
    if admission.active_deadline_seconds is not None:
        opening = opening.model_copy(update={"active_deadline_seconds": admission.active_deadline_seconds})
    return Admitted(replace(submission, arguments=arguments, status=opening), _noted(status, condition))


def _noted(status: View, condition: dict[str, str]) -> dict[str, Any]:
    return {**status, "conditions": st.merge_conditions(status.get("conditions"), condition)}
