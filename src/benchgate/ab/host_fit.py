"""Which world sizes an A/B can measure on a CPU host, and what the rows of those it cannot say.

On CPU an A/B side at ws=N is N ranks, each on its own cores. With fewer than `gate.ab.cores_per_rank`
x N usable cores (2 x N by default), nothing is left over for the rest of the host: any other process
(a second CI job, the OS, the runner's own log shipping) lands on a rank's core and stretches that
rank's steps, and through the collectives every rank's. The rounds then spread so widely that no
number of them decides: on a busy 2-core host an unchanged commit's ws=2 A/B ran 27 rounds with a
round-to-round sd of 29% and ended UNKNOWN after ten minutes, failing a CI job that changed only the
README. Such a world size is not A/B'd: its timing row is INFO (WARN where the screen said FAIL, so a
large slowdown stays visible), its note says why, and ws=1's A/B decides the timing question.

GPU runs are not limited here: a rank's work is on its device, and the A/B's layout (ab/layout.py)
decides how two sides share it.

Pure: plain numbers in, world sizes and comparison rows out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from benchgate.results.comparison import SCALING, TIMING, Check, Comparison

# A row the screen left undecided (or FAILed) and no A/B can decide here.
UNDECIDED = {"UNKNOWN", "FAIL"}


def cpu_ab_worlds(
    worlds: list[int], device_type: str, usable_cores: int | None, cores_per_rank: int
) -> tuple[list[int], dict[int, str]]:
    """The world sizes an A/B may decide on this host, and why each one left out was (ws -> reason).

    `usable_cores`: env.json `cpu.usable_cores` (the affinity mask under the cgroup quota); None
    (not recorded) keeps every world size, as before this rule."""
    if device_type == "cuda" or usable_cores is None or cores_per_rank <= 0:
        return list(worlds), {}
    kept, skipped = [], {}
    for ws in worlds:
        wanted = cores_per_rank * ws
        if ws > 1 and usable_cores < wanted:
            skipped[ws] = (
                f"an A/B at ws={ws} on CPU wants {cores_per_rank} x {ws} = {wanted} cores and this host "
                f"has {usable_cores}: anything else running lands on the ranks' cores, so its rounds "
                "cannot decide (gate.ab.cores_per_rank)"
            )
        else:
            kept.append(ws)
    return kept, skipped


def host_ab_worlds(
    worlds: list[int], env: dict[str, Any], cores_per_rank: int
) -> tuple[list[int], dict[int, str]]:
    """`cpu_ab_worlds` over a run's env.json: its device (CUDA where it captured GPUs) and usable cores."""
    device_type = "cuda" if (env.get("gpu") or {}).get("count") else "cpu"
    usable = (env.get("cpu") or {}).get("usable_cores")
    return cpu_ab_worlds(worlds, device_type, usable if isinstance(usable, int) else None, cores_per_rank)


def mark_not_measured(comparison: Comparison, skipped: dict[int, str]) -> Comparison:
    """The timing rows of `skipped` world sizes, and the scaling-efficiency row where it rests on one of
    them, with the reason in the row's note; an undecided one (UNKNOWN) becomes INFO, a screen FAIL
    WARN."""
    if not skipped:
        return comparison
    largest = max(skipped)
    checks = []
    for check in comparison.checks:
        if check.metric == TIMING and check.world_size in skipped:
            check = _not_measured(check, skipped[check.world_size])
        elif check.metric == SCALING and check.decided_by in ("screen", "") and check.status in UNDECIDED:
            check = _not_measured(check, skipped[largest])
        checks.append(check)
    return replace(comparison, checks=checks)


def _not_measured(check: Check, why: str) -> Check:
    # A row that needs no decision (NEW under --base, the baseline's own code) keeps its status: the
    # note says why no A/B ran all the same.
    status = check.status
    if status in UNDECIDED:
        status = "WARN" if check.status == "FAIL" else "INFO"
    screen = f"the screen said {check.status}" + ("" if check.change is None else f" ({check.change:+.1f}%)")
    note = f"not decided here: {why}; {screen}" + (f"; {check.note}" if check.note else "")
    return replace(check, status=status, note=note, decided_by="host")
