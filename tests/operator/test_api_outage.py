"""The Kubernetes API failing for a while: the controller's timers outlast it.

kopf writes a timer's status after the handler returns, retrying a failing request on its
`error_backoffs` (its default: 8 retries, 54 s); a write that still fails ends the timer for that object
until the controller restarts (kopf does not catch it). The controller retries for about 15 minutes
(settings.API_RETRY_BACKOFFS_S); these tests shorten the delays, not their number, so an outage of more
attempts than kopf's default makes lasts a second, not a minute.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import TEST_CLIENT, Cluster, run_manifest

from benchgate.controller.settings import API_RETRY_BACKOFFS_S

# As many retries as the controller makes, 0.05 s apart.
SHORT_RETRIES = {"api_backoffs_s": (0.05,) * len(API_RETRY_BACKOFFS_S)}
# Failed attempts in a row: more than kopf's default retries (8, so 9 attempts) would survive.
OUTAGE = 15


def status_write_of(name: str) -> Any:
    def match(request: Any) -> bool:
        return (
            request.resource is not None
            and request.resource.plural == "benchmarkruns"
            and request.subresource == "status"
            and request.name == name
            and request.headers.get("User-Agent") != TEST_CLIENT["User-Agent"]
        )

    return match


def test_the_retries_outlast_an_api_server_down_for_minutes() -> None:
    assert len(API_RETRY_BACKOFFS_S) > OUTAGE
    assert sum(API_RETRY_BACKOFFS_S) >= 10 * 60


@pytest.mark.asyncio
@pytest.mark.parametrize("cluster", [SHORT_RETRIES], indirect=True)
async def test_a_run_ends_after_its_final_status_write_failed_longer_than_kopfs_retries(
    cluster: Cluster,
) -> None:
    await cluster.create(run_manifest("outage"))
    running = await cluster.phase("outage", "Running")
    # The API server answers 503 to every status write of the run, the follow timer's final one
    # (Succeeded) included, for longer than kopf's default retries last.
    fault = cluster.fail(status_write_of("outage"), 503, times=OUTAGE)
    cluster.kfp.force(running["kfpRunId"], "SUCCEEDED")
    await cluster.wait(lambda: fault.times == 0, what="the outage to pass")
    await cluster.phase("outage", "Succeeded")


@pytest.mark.asyncio
@pytest.mark.parametrize("cluster", [{**SHORT_RETRIES, "max_active_per_namespace": 1}], indirect=True)
async def test_a_queued_run_is_submitted_after_its_status_writes_failed_longer_than_kopfs_retries(
    cluster: Cluster,
) -> None:
    await cluster.create(run_manifest("first"))
    first = await cluster.phase("first", "Running")
    await cluster.create(run_manifest("second"))
    await cluster.phase("second", "Pending")
    # The dispatch timer's write of the submission fails through the outage; once it has passed the
    # run is followed (submitted once: the timer finds its KFP run by name when it writes again).
    fault = cluster.fail(status_write_of("second"), 503, times=OUTAGE)
    cluster.kfp.force(first["kfpRunId"], "SUCCEEDED")
    await cluster.wait(lambda: fault.times == 0, what="the outage to pass")
    await cluster.phase("second", "Running")
    assert cluster.kfp.calls("POST", "/runs") == 2
