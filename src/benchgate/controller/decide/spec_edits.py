"""Edits of a BenchmarkRun's spec after it was created: what the controller does with them and says.

The CRD's rule `self == oldSelf` refuses edits of typed fields on API servers that evaluate it; edits
inside the free-form `workloadArgs` and `config` pass it (CEL cannot see into them). A pure decision,
as in `planning`: the `immutable` handler applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from benchgate.controller.decide.planning import Outcome, View, waiting
from benchgate.controller.spec import status as st
from benchgate.controller.spec.status import BenchmarkRunStatus

SPEC_CHANGED = "SpecChangedAfterSubmit"


def spec_changed(spec: View, status: View, meta: View, now: datetime) -> Outcome:
    """The spec was edited after the run was created: inside workloadArgs or config, which the CRD's
    rule `self == oldSelf` cannot see (free-form fields), or on an API server that does not evaluate
    it. A run still waiting to be submitted is submitted with the edited spec (said as SpecApplied
    True). A submitted or finished one goes on as it was submitted: condition SpecApplied False and a
    warning Event, once per generation. observedGeneration moves to the new generation all the same
    (that edit was seen and answered): GitOps tools and `kubectl wait` wait for it to reach
    metadata.generation, and would wait forever; submittedGeneration keeps the one that runs."""
    generation = int(meta.get("generation") or 1)
    submitted = status.get("observedGeneration")
    if submitted is not None and generation <= int(submitted):
        return Outcome()  # the generation the run was submitted at: nothing was edited since
    applied: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "SpecApplied"), {}
    )
    if applied.get("observedGeneration") == generation:
        return Outcome()  # said already
    # Every condition still holds at the new generation: said so, or `kubectl wait --for=condition=...`
    # would ignore them (it skips a condition observed at an older generation than the object's).
    restamped = [{**c, "observedGeneration": generation} for c in status.get("conditions") or []]
    if waiting(status):
        message = f"generation {generation} is submitted once the run may be"
        condition = st.condition("SpecApplied", True, "NotSubmittedYet", message, now, generation)
        return Outcome(
            status=BenchmarkRunStatus(
                short_commit=str(spec.get("commit") or "")[:12],
                observed_generation=generation,
                conditions=st.merge_conditions(restamped, condition),
            )
        )
    runs = int(status.get("submittedGeneration") or submitted or 1)
    message = (
        f"the spec changed (generation {generation}) after the run was submitted (generation "
        f"{runs}); the change is not applied: create a new BenchmarkRun for it"
    )
    condition = st.condition("SpecApplied", False, SPEC_CHANGED, message, now, generation)
    return Outcome(
        status=BenchmarkRunStatus(
            conditions=st.merge_conditions(restamped, condition),
            observed_generation=generation,
            submitted_generation=runs,
        ),
        warning=(SPEC_CHANGED, message),
    )
