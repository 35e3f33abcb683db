"""Where kopf keeps its own records on our objects: in `status.kopf`, written by the same `/status`
request as the handlers' status.

kopf writes an object in two requests when its resource has a status subresource: the object's
metadata first, then `/status`. By default its record that an object's creation was handled (the
"diff base", the spec it last handled) is an annotation, so it goes in the first request while our
`kfpRunId` goes in the second: lose the second (an API server error, the controller killed between
them) and kopf holds the run for submitted while its status names no KFP run. Kept in the status, the
record is written with the status or not at all, and a run whose write was lost is handled as new
again (the submission attaches to its KFP run). Handler progress (retries of a handler that failed)
goes there too, for the same reason.

Objects an older controller handled carry the record as an annotation only: it is still read, after
the status (never written), so they resume as handled runs instead of being created anew. The CRDs
keep unknown status fields, so the API server does not prune `status.kopf`.

Between its write and the watch event that shows it, the record is also held in memory. The
submission's claim is written while the create handler runs, so its watch event reaches kopf after
the handler's status write yet shows the object before it: without the record, kopf took the run for
new again, ran the create handler a second time and wrote the record once more (one more status
write and watch event per run, under a burst of 50 runs a quarter more on the p99 submit). The memory
answers only while the status holds no record, for at most `UNSEEN_HOLD_S` (a watch event is late by
milliseconds, not a minute), and forgets a run once its status shows one; after a restart it is empty,
and a run whose status write was lost is handled as new again, as above.
"""

from __future__ import annotations

import time
from typing import Any

import kopf

from benchgate.controller.decide import fencing

KOPF_FIELD = "status.kopf"
UNSEEN_HOLD_S = 60.0


class StatusDiffBase(kopf.MultiDiffBaseStorage):
    """kopf's record of the handled spec in `status.kopf.last-handled-configuration`; the annotation
    of older controllers read when the status has none, never written."""

    def __init__(self) -> None:
        # The submission claim is no change of the run: without this, its write would be a change of
        # the essence, and kopf would record a new diff base (one more status write per submission).
        # The annotations' storage, after this one, drops the annotations map left empty.
        self.status = kopf.StatusDiffBaseStorage(
            field=f"{KOPF_FIELD}.last-handled-configuration",
            ignored_fields=[("metadata", "annotations", fencing.CLAIM)],
        )
        super().__init__([self.status, kopf.AnnotationsDiffBaseStorage()])

        # uid -> (when, the record written), until a watch event shows it in the status
        self.unseen: dict[str, tuple[float, Any]] = {}

    def fetch(self, *, body: Any) -> Any:
        uid = body.get("metadata", {}).get("uid")
        found = super().fetch(body=body)
        if found is not None:
            self.unseen.pop(uid, None)
            return found
        when, essence = self.unseen.get(uid, (0.0, None))
        return essence if time.monotonic() - when <= UNSEEN_HOLD_S else None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        self.status.store(body=body, patch=patch, essence=essence)
        now = time.monotonic()
        # Runs deleted before their status was seen are forgotten here, so the memory stays small.
        self.unseen = {u: e for u, e in self.unseen.items() if now - e[0] <= UNSEEN_HOLD_S}
        uid = body.get("metadata", {}).get("uid")
        if uid:
            self.unseen[uid] = (now, essence)


def keep_records_in_status(settings: kopf.OperatorSettings) -> None:
    """Keep kopf's diff base and handler progress in `status.kopf` (see the module's docstring)."""
    settings.persistence.diffbase_storage = StatusDiffBase()
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field=f"{KOPF_FIELD}.progress")
