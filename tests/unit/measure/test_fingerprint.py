"""Fingerprints of what A/B holds fixed (benchgate.measure.fingerprint), on this real environment.

Nothing is mocked: the package digest is taken of the real installed distributions plus a real
dist-info directory put on sys.path, the benchgate digest of a real copy of the package imported in a
subprocess, and cross-process stability by real subprocesses under other hash seeds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import benchgate
from benchgate.config import RunConfig, parse_config
from benchgate.errors import BaselineError
from benchgate.kit.files import write_json
from benchgate.measure.fingerprint import (
    LOADED,
    NAMES,
    SETUP_CHANGED,
    capture_fingerprints,
    compared,
    describe,
    differing,
    fingerprint_details,
    loaded_distributions,
    of_run,
    record_loaded,
)
from benchgate.results.bundle import Bundle, load_bundle
from benchgate.tracking.record import _tags

HEX16 = re.compile(r"^[0-9a-f]{16}$")
BENCH: dict[str, Any] = {
    "workload": "benchgate.workloads.gpt:make_workload",
    "workload_args": {"n_layer": 2, "d_model": 64, "tied": True, "name": "tiny", "dropout": 0.5},
    "device": "cpu",
    "precision": "fp32",
    "threads_per_rank": 1,
    "seed": 7,
}


def config(**bench: Any) -> RunConfig:
    return parse_config({"bench": {**BENCH, **bench}})


# A capture in another interpreter: PYTHONPATH picks which benchgate it imports.
CAPTURE = (
    "import json, sys, benchgate\n"
    "from benchgate.config import parse_config\n"
    "from benchgate.measure.fingerprint import capture_fingerprints\n"
    "config = parse_config(json.loads(sys.argv[1]))\n"
    "print(json.dumps({'file': benchgate.__file__, 'fp': capture_fingerprints(config)}))\n"
)


def capture_in_subprocess(hash_seed: str, pythonpath: Path | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CAPTURE, json.dumps({"bench": BENCH})],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the imported benchgate package, in a directory for PYTHONPATH (fixed while it is read,
    whatever else edits the checkout meanwhile)."""
    root = tmp_path / "site"
    shutil.copytree(
        Path(benchgate.__file__).parent, root / "benchgate", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root


def add_dist(where: Path, dirname: str, metadata: str) -> None:
    info = where / dirname
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata, encoding="utf-8")


# ---------------------------------------------------------------- capture


def test_capture_is_repeatable_and_well_formed() -> None:
    first, second = capture_fingerprints(config()), capture_fingerprints(config())
    assert first == second
    assert list(first) == list(NAMES) == ["benchgate", "packages", "config"]
    assert all(HEX16.match(v) for v in first.values()), first
    assert len(set(first.values())) == 3  # three different things, three different digests


@pytest.mark.parametrize(
    "change",
    [
        {"threads_per_rank": 2},
        {"precision": "bf16"},
        {"device": "cuda"},
        {"seed": 8},
        {"workload": "bg_test_workloads:sleepy"},
        {"workload_args": {**BENCH["workload_args"], "n_layer": 3}},
        {"workload_args": {**BENCH["workload_args"], "dropout": 0.25}},
        {"workload_args": {k: v for k, v in BENCH["workload_args"].items() if k != "tied"}},
    ],
)
def test_a_speed_setting_changes_only_config(change: dict[str, Any]) -> None:
    before, after = capture_fingerprints(config()), capture_fingerprints(config(**change))
    assert differing(before, after) == ["config"]


@pytest.mark.parametrize(
    "change",
    [
        {"steps": 500},
        {"warmup": 0},
        {"world_sizes": [1]},
        {"world_sizes": [1, 8]},
        {"timeout_s": 5.0},
        {"run_timeout_s": 60.0},
        {"drift_reference": False},
        {"peak_tflops": 123.0},
    ],
)
def test_how_long_or_how_often_it_is_measured_changes_nothing(change: dict[str, Any]) -> None:
    assert capture_fingerprints(config(**change)) == capture_fingerprints(config())


def test_other_sections_change_nothing() -> None:
    other = parse_config({"bench": BENCH, "eval": {"enabled": False}, "gate": {"ab": {"max_rounds": 20}}})
    assert capture_fingerprints(other) == capture_fingerprints(config())


def test_workload_args_order_does_not_matter() -> None:
    reversed_args = dict(reversed(list(BENCH["workload_args"].items())))
    assert capture_fingerprints(config(workload_args=reversed_args)) == capture_fingerprints(config())


def test_digests_are_the_same_in_other_processes_and_hash_seeds(package_copy: Path) -> None:
    runs = [capture_in_subprocess(seed, package_copy) for seed in ("0", "12345")]
    assert all(Path(r["file"]).is_relative_to(package_copy) for r in runs), runs  # the copy was imported
    assert runs[0]["fp"] == runs[1]["fp"]
    # The config and the packages do not depend on which copy of the code runs: equal to this process's.
    here = capture_fingerprints(config())
    assert {k: runs[0]["fp"][k] for k in ("packages", "config")} == {
        k: here[k] for k in ("packages", "config")
    }


def test_a_change_to_a_bundled_workload_changes_benchgate(package_copy: Path) -> None:
    before = capture_in_subprocess("0", package_copy)["fp"]
    gpt = package_copy / "benchgate" / "workloads" / "gpt.py"
    gpt.write_text(gpt.read_text(encoding="utf-8") + "\n# slower now\n", encoding="utf-8")
    after = capture_in_subprocess("0", package_copy)["fp"]
    assert differing(before, after) == ["benchgate"]


def test_a_new_module_in_the_harness_changes_benchgate_and_one_outside_it_does_not(
    package_copy: Path,
) -> None:
    before = capture_in_subprocess("0", package_copy)["fp"]
    # The CLI, the report and the tracking code never run in the timed process.
    for outside in ("cli", "publish", "tracking"):
        (package_copy / "benchgate" / outside / "extra.py").write_text("X = 1\n", encoding="utf-8")
    (package_copy / "benchgate" / "extra.py").write_text("X = 1\n", encoding="utf-8")
    assert capture_in_subprocess("0", package_copy)["fp"] == before
    (package_copy / "benchgate" / "measure" / "extra.py").write_text("X = 1\n", encoding="utf-8")
    after = capture_in_subprocess("0", package_copy)["fp"]
    assert differing(before, after) == ["benchgate"]


def test_an_installed_distribution_changes_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = capture_fingerprints(config())
    site = tmp_path / "one"
    add_dist(site, "fake_dist-1.0.dist-info", "Metadata-Version: 2.1\nName: fake_dist\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(site))
    added = capture_fingerprints(config())
    assert differing(original, added) == ["packages"]
    assert int(fingerprint_details(config())["packages"]) >= 1

    # Another version of it is another set of packages.
    monkeypatch.undo()
    bumped_site = tmp_path / "two"
    add_dist(bumped_site, "fake_dist-1.1.dist-info", "Metadata-Version: 2.1\nName: fake_dist\nVersion: 1.1\n")
    monkeypatch.syspath_prepend(str(bumped_site))
    bumped = capture_fingerprints(config())
    assert differing(added, bumped) == ["packages"]
    assert differing(original, bumped) == ["packages"]

    # Removed again: back to the original.
    monkeypatch.undo()
    assert capture_fingerprints(config()) == original


def test_packages_normalises_names_keeps_the_first_and_skips_nameless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, later = tmp_path / "first", tmp_path / "later"
    add_dist(first, "fake_dist-1.0.dist-info", "Name: fake_dist\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(first))
    one = capture_fingerprints(config())
    count = fingerprint_details(config())["packages"]
    # The same distribution spelt otherwise, later on sys.path (imports never reach it), and a
    # half-removed install with no name: neither changes what is installed.
    add_dist(later, "Fake.Dist-2.0.dist-info", "Name: Fake.Dist\nVersion: 2.0\n")
    add_dist(later, "broken-0.dist-info", "Metadata-Version: 2.1\nVersion: 0\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(later)])
    assert capture_fingerprints(config()) == one
    assert fingerprint_details(config())["packages"] == count


def test_details_are_readable() -> None:
    details = fingerprint_details(config())
    assert details["benchgate_version"] == benchgate.__version__
    assert int(details["packages"]) > 10  # torch, pydantic, mlflow, ... are installed
    assert json.loads(details["config"]) == BENCH
    assert details["python"].endswith(".".join(map(str, sys.version_info[:2])) + f".{sys.version_info[2]}")


# ---------------------------------------------------------------- what the bench loaded

# Top-level import name -> distributions, as importlib.metadata.packages_distributions() returns it.
PROVIDERS = {
    "torch": ["torch"],
    "numpy": ["numpy"],
    "yaml": ["PyYAML"],
    "transformers": ["transformers"],
    "benchgate": ["benchgate"],
}
VERSIONS = {
    "torch": "2.5.1",
    "numpy": "2.1.3",
    "PyYAML": "6.0.2",
    "transformers": "4.46.0",
    "benchgate": "0.1",
}
PRINTS = {"benchgate": "a" * 16, "packages": "b" * 16, "config": "c" * 16}


def loaded_run(
    packages: list[str] | None, python: str = "CPython 3.11.7", installed: str = "b" * 16
) -> Bundle:
    """A run whose bench recorded `packages` as loaded (None: a run from before the record)."""
    metrics: dict[str, Any] = {"workload": "w"}
    if packages is not None:
        metrics[LOADED] = {"python": python, "packages": packages}
    env = {"machine_profile": "p", "fingerprints": {**PRINTS, "packages": installed}}
    return Bundle(Path("/runs/x"), env, {1: metrics, 2: dict(metrics)})


def test_the_loaded_digest_ignores_a_distribution_the_bench_never_imports() -> None:
    bench_imports = {"torch", "numpy", "yaml", "os", "benchgate", "bench_under_test"}
    loaded = loaded_distributions(bench_imports, PROVIDERS, VERSIONS.get)
    # Names normalised; the standard library, the code under test and benchgate itself left out.
    assert loaded == ["numpy==2.1.3", "pyyaml==6.0.2", "torch==2.5.1"]
    # transformers installed or not: the bench never imported it, so the same set and the same digest.
    without_hf = {k: v for k, v in PROVIDERS.items() if k != "transformers"}
    assert loaded_distributions(bench_imports, without_hf, VERSIONS.get) == loaded
    # The env stage's digest of everything installed differs; the loaded one, which compare uses, not.
    hf_installed, hf_absent = loaded_run(loaded, installed="1" * 16), loaded_run(loaded, installed="2" * 16)
    assert differing(hf_absent.env["fingerprints"], hf_installed.env["fingerprints"]) == ["packages"]
    assert differing(*compared(hf_absent, hf_installed)) == []
    # A workload that imports it: another set, another digest.
    with_hf = loaded_run(loaded_distributions({*bench_imports, "transformers"}, PROVIDERS, VERSIONS.get))
    assert differing(*compared(hf_absent, with_hf)) == ["packages"]
    # A bump of one it imports, or another interpreter, likewise.
    bumped = loaded_distributions(bench_imports, PROVIDERS, {**VERSIONS, "torch": "2.6.0"}.get)
    assert differing(*compared(hf_absent, loaded_run(bumped))) == ["packages"]
    assert differing(*compared(hf_absent, loaded_run(loaded, python="CPython 3.12.3"))) == ["packages"]


def test_the_loaded_digest_is_the_union_over_world_sizes_in_the_env_digest_format() -> None:
    run = loaded_run(["torch==2.5.1"])
    run.metrics[2][LOADED] = {"python": "CPython 3.11.7", "packages": ["numpy==2.1.3"]}
    both = loaded_run(["numpy==2.1.3", "torch==2.5.1"])
    assert of_run(run) == of_run(both)
    assert of_run(run)["packages"] != PRINTS["packages"]  # type: ignore[index]
    # One launch without the record: the run's loaded set is not known, env.json's digest stands.
    del run.metrics[2][LOADED]
    assert of_run(run) == PRINTS
    # Against a baseline from before the record, both sides compare env.json's digests.
    assert compared(loaded_run(None), both) == (PRINTS, PRINTS)


def test_record_loaded_names_what_this_process_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    add_dist(site, "fake_loaded-1.0.dist-info", "Metadata-Version: 2.1\nName: fake-loaded\nVersion: 1.0\n")
    (site / "fake_loaded-1.0.dist-info" / "top_level.txt").write_text("fake_loaded\n", encoding="utf-8")
    (site / "fake_loaded").mkdir()
    (site / "fake_loaded" / "__init__.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    before = record_loaded()
    assert before["python"] == fingerprint_details(config())["python"]
    assert "fake_loaded==1.0" not in before["packages"]  # installed, not imported
    assert any(p.startswith("pydantic==") for p in before["packages"])  # benchgate.config imports it
    assert not any(p.startswith("benchgate==") for p in before["packages"])
    monkeypatch.setitem(sys.modules, "fake_loaded", __import__("fake_loaded"))
    assert "fake_loaded==1.0" in record_loaded()["packages"]
    # Imported from the code under test (a source path): the checkout's, not the environment's.
    assert "fake_loaded==1.0" not in record_loaded([str(site)])["packages"]


# ---------------------------------------------------------------- differing, describe


def test_differing_names_changes_in_a_fixed_order() -> None:
    base = {"benchgate": "a", "packages": "b", "config": "c"}
    assert differing(base, dict(base)) == []
    assert differing(base, {"config": "x", "packages": "y", "benchgate": "z"}) == list(NAMES)
    assert differing(base, {**base, "packages": "y"}) == ["packages"]
    assert differing({**base, "zeta": "1", "alpha": "1"}, {**base, "zeta": "2", "alpha": "2"}) == [
        "alpha",
        "zeta",
    ]


@pytest.mark.parametrize(
    ("baseline", "current"),
    [
        (None, {"benchgate": "a"}),
        ({"benchgate": "a"}, None),
        (None, None),
        ({}, {"benchgate": "a"}),
        ({"benchgate": "a"}, {}),
        ({"benchgate": "a"}, {"packages": "b"}),  # no name on both sides
    ],
)
def test_unknown_is_not_different(baseline: dict[str, str] | None, current: dict[str, str] | None) -> None:
    assert differing(baseline, current) == []


def test_a_name_one_side_lacks_is_not_different() -> None:
    assert differing(
        {"benchgate": "a", "packages": "b"}, {"benchgate": "a", "packages": "c", "config": "d"}
    ) == ["packages"]


def test_describe_names_each_fingerprint_in_plain_words() -> None:
    assert describe([]) == ""
    one = describe(["packages"])
    assert (
        one == f"{SETUP_CHANGED}: the baseline run had other packages loaded by the bench (or another Python)"
    )
    everything = describe(list(NAMES))
    assert "benchgate" in everything
    assert "packages loaded by the bench" in everything
    for word in ("workload", "arguments", "device", "precision", "threads", "seed"):
        assert word in everything
    assert " and another bench configuration" in everything
    assert "another zeta fingerprint" in describe(["zeta"])


# ---------------------------------------------------------------- where they are recorded


ENV = {"machine_profile": "cpu-test-x2_torch2.13.0", "git": {"commit": "abc"}}
RECORD = {"run_key": "key-1"}


def test_mlflow_tags_carry_each_fingerprint() -> None:
    fingerprints = capture_fingerprints(config())
    tags = _tags({**ENV, "fingerprints": fingerprints}, "gpt-tiny", RECORD)
    assert {k: v for k, v in tags.items() if k.startswith("benchgate.fingerprint.")} == {
        f"benchgate.fingerprint.{name}": value for name, value in fingerprints.items()
    }
    assert tags["benchgate.run_key"] == "key-1"  # the other tags are still there


def test_mlflow_tags_of_a_run_without_fingerprints() -> None:
    tags = _tags(dict(ENV), "gpt-tiny", RECORD)
    assert not [k for k in tags if k.startswith("benchgate.fingerprint.")]
    assert tags["benchgate.machine_profile"] == ENV["machine_profile"]


def write_bundle(directory: Path, env: dict[str, Any]) -> Path:
    write_json(directory / "env.json", env)
    write_json(
        directory / "metrics-ws1.json",
        {
            "schema_version": 1,
            "machine_profile": env["machine_profile"],
            "workload": "gpt-tiny",
            "world_size": 1,
            "precision": "fp32",
            "tokens_per_step_global": 1024,
            "samples": {"step_time_s": [0.1, 0.11], "tokens_per_s": [10240.0, 9309.0], "loss": [3.0, 2.9]},
            "memory": {"peak_bytes": 1e6},
        },
    )
    return directory


def test_a_bundle_with_fingerprints_loads_them(tmp_path: Path) -> None:
    fingerprints = capture_fingerprints(config())
    bundle = load_bundle(write_bundle(tmp_path, {**ENV, "fingerprints": fingerprints}))
    assert bundle.env["fingerprints"] == fingerprints
    older = load_bundle(write_bundle(tmp_path / "older", dict(ENV)))
    assert "fingerprints" not in older.env
    assert differing(older.env.get("fingerprints"), bundle.env["fingerprints"]) == []


def test_a_bundle_with_damaged_fingerprints_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="fingerprints"):
        load_bundle(write_bundle(tmp_path, {**ENV, "fingerprints": {"packages": 12}}))
