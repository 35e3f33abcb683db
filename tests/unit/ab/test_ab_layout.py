"""The A/B layout (ab/layout.py, ab/runner.py): which layout `auto` picks and why, from env.json and
metrics dicts built by the code that writes them (measure/env.py's gpu section, measure/device.identity
answering through the fake pynvml from the recorded H200, measure/steps.py's memory block), what a
resume keeps, the launch order of sequential rounds, and the A/B row's note."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import use_fake_nvml
from harness import REPO, TESTS_DIR, make_config

from benchgate.ab.decision import decide
from benchgate.ab.layout import GIB, Layout, choose_layout, device_room, layout_for, peak_reserved_bytes
from benchgate.ab.round_plan import sequential_order
from benchgate.ab.rows import apply_ab
from benchgate.ab.runner import AB_FILE, ABOutcome, Side, ab_layout, resumed_layout
from benchgate.config import ABConfig, Tolerances
from benchgate.errors import BadInputError
from benchgate.kit.files import read_json, write_json
from benchgate.measure.device import identity
from benchgate.measure.env import capture_environment, gpu_section, machine_profile
from benchgate.measure.launch import metrics_path
from benchgate.measure.steps import memory_block
from benchgate.results.comparison import Comparison

RECORDING = TESTS_DIR / "data" / "nvml-h200.json"
# NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, as nvmlDeviceGetComputeMode answers it.
EXCLUSIVE_PROCESS = 3
# What torch's device properties said on the recorded H200 (less than NVML's total: the driver keeps
# some), and its SM count (benchmarks/gpu_check.py S0, docs/benchmarks.md "GPU").
TORCH_TOTAL_H200 = 150109880320
H200_SMS = 132


@pytest.fixture(scope="module")
def host_env() -> dict[str, Any]:
    """This host's env.json as the env stage writes it (a CPU host: no gpu devices, no nvml)."""
    return capture_environment(REPO)


def gpu_env(
    host_env: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    gpus: int = 1,
    free_gib: float | None = None,
    compute_mode: int | None = None,
    nvml: bool = True,
) -> dict[str, Any]:
    """env.json of a host with `gpus` H200s: this host's, with the gpu and torch sections a GPU host's
    capture_environment writes, and gpu.nvml from measure/device.identity() answering from the recorded
    H200 (free memory and compute mode changed where given; `nvml` False: a host without the driver)."""
    recording = read_json(RECORDING)
    device = recording["devices"][0]
    memory = device["nvmlDeviceGetMemoryInfo"]
    if free_gib is not None:
        memory["free"] = round(free_gib * GIB)
        memory["used"] = memory["total"] - memory["free"]
    if compute_mode is not None:
        device["nvmlDeviceGetComputeMode"] = compute_mode
    hooks = {
        "FAKE_NVML_DATA": str(write_json(tmp_path / "nvml.json", recording)),
        "FAKE_NVML_GPUS": str(gpus),
    }
    use_fake_nvml(monkeypatch, **hooks, **({} if nvml else {"FAKE_NVML_NO_DRIVER": "1"}))
    env = copy.deepcopy(host_env)
    env["torch"].update(version="2.11.0+cu130", cuda="13.0", cudnn=91900, nccl="2.28.9")
    devices = [{"name": "NVIDIA H200", "memory_bytes": TORCH_TOTAL_H200, "sms": H200_SMS}] * gpus
    env["gpu"] = gpu_section(devices, recording["system"]["nvmlSystemGetDriverVersion"], gpus)
    env["gpu"]["nvml"] = identity()
    env["machine_profile"] = machine_profile(env)
    return env


def gpu_metrics(
    reserved_gib: float, warmup_reserved_gib: float | None = None, ranks: int = 1
) -> dict[str, Any]:
    """A CUDA bench's metrics as far as the layout reads them: its memory block, by measure/steps.py."""

    def phase(gib: float) -> dict[str, int]:
        return {"allocated": round(0.8 * gib * GIB), "reserved": round(gib * GIB)}

    warm = reserved_gib if warmup_reserved_gib is None else warmup_reserved_gib
    gathered = [
        {"rss": 3 * GIB, "cuda_memory": {"warmup": phase(warm), "measured": phase(reserved_gib - 0.5 * r)}}
        for r in range(ranks)
    ]
    return {"world_size": ranks, "device": "NVIDIA H200", "memory": memory_block("cuda", gathered)}


CPU_METRICS = {"world_size": 1, "device": "cpu", "memory": memory_block("cpu", [{"rss": 400 * 2**20}])}


def test_the_fixture_env_is_a_gpu_hosts(
    host_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = gpu_env(host_env, monkeypatch, tmp_path)
    assert env["machine_profile"] == "H200x1_drv580_cu13.0_torch2.11.0_nccl2.28"  # as on the H200 itself
    nvml = env["gpu"]["nvml"]
    assert nvml["available"] and nvml["gpus"][0]["compute_mode"] == "default"
    assert nvml["gpus"][0]["memory_total_bytes"] == 150754820096


@pytest.mark.parametrize(
    ("peak_gib", "free_gib", "mode", "expected"),
    [
        (
            30.0,
            79.1,
            "default",
            ("interleaved", "2 x (30.0 GiB peak reserved + 1.0 GiB per process) ≤ 79.1 GiB free"),
        ),
        (
            61.2,
            79.1,
            "default",
            ("sequential", "2 x (61.2 GiB peak reserved + 1.0 GiB per process) > 79.1 GiB free"),
        ),
        (
            39.0,
            80.0,
            "default",
            ("interleaved", "2 x (39.0 GiB peak reserved + 1.0 GiB per process) ≤ 80.0 GiB free"),
        ),  # just fits
        (1.0, 79.1, "exclusive_process", ("sequential", "GPU in exclusive-process compute mode")),
        (None, 79.1, "default", ("sequential", "the bench's peak reserved memory is unknown")),
        (30.0, None, None, ("sequential", "the GPU's free memory is unknown")),
    ],
)
def test_auto_on_cuda_is_sequential_where_two_sides_do_not_fit(
    peak_gib: float | None, free_gib: float | None, mode: str | None, expected: tuple[str, str]
) -> None:
    peak = None if peak_gib is None else round(peak_gib * GIB)
    free = None if free_gib is None else round(free_gib * GIB)
    layout = choose_layout("auto", "cuda", peak, free, mode)
    assert (layout.name, layout.why) == expected


def test_auto_on_cpu_is_interleaved_and_a_set_layout_is_kept() -> None:
    # On CPU nothing about memory matters, however little of it there is.
    assert choose_layout("auto", "cpu", 90 * GIB, GIB, None) == Layout("interleaved", "auto on CPU")
    for device_type in ("cpu", "cuda"):
        for name in ("interleaved", "sequential"):
            assert choose_layout(name, device_type, 61 * GIB, GIB, "exclusive_process") == Layout(
                name, f"gate.ab.layout = {name}"
            )
    with pytest.raises(BadInputError, match=r"gate\.ab\.layout: got 'side-by-side'; expected one of auto"):
        choose_layout("side-by-side", "cuda", None, None, None)


def test_the_note_names_the_layout_and_why() -> None:
    layout = choose_layout("auto", "cuda", round(61.2 * GIB), round(79.1 * GIB), "default")
    assert (
        layout.note()
        == "sequential layout: one side at a time "
        "(2 x (61.2 GiB peak reserved + 1.0 GiB per process) > 79.1 GiB free)"
    )
    assert Layout("interleaved", "auto on CPU").note() == (
        "interleaved layout: both sides alive, taking turns (auto on CPU)"
    )


def test_layout_from_a_gpu_hosts_env_and_metrics(
    host_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = gpu_env(host_env, monkeypatch, tmp_path, free_gib=79.1)
    assert device_room(env, 1).free_bytes == round(79.1 * GIB)
    big, small = gpu_metrics(61.2), gpu_metrics(20.0)
    assert peak_reserved_bytes(big, 1) == round(61.2 * GIB)
    assert (
        layout_for("auto", "cuda", 1, env, big).why
        == "2 x (61.2 GiB peak reserved + 1.0 GiB per process) > 79.1 GiB free"
    )
    assert layout_for("auto", "cuda", 1, env, small).name == "interleaved"
    # The warmup's peak counts where it is the larger (interleaved sides warm up together too).
    compiled = gpu_metrics(20.0, warmup_reserved_gib=45.0)
    assert peak_reserved_bytes(compiled, 1) == round(45.0 * GIB)
    assert layout_for("auto", "cuda", 1, env, compiled).name == "sequential"
    # A CPU run's metrics hold no CUDA peak: on CUDA that is an unknown peak, and sequential fits anyway.
    assert peak_reserved_bytes(CPU_METRICS, 1) is None
    assert layout_for("auto", "cuda", 1, env, CPU_METRICS) == Layout(
        "sequential",
        "peak reserved memory at ws=1 unknown: its metrics hold no memory.cuda_max_reserved_bytes",
    )
    assert layout_for("auto", "cuda", 1, env, None).why == "peak reserved memory at ws=1 unknown: no metrics"


def test_the_largest_rank_and_the_least_free_gpu_decide_at_ws_2(
    host_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = gpu_env(host_env, monkeypatch, tmp_path, gpus=2, free_gib=79.1)
    env["gpu"]["nvml"]["gpus"][1]["memory_free_bytes"] = round(50.0 * GIB)  # a neighbour holds GPU 1
    metrics = gpu_metrics(30.0, ranks=2)  # rank 0 reserved 30 GiB, rank 1 29.5
    assert peak_reserved_bytes(metrics, 2) == round(30.0 * GIB)
    assert (
        layout_for("auto", "cuda", 2, env, metrics).why
        == "2 x (30.0 GiB peak reserved + 1.0 GiB per process) > 50.0 GiB free"
    )
    # At ws=1 only GPU 0 is used.
    assert layout_for("auto", "cuda", 1, env, gpu_metrics(30.0)).name == "interleaved"


def test_gpus_are_matched_by_uuid_and_unmatched_ones_all_count(
    host_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = gpu_env(host_env, monkeypatch, tmp_path, gpus=4, free_gib=79.1)
    listed = env["gpu"]["nvml"]["gpus"]
    listed[0]["memory_free_bytes"] = round(10.0 * GIB)  # NVML's GPU 0, hidden from CUDA here
    # CUDA sees two of the four (CUDA_VISIBLE_DEVICES=2,3): torch's UUIDs name them, without "GPU-".
    env["gpu"]["devices"] = [
        {**env["gpu"]["devices"][0], "uuid": listed[i]["uuid"].removeprefix("GPU-")} for i in (2, 3)
    ]
    env["gpu"]["count"] = 2
    assert device_room(env, 2).free_bytes == round(79.1 * GIB)
    # Without UUIDs two CUDA devices cannot be placed among four NVML GPUs: every GPU counts.
    for device in env["gpu"]["devices"]:
        del device["uuid"]
    assert device_room(env, 2).free_bytes == round(10.0 * GIB)


def test_exclusive_process_mode_is_sequential_even_where_both_fit(
    host_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = gpu_env(host_env, monkeypatch, tmp_path, compute_mode=EXCLUSIVE_PROCESS)
    assert env["gpu"]["nvml"]["gpus"][0]["compute_mode"] == "exclusive_process"
    assert layout_for("auto", "cuda", 1, env, gpu_metrics(1.0)) == Layout(
        "sequential", "GPU in exclusive-process compute mode"
    )


def test_without_nvml_the_devices_total_stands_in_and_the_note_says_so(
    host_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = gpu_env(host_env, monkeypatch, tmp_path, nvml=False)
    why = env["gpu"]["nvml"]["why"]
    assert not env["gpu"]["nvml"]["available"] and why
    assert layout_for("auto", "cuda", 1, env, gpu_metrics(30.0)).why == (
        f"2 x (30.0 GiB peak reserved + 1.0 GiB per process) ≤ 139.8 GiB total, free unknown: {why}"
    )
    # env.json written before NVML was read: no gpu.nvml at all.
    del env["gpu"]["nvml"]
    assert layout_for("auto", "cuda", 1, env, gpu_metrics(70.0)).why == (
        "2 x (70.0 GiB peak reserved + 1.0 GiB per process) > 139.8 GiB total, "
        "free unknown: no NVML in env.json"
    )
    assert layout_for("auto", "cuda", 1, None, gpu_metrics(1.0)) == Layout(
        "sequential", "the GPU's free memory is unknown: no env.json"
    )


def test_a_malformed_figure_is_named_with_its_value(
    host_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = gpu_env(host_env, monkeypatch, tmp_path)
    metrics = gpu_metrics(30.0)
    metrics["memory"]["cuda_max_reserved_bytes"] = "30 GiB"
    with pytest.raises(BadInputError, match=r"metrics-ws1.json memory.cuda_max_reserved_bytes: got '30 GiB'"):
        layout_for("auto", "cuda", 1, env, metrics)
    env["gpu"]["nvml"]["gpus"][0]["memory_free_bytes"] = -1
    with pytest.raises(BadInputError, match=r"env.json gpu.nvml.gpus\[0\].memory_free_bytes: got -1"):
        layout_for("auto", "cuda", 1, env, gpu_metrics(30.0))


def test_ab_layout_reads_the_run_directory_on_cuda_only(
    host_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = make_config(tmp_path)  # bench.device auto, gate.ab.layout auto
    run_dir = tmp_path / "run"
    write_json(run_dir / "env.json", gpu_env(host_env, monkeypatch, tmp_path, free_gib=79.1))
    write_json(metrics_path(run_dir, 1), gpu_metrics(61.2))
    assert (
        ab_layout(config, 1, run_dir, gpus=1).why
        == "2 x (61.2 GiB peak reserved + 1.0 GiB per process) > 79.1 GiB free"
    )
    assert ab_layout(config, 1, run_dir, gpus=0) == Layout("interleaved", "auto on CPU")
    (run_dir / "env.json").write_text("{truncated")
    with pytest.raises(BadInputError, match=r"env\.json: not valid JSON"):
        ab_layout(config, 1, run_dir, gpus=1)
    assert ab_layout(config, 1, run_dir, gpus=0).name == "interleaved"  # a CPU A/B never reads it


def test_sequential_rounds_alternate_abba_and_a_resume_continues_by_index() -> None:
    assert "".join(sequential_order(i) for i in range(1, 7)) == "ABBAABBAABBA"
    assert sequential_order(5) == "AB" and sequential_order(6) == "BA"


def saved_ab(tmp_path: Path, layout: Layout | None) -> Path:
    changes = [0.01, -0.02, 0.0, 0.015]  # four rounds: the first look, with a noise figure
    rounds = [{"change_log": c} for c in changes]
    outcome = ABOutcome(1, decide(changes, 5.0, 0.95, 4, 27), rounds, 30.0)
    data = outcome.to_dict(Side("base", "a" * 40), Side("candidate", "b" * 40))
    if layout is None:
        del data["layout"]  # an ab.json written before layouts
    else:
        data["layout"] = layout.to_dict()
    return write_json(tmp_path / AB_FILE, data)


def test_a_resume_keeps_the_saved_layout(tmp_path: Path) -> None:
    now = Layout("interleaved", "auto on CPU")
    saved = Layout("sequential", "2 x (61.2 GiB peak reserved + 1.0 GiB per process) > 79.1 GiB free")
    path = saved_ab(tmp_path, saved)
    kept = resumed_layout(path, "auto", now)
    assert kept == Layout("sequential", f"as the rounds it resumes: {saved.why}")
    # Resumed again, the note still names the first reason once.
    path = saved_ab(tmp_path, kept)
    assert resumed_layout(path, "auto", now).why == f"as the rounds it resumes: {saved.why}"
    assert resumed_layout(path, "sequential", Layout("sequential", "gate.ab.layout = sequential")).name == (
        "sequential"
    )
    with pytest.raises(
        BadInputError, match=r"gate.ab.layout: got 'interleaved', but the rounds saved in .* ran sequential"
    ):
        resumed_layout(path, "interleaved", now)
    assert resumed_layout(saved_ab(tmp_path, None), "auto", now).name == "interleaved"


def test_the_ab_row_note_names_the_layout(tmp_path: Path) -> None:
    layout = Layout("sequential", "2 x (61.2 GiB peak reserved + 1.0 GiB per process) > 79.1 GiB free")
    path = saved_ab(tmp_path, layout)
    outcome = read_json(path)
    row = apply_ab(Comparison("profile", "w", None), outcome, Tolerances(), ABConfig()).timing(1)
    assert row is not None
    # After the decision's own note, before the noise and the spread.
    assert f"device-s); {layout.note()}; " in row.note
    assert row.note.index(layout.note()) < row.note.index("sd ")
    # The rule is the same; it names the rounds as the layout made them.
    assert (
        "A/B, rounds of one launch per side (A B, then B A), tokens/s over each round's total time"
        in row.rule
    )
    del outcome["layout"]
    older = apply_ab(Comparison("profile", "w", None), outcome, Tolerances(), ABConfig()).timing(1)
    assert older is not None and "layout" not in older.note
    assert older.rule.startswith("A/B, rounds of alternating steps,")
