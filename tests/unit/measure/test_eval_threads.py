"""The eval's thread count: 1 unless set, and never more than the usable CPUs (that eval.json says what ran,
on a real eval: tests/distributed/test_eval_thread_record.py).

On a 2-core host with one core kept busy, 2 threads ran the eval 2 to 26 times slower than 1 (each
parallel region waits for the descheduled thread); the count also changes the numbers, so it cannot
follow the machine (config.py, EvalConfig.threads).
"""

from __future__ import annotations

import pytest

from benchgate.config import EvalConfig
from benchgate.kit.cpus import CpuBudget, threads_within


@pytest.mark.parametrize(
    ("requested", "budget", "runs"),
    [
        (1, CpuBudget(affinity=96, quota=None), 1),
        (8, CpuBudget(affinity=96, quota=None), 8),
        (8, CpuBudget(affinity=2, quota=None), 2),  # a 2-core host or a taskset of 2
        (8, CpuBudget(affinity=96, quota=4.0), 4),  # a pod limited to 4 CPUs on a 96-core node
        (2, CpuBudget(affinity=96, quota=1.5), 1),  # two threads under 1.5 CPUs get throttled
        (4, CpuBudget(affinity=96, quota=0.5), 1),  # 500m: one thread is the least that runs
    ],
)
def test_threads_are_capped_at_the_usable_cpus(requested: int, budget: CpuBudget, runs: int) -> None:
    assert threads_within(requested, budget) == runs


def test_the_default_is_one_thread_on_every_machine() -> None:
    assert EvalConfig().threads == 1
    assert "Default 1 on every machine" in (EvalConfig.model_fields["threads"].description or "")
