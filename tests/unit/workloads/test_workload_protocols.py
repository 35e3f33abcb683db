"""The workload protocol as types: every member benchgate looks up on a workload is declared in one of
benchgate.workloads.base's protocols, and the reference workloads satisfy the ones they implement."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol

import pytest

from benchgate.workloads.base import (
    SupportsEval,
    SupportsEvalSkipped,
    SupportsFlopsPerToken,
    SupportsMeshDims,
    SupportsParallelize,
    SupportsPeriodSteps,
    SupportsUnit,
    Workload,
    load_workload,
)
from benchgate.workloads.contract import REQUIRED_MEMBERS

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "benchgate"
OPTIONAL = (
    SupportsEval,
    SupportsEvalSkipped,
    SupportsFlopsPerToken,
    SupportsMeshDims,
    SupportsParallelize,
    SupportsPeriodSteps,
    SupportsUnit,
)


def members(protocol: type) -> set[str]:
    """The members a protocol declares, its bases' included: annotated attributes, methods, properties."""
    found: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, Protocol, Generic):
            continue
        found |= set(getattr(cls, "__annotations__", {}))
        found |= {name for name in vars(cls) if not name.startswith("_")}
    return found


def looked_up_by_name() -> set[str]:
    """The workload members benchgate's code reads with getattr/hasattr (the optional ones)."""
    lookup = re.compile(r"""(?:getattr|hasattr)\(\s*workload,\s*["']([A-Za-z_]+)["']""")
    return {m for path in PACKAGE.rglob("*.py") for m in lookup.findall(path.read_text(encoding="utf-8"))}


def test_the_required_members_are_the_workload_protocols() -> None:
    assert members(Workload) == set(REQUIRED_MEMBERS)


def test_every_member_looked_up_by_name_is_in_a_protocol() -> None:
    found = looked_up_by_name()
    assert {"parallelize", "mesh_dims", "period_steps", "logits", "eval_seq_len", "flops_per_token"} <= found
    declared = set().union(*(members(p) for p in OPTIONAL))
    assert found - declared == set(), f"looked up, but in no protocol: {sorted(found - declared)}"
    assert not declared & members(Workload), "an optional member is declared as required too"


@pytest.mark.parametrize(
    ("parallel", "implements"),
    [
        ("ddp", {SupportsEval, SupportsFlopsPerToken}),
        ("fsdp2", {SupportsEval, SupportsFlopsPerToken, SupportsParallelize}),
    ],
)
def test_the_reference_workload_implements_its_protocols(parallel: str, implements: set[type]) -> None:
    workload = load_workload("benchgate.workloads.gpt:make_workload", {"size": "tiny", "parallel": parallel})
    assert isinstance(workload, Workload)
    assert {p for p in OPTIONAL if isinstance(workload, p)} == implements


def test_mesh_dims_is_a_protocol_only_with_parallelize() -> None:
    class OnlyDims:
        mesh_dims: ClassVar[dict[str, int]] = {"dp": -1}

    class Both(OnlyDims):
        def parallelize(self, model: Any, mesh: Any) -> Any:
            return model

    assert not isinstance(OnlyDims(), SupportsMeshDims)
    assert isinstance(Both(), SupportsMeshDims) and isinstance(Both(), SupportsParallelize)
