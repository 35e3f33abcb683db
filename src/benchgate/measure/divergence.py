"""A loss that stops being a number: where the bench's run diverged, as a record of the metrics.

A commit whose loss goes to inf or NaN at some step, where its baseline trains, is a regression of that
commit, not a failed run: the bench records the first non-finite loss (the step, the value, the rank)
in the metrics' `diverged` record and keeps only the losses before it, and the compare stage's loss row
FAILs naming the step (checks/loss.py). Exit 3 stays for runs that really failed (a rank raised, hung
or was killed).

The steps after the divergence still run, and are timed: the ranks of a launch and the two sides of an
A/B round keep their schedule of collectives and turns (stopping one rank or one side early would leave
the others waiting on it), and the metrics keep their full samples of step times. Only their losses are
dropped.

Steps are counted from 1 over the whole launch, warmup included (step 1 is the first warmup step), as a
training log counts them. Pure: lists of floats in, a dict out.
"""

from __future__ import annotations

import math
from typing import Any


def first_non_finite(per_rank: list[list[float]], warmup: int) -> dict[str, Any] | None:
    """The first step at which any rank's loss is not finite, or None where every loss is.

    `per_rank`: each rank's losses, warmup steps first, then the measured ones. The record names the step
    (from 1), its phase, the lowest rank with a non-finite loss at that step and the value as text
    ("inf", "-inf", "nan": JSON has no literal for them)."""
    steps = min((len(losses) for losses in per_rank), default=0)
    for index in range(steps):
        for rank, losses in enumerate(per_rank):
            value = float(losses[index])
            if not math.isfinite(value):
                return {
                    "step": index + 1,
                    "phase": "warmup" if index < warmup else "measured",
                    "rank": rank,
                    "value": repr(value),
                }
    return None


def finite_measured_steps(diverged: dict[str, Any] | None, warmup: int, measured: int) -> int:
    """How many measured steps have a loss to keep: all of them, or those before the divergence."""
    if diverged is None:
        return measured
    return max(0, min(measured, int(diverged["step"]) - 1 - warmup))
