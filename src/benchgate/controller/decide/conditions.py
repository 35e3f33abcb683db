"""What every status a handler writes gets besides what the handler decided: the conditions derived
from the rest of the status, and the generation each condition was set at. `written` computes both;
`handlers/runtime.apply_outcome` applies it to every `Outcome`, so a handler (or a new outcome) decides
only its own conditions and cannot forget these.

A BenchmarkRun's `Succeeded` and `Ready` follow its phase, so that `kubectl wait
--for=condition=Succeeded` ends on a pass and `--for=condition=Succeeded=False` on a failure, and tools
that read `Ready` (Flux, Argo CD, kstatus) see a failed gate as not ready:

    phase                        Succeeded                       Ready
    Pending, Submitted, Running  Unknown, reason: the phase      False, reason Progressing
    Succeeded                    True, reason GatePassed         True, reason GatePassed
    Failed, Canceled             False, the Finished reason      False, the Finished reason
                                 (Regression, RunFailed, KfpCanceled, DeadlineExceeded, InvalidSpec, ...)

A status that sets a phase also carries the top-level `observedGeneration`: the generation the run
was submitted at (an edit after it is not applied, and says so with `SpecApplied`, see
`spec_edits.spec_changed`). A condition is stamped with the object's generation when it is written
(not the submitted one): `kubectl wait` skips a condition observed at an older generation than the
object's. Pure: no kopf, no I/O, no clock (`now` is an argument).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from benchgate.controller.spec import status as st
from benchgate.controller.spec.status import BenchmarkRunStatus, BenchmarkScheduleStatus

# What an unfinished run's Succeeded condition says, per phase.
IN_PROGRESS: dict[str, str] = {
    st.PENDING: "not submitted yet: the Submitted condition says what it waits for",
    st.SUBMITTED: "the KFP run exists and has not started",
    st.RUNNING: "the KFP run is running",
}


def run_summary(
    phase: st.Phase, finished: Mapping[str, Any] | None, now: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Succeeded, Ready) for a BenchmarkRun in `phase`; `finished`: its Finished condition, if any,
    whose reason and message say why an ended run ended so."""
    if phase not in st.TERMINAL_PHASES:
        message = IN_PROGRESS[phase]
        return (
            st.condition("Succeeded", None, phase, message, now),
            st.condition("Ready", False, "Progressing", message, now),
        )
    reason = str((finished or {}).get("reason") or phase)
    message = str((finished or {}).get("message") or f"the run ended {phase}")
    passed = phase == st.SUCCEEDED
    return (
        st.condition("Succeeded", passed, reason, message, now),
        st.condition("Ready", passed, reason, message, now),
    )


def written(
    status: BenchmarkRunStatus | BenchmarkScheduleStatus,
    current: Mapping[str, Any],
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """The status patch for `status` on an object at metadata.generation `generation` whose status is
    `current`: a run's phase with its Succeeded, Ready and observedGeneration, and every condition
    written with the generation it was set at (one that names its own, e.g. SpecApplied, keeps it)."""
    patch = status.patch()
    if isinstance(status, BenchmarkRunStatus) and "phase" in patch:
        conditions = patch.get("conditions", current.get("conditions"))
        finished = next((c for c in conditions or [] if c.get("type") == "Finished"), None)
        summary = run_summary(patch["phase"], finished, now)
        patch["conditions"] = st.merge_conditions(conditions, *summary)
        patch.setdefault("observedGeneration", current.get("observedGeneration") or generation)
    if patch.get("conditions"):
        patch["conditions"] = [
            c if c.get("observedGeneration") is not None else {**c, "observedGeneration": generation}
            for c in patch["conditions"]
        ]
    # Through the model again: what is added here is held to it as what the handler decided is.
    return type(status).model_validate(patch).patch()
