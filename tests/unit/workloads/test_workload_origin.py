"""A checked-out run loads only the repository's own workloads or benchgate's (workloads/origin.py):
`os:system` with `{command: ...}` in a BenchmarkRun for an allowed repository must never run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from repo_workloads import TINY_WORKLOAD

from benchgate.errors import EXIT_BAD_INPUT, WorkloadError
from benchgate.workloads.base import load_workload
from benchgate.workloads.origin import ROOT_ENV, check_origin, confine_to, confined_roots


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with one workload module, importable and set as the confinement root, as
    measure/source.use_source leaves a task."""
    root = tmp_path / "source"
    (root / "models").mkdir(parents=True)
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "tiny.py").write_text(TINY_WORKLOAD)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv(ROOT_ENV, str(root))
    return root


def test_the_repositorys_own_workload_and_benchgates_load(checkout: Path) -> None:
    assert load_workload("models.tiny:make_workload").name == "tiny"
    check_origin("benchgate.workloads.gpt:make_workload", [checkout])
    check_origin("benchgate.workloads.hf:make_workload", [checkout])


@pytest.mark.parametrize(
    "spec",
    [
        "os:system",  # the standard library, a file outside the checkout
        "subprocess:getoutput",
        "sys:exit",  # built into the interpreter: no file at all
        "torch.utils.cpp_extension:load_inline",  # an installed package
        "benchgate.cli.main:main",  # benchgate's, but not one of its workloads
        "benchgate:run_gate",
    ],
)
def test_a_function_from_outside_the_checkout_is_refused_naming_it(checkout: Path, spec: str) -> None:
    with pytest.raises(WorkloadError) as info:
        check_origin(spec, [checkout])
    message = str(info.value)
    assert message.startswith(f"bench.workload: got {spec!r}") and "not code of the repository" in message
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_os_system_never_runs_its_command(checkout: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(WorkloadError, match="'os:system'"):
        load_workload("os:system", {"command": f"touch {marker}"})
    assert not marker.exists()


def test_a_symlink_in_the_checkout_to_outside_code_is_outside(checkout: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "sneaky.py").write_text("import os\nrun = os.system\n")
    os.symlink(outside / "sneaky.py", checkout / "sneaky.py")
    with pytest.raises(WorkloadError, match="'sneaky:run'"):
        check_origin("sneaky:run", [checkout])


def test_without_a_checkout_any_module_loads_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    # A local `benchgate run` on the working tree: the user names what runs on their own machine.
    monkeypatch.delenv(ROOT_ENV, raising=False)
    with pytest.raises(WorkloadError, match="json:loads returned int"):  # imported and called: not refused
        load_workload("json:loads", {"s": "1"})


def test_an_ab_side_is_confined_to_its_own_checkout(checkout: Path, tmp_path: Path) -> None:
    # The base side of an A/B is another checkout of the repository (the base commit's): its bench
    # loads from there, and from nowhere else.
    base = tmp_path / "base-source"
    (base / "models").mkdir(parents=True)
    (base / "models" / "base_only.py").write_text(TINY_WORKLOAD)
    confine_to([str(base)])
    assert confined_roots() == [base]
    check_origin("models.base_only:make_workload", [base])
    with pytest.raises(WorkloadError, match=r"'models\.tiny:make_workload'"):
        check_origin("models.tiny:make_workload", confined_roots() or [])


def test_confine_to_changes_nothing_without_confinement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ROOT_ENV, raising=False)
    confine_to(["/somewhere"])
    assert confined_roots() is None
