"""Which commits MLflow already holds a gate run of, for one setup: what `benchgate backfill` skips.

A run counts for a commit when it measured the same thing a new run would, which is:

    the machine profile        tag benchgate.machine_profile: the hardware and the performance-relevant
                               software (torch, CUDA, NCCL), as the gate groups baselines by it
    the bench configuration    tag benchgate.fingerprint.config (measure/fingerprint.py): the workload
                               factory, its arguments, device, precision, threads per rank and seed,
                               everything of the settings that sets the speed of a step
    the world sizes            the run has figures (ws<N>/tokens_per_s_p50) for every world size the
                               backfill would run; a run of more world sizes covers fewer
    the commit                 tag mlflow.source.git.commit

and it is a FINISHED parent (benchgate.kind = gate). Not part of it, on purpose: steps and warmup (how
long a step is measured, not how fast it is: the screen compares runs of different lengths too), eval
and trace (other figures, not the timing), tolerances and the A/B budget (how a run is judged, not
measured), and the `benchgate` and `packages` fingerprints: the profile already holds torch, and
`history` reads one series across benchgate and package upgrades, so a backfill does too (a cluster's
image has other packages than the machine that submits, which could then never skip). Runs logged
before fingerprints existed carry no config fingerprint and never count: their settings are unknown.

Only reads: one search (paged) for the profile and fingerprint, the commits picked out here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from benchgate.results.figures import HistoryPoint
from benchgate.tracking.client import (
    TAG_COMMIT,
    TAG_FINGERPRINT,
    TAG_KIND,
    TAG_PROFILE,
    Tracker,
    quoted,
)
from benchgate.tracking.read import history_point

if TYPE_CHECKING:
    from mlflow.entities import Run

PAGE_SIZE = 1000
CONFIG_FINGERPRINT = "config"


@dataclass(frozen=True)
class Setup:
    """What a gate run measured, as far as telling "already measured" goes (see the module's docstring)."""

    profile: str
    config_fingerprint: str
    world_sizes: tuple[int, ...]

    def covers(self, figures: Collection[str]) -> bool:
        """Whether a run with these figure names measured every world size of the setup."""
        return all(f"ws{ws}/tokens_per_s_p50" in figures for ws in self.world_sizes)


def _search(tracker: Tracker, setup: Setup) -> Iterator[Run]:
    clauses = [
        f"tags.`{TAG_KIND}` = 'gate'",
        f"tags.`{TAG_PROFILE}` = '{quoted(setup.profile, 'machine profile')}'",
        f"tags.`{TAG_FINGERPRINT}{CONFIG_FINGERPRINT}` = "
        f"'{quoted(setup.config_fingerprint, 'config fingerprint')}'",
        "attributes.status = 'FINISHED'",
    ]
    token = None
    while True:
        page = tracker.client.search_runs(
            [tracker.experiment_id],
            filter_string=" and ".join(clauses),
            max_results=PAGE_SIZE,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        yield from page
        token = page.token
        if not token:
            return


def measured(tracker: Tracker, setup: Setup, commits: Collection[str]) -> dict[str, list[HistoryPoint]]:
    """The gate runs of `setup` for each of `commits` that has any, oldest first per commit."""
    wanted = set(commits)
    found: dict[str, list[HistoryPoint]] = {}
    for run in _search(tracker, setup):
        commit = run.data.tags.get(TAG_COMMIT, "")
        if commit in wanted and setup.covers(run.data.metrics):
            found.setdefault(commit, []).append(history_point(run))
    return found
