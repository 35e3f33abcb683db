"""The verdict's device rows (energy per token, throttled windows) and their MLflow figures, on bundles
whose metrics carry a device_state block made by device_state_block from real WindowRecorder windows
against the fake NVML (tests/support/fake_nvml)."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import pytest
from bundles import bundle
from fake_nvml import use_fake_nvml

from benchgate.checks.compare import compare
from benchgate.checks.tables import markdown
from benchgate.config import Tolerances
from benchgate.measure.device import WindowRecorder
from benchgate.measure.device_state import device_state_block
from benchgate.results.bundle import Bundle
from benchgate.results.comparison import Check, Comparison
from benchgate.results.figures import bench_figures, run_figures

STEPS = 60  # tests/support/bundles.py's bench(): 60 steps of 512 tokens per rank
SECONDS = 10.0  # the measured steps' time, as the fake's counters see it


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return use_fake_nvml(monkeypatch)


def device_state(nvml: ModuleType, ws: int, watts: float, throttle: str | None = None) -> dict[str, Any]:
    """One bench's block: a window per rank (rank r on GPU r), each GPU drawing `watts` over SECONDS;
    rank 0's GPU throttled by `throttle` when given."""
    nvml.reset()
    nvml.set_gpu_count(ws)
    recorders = [WindowRecorder(rank, interval_s=60.0) for rank in range(ws)]
    for recorder in recorders:
        recorder.start()
    nvml.advance(SECONDS, power_w=watts)
    if throttle:
        nvml.throttle(throttle, seconds=SECONDS / 2, index=0)
    windows: list[dict[str, Any] | None] = [recorder.stop() for recorder in recorders]
    return device_state_block(windows, tokens=512 * ws * STEPS)


def with_device(b: Bundle, states: dict[int, dict[str, Any]]) -> Bundle:
    for ws, state in states.items():
        b.metrics[ws]["device_state"] = state
    return b


def rows(baseline: Bundle | None, current: Bundle) -> dict[str, Check]:
    return {c.name: c for c in compare(baseline, current, Tolerances()).checks}


def energy_mj_per_token(watts: float) -> float:
    return 1e3 * watts * SECONDS / (512 * STEPS)  # per rank: ws GPUs over ws times the tokens


@pytest.mark.parametrize(
    ("watts", "status"),
    [
        pytest.param(400.0, "PASS", id="same"),
        pytest.param(420.0, "PASS", id="5pct-within-tolerance"),
        pytest.param(460.0, "WARN", id="15pct-more-energy"),
        pytest.param(300.0, "PASS", id="less-energy"),
    ],
)
def test_energy_per_token_against_the_baseline(nvml: ModuleType, watts: float, status: str) -> None:
    baseline = with_device(bundle(1), {1: device_state(nvml, 1, 400.0), 2: device_state(nvml, 2, 400.0)})
    current = with_device(bundle(2), {1: device_state(nvml, 1, watts), 2: device_state(nvml, 2, watts)})
    for ws in (1, 2):
        row = rows(baseline, current)[f"energy per token (ws={ws})"]
        assert row.status == status
        assert row.unit == "mJ/token"
        assert row.current == pytest.approx(energy_mj_per_token(watts))
        assert row.baseline == pytest.approx(energy_mj_per_token(400.0))
        assert row.change == pytest.approx(100 * (watts / 400.0 - 1))
        assert row.rule == "WARN if increase > 10%"


def test_energy_tolerance_comes_from_the_config(nvml: ModuleType) -> None:
    baseline = with_device(bundle(1), {1: device_state(nvml, 1, 400.0)})
    current = with_device(bundle(2), {1: device_state(nvml, 1, 420.0)})
    tight = Tolerances(energy_per_token_increase_pct=2.0)
    row = next(c for c in compare(baseline, current, tight).checks if c.name == "energy per token (ws=1)")
    assert row.status == "WARN" and row.rule == "WARN if increase > 2%"


def test_energy_without_a_baseline_figure_is_new(nvml: ModuleType) -> None:
    current = with_device(bundle(2), {1: device_state(nvml, 1, 400.0)})
    first = rows(None, current)["energy per token (ws=1)"]
    assert (first.status, first.note) == ("NEW", "no baseline at this world size")
    assert first.current == pytest.approx(energy_mj_per_token(400.0))
    cpu_era = rows(bundle(1), current)["energy per token (ws=1)"]  # a baseline from before NVML
    assert (cpu_era.status, cpu_era.note) == ("NEW", "the baseline has no energy figure")


def test_no_device_rows_without_nvml(nvml: ModuleType) -> None:
    names = set(rows(bundle(1), bundle(2)))
    assert not {n for n in names if n.startswith(("energy", "throttled"))}
    unavailable = with_device(bundle(2), {1: device_state_block([None], tokens=512 * STEPS)})
    assert "throttled windows (ws=1)" not in rows(bundle(1), unavailable)
    # the current run without a figure: no energy row, even where the baseline has one
    baseline = with_device(bundle(1), {1: device_state(nvml, 1, 400.0)})
    assert "energy per token (ws=1)" not in rows(baseline, bundle(2))


def test_a_board_without_an_energy_counter_has_no_energy_row(nvml: ModuleType) -> None:
    nvml.reset()
    nvml.unsupported("nvmlDeviceGetTotalEnergyConsumption")
    window = WindowRecorder(0, interval_s=60.0)
    window.start()
    state = device_state_block([window.stop()], tokens=512 * STEPS)
    found = rows(None, with_device(bundle(2), {1: state}))
    assert "energy per token (ws=1)" not in found
    assert found["throttled windows (ws=1)"].status == "PASS"


@pytest.mark.parametrize(("kind", "cause"), [("power", "power cap"), ("thermal", "thermal")])
def test_a_throttled_window_warns(nvml: ModuleType, kind: str, cause: str) -> None:
    baseline = with_device(bundle(1), {2: device_state(nvml, 2, 400.0)})
    current = with_device(bundle(2), {2: device_state(nvml, 2, 400.0, throttle=kind)})
    result = compare(baseline, current, Tolerances())
    row = next(c for c in result.checks if c.name == "throttled windows (ws=2)")
    assert row.status == "WARN"
    assert row.note == f"1 of 2 windows (one per rank's GPU) throttled: {cause}"
    assert (row.current, row.baseline, row.unit) == (50.0, 0.0, "%")
    assert "WARN if a GPU was throttled" in row.rule and "1%" in row.rule
    assert result.verdict == "WARN" and result.exit_code == 0


def test_unthrottled_windows_pass(nvml: ModuleType) -> None:
    current = with_device(bundle(2), {1: device_state(nvml, 1, 400.0), 2: device_state(nvml, 2, 400.0)})
    found = rows(None, current)
    assert found["throttled windows (ws=2)"].status == "PASS"
    assert found["throttled windows (ws=2)"].note == "0 of 2 windows (one per rank's GPU) throttled"
    assert found["throttled windows (ws=1)"].current == 0.0


def test_rows_survive_compare_json_and_the_table(nvml: ModuleType) -> None:
    current = with_device(bundle(2), {2: device_state(nvml, 2, 400.0, throttle="power")})
    result = compare(with_device(bundle(1), {2: device_state(nvml, 2, 400.0)}), current, Tolerances())
    again = Comparison.from_dict(result.to_dict())
    assert [c for c in again.checks if c.name.startswith(("energy", "throttled"))] == [
        c for c in result.checks if c.name.startswith(("energy", "throttled"))
    ]
    table = markdown(result)
    assert "| energy per token (ws=2) |" in table and "mJ/token" in table
    assert re.search(r"\| throttled windows \(ws=2\) \[\d\] \|", table)  # a WARN: its note under the table
    assert "1 of 2 windows (one per rank's GPU) throttled: power cap" in table


def test_figures_for_mlflow(nvml: ModuleType) -> None:
    current = with_device(bundle(2), {2: device_state(nvml, 2, 400.0, throttle="power")})
    figures = bench_figures(current.metrics[2])
    assert figures["energy_j_per_token"] == pytest.approx(energy_mj_per_token(400.0) / 1e3)
    assert figures["throttled_windows"] == 1.0
    flat = run_figures(current)
    assert "ws2/energy_j_per_token" in flat and flat["ws2/throttled_windows"] == 1.0
    assert "ws1/energy_j_per_token" not in flat and "ws1/throttled_windows" not in flat  # no NVML at ws=1
