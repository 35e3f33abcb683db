"""`benchgate release-finalizers`: remove benchgate's finalizer from every BenchmarkRun and
BenchmarkSchedule, so that nothing waits for a controller that is gone. The chart's pre-delete hook
runs it at `helm uninstall`; by hand, after losing the controller for good.

Thin as `cli`: parse, call `benchgate.controller.handlers.finalizer.release`, map errors.
"""

from __future__ import annotations

from typing import Annotated

import typer

from benchgate.cli.terminal import OK, console, exit_codes
from benchgate.cli.terminal import fail as _fail
from benchgate.errors import EXIT_RUN_FAILED, RunFailedError

RELEASE_CODES = exit_codes(
    (OK[0], "every object is released (or none was held)"),
    (EXIT_RUN_FAILED, "the Kubernetes API refused or failed a list or a patch (its answer printed)"),
)


def release_finalizers(
    namespace: Annotated[
        str,
        typer.Option(metavar="NAMESPACE", help="Only this namespace's objects (default: every namespace)."),
    ] = "",
    server: Annotated[
        str,
        typer.Option(
            metavar="URL",
            help="The Kubernetes API server (default: in-cluster, else the kubeconfig's).",
        ),
    ] = "",
) -> None:
    """Remove benchgate's finalizer (benchgate.dev/kfp-run, and kopf's default name an older release
    wrote) from every BenchmarkRun and BenchmarkSchedule; every other finalizer stays. A run still
    going in KFP is not terminated: delete it while a controller runs for that."""
    from kubernetes.client.exceptions import ApiException

    from benchgate.controller.clients import KubeRuns
    from benchgate.controller.handlers.finalizer import release

    try:
        count = release(KubeRuns(server or None).api, namespace or None, say=console.print)
    except ApiException as e:
        _fail(RunFailedError(f"Kubernetes API: HTTP {e.status}: {e.reason}"))
    console.print(f"released {count} object(s)")
