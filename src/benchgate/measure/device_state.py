"""Device state as data, the part that needs no NVML: whether a window was throttled, one window's
summary, and the block rank 0 writes under "device_state" in a metrics file. `measure/device.py` reads
NVML and calls these; the checks read what they write. Units: W, J, s.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

# A window is throttled when the power or thermal violation counters grew by more than this fraction of
# it: a cap that bites for a few milliseconds as a load step starts is routine, a percent of the
# measured time is already a percent of tokens/s.
THROTTLED_FRACTION = 0.01
# The clock event reasons that slow a busy GPU, by what the verdict calls them. Idle, an applications
# clock setting, sync boost and the display clock are not throttling: they are set, or they mean no load.
THROTTLING = {
    "sw_power_cap": "power cap",
    "sw_thermal_slowdown": "thermal",
    "hw_thermal_slowdown": "thermal",
    "hw_slowdown": "hardware slowdown",
    "hw_power_brake_slowdown": "hardware slowdown",
}
def reason_names(mask: int, table: dict[int, str]) -> list[str]:
    """The names of the reason bits set in `mask`; a bit no constant names reads `unknown_0x...`."""
    names = [name for bit, name in sorted(table.items()) if mask & bit]
    unknown = mask & ~sum(table)
    return [*names, f"unknown_{unknown:#x}"] if unknown else names


def throttled_by(
    seconds: float, reasons: Sequence[str], power_violation_s: float | None, thermal_violation_s: float | None
) -> list[str]:
    """What slowed the GPU during a window of `seconds`: a throttling reason seen in a sample, or a
    violation counter that grew by more than THROTTLED_FRACTION of the window. Empty: not throttled."""
    causes = {THROTTLING[r] for r in reasons if r in THROTTLING}
    for cause, violation in (("power cap", power_violation_s), ("thermal", thermal_violation_s)):
        if violation is not None and violation > THROTTLED_FRACTION * seconds:
            causes.add(cause)
    return sorted(causes)


def _spread(values: Sequence[float | None], *keys: str) -> dict[str, float | None]:
    present = [float(v) for v in values if v is not None]
    how: dict[str, Callable[[list[float]], float]] = {"min": min, "mean": statistics.fmean, "max": max}
    return {key: (float(how[key](present)) if present else None) for key in keys}


def summarize_window(
    seconds: float,
    samples: Sequence[dict[str, Any]],
    energy_j: float | None,
    power_violation_s: float | None,
    thermal_violation_s: float | None,
    nvml_index: int | None = None,
    uuid: str | None = None,
) -> dict[str, Any]:
    """One window (one rank's GPU over the measured steps) from its samples of `current_state` and the
    growth of its cumulative counters."""
    reasons = sorted({r for s in samples for r in (s.get("throttle_reasons") or [])})
    causes = throttled_by(seconds, reasons, power_violation_s, thermal_violation_s)
    return {
        "nvml_index": nvml_index,
        "uuid": uuid,
        "seconds": seconds,
        "samples": len(samples),
        "energy_j": energy_j,
        "sm_clock_mhz": _spread([s.get("sm_clock_mhz") for s in samples], "min", "mean", "max"),
        "mem_clock_mhz": _spread([s.get("mem_clock_mhz") for s in samples], "min", "max"),
        "power_w": _spread([s.get("power_w") for s in samples], "mean", "max"),
        "temperature_c": _spread([s.get("temperature_c") for s in samples], "max"),
        "throttle_reasons": reasons,
        "power_violation_s": power_violation_s,
        "thermal_violation_s": thermal_violation_s,
        "throttled": bool(causes),
        "throttled_by": causes,
    }


def _energy_sum(windows: Sequence[dict[str, Any]]) -> float | None:
    """The GPUs' energy over the windows; None when one GPU cannot say (a partial sum would read as a
    lower energy per token). Ranks sharing one GPU read one counter: it counts once."""
    by_gpu: dict[str, float] = {}
    for i, window in enumerate(windows):
        if window.get("energy_j") is None:
            return None
        key = window.get("uuid") or f"window {i}"
        by_gpu[key] = max(by_gpu.get(key, 0.0), float(window["energy_j"]))
    return sum(by_gpu.values())


def device_state_block(windows: Sequence[dict[str, Any] | None], tokens: int) -> dict[str, Any]:
    """What rank 0 writes under "device_state" in a metrics file: every rank's window of the measured
    steps, in rank order (None for a rank without NVML), and `tokens` trained over them (all ranks)."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        raise ValueError(f"tokens: got {tokens!r} (expected the tokens trained in the measured steps, > 0)")
    measured = [w for w in windows if w is not None]
    missing = [rank for rank, w in enumerate(windows) if w is None]
    energy = _energy_sum(measured) if measured and not missing else None
    why = None
    if not measured:
        why = "no rank could read NVML" if windows else "no window was recorded"
    elif missing:
        why = f"rank(s) {', '.join(map(str, missing))} could not read NVML: energy is not summed"
    return {
        "available": bool(measured),
        "why": why,
        "windows": list(windows),
        "energy_j": energy,
        "energy_j_per_token": None if energy is None else energy / tokens,
        "throttled_windows": sum(bool(w["throttled"]) for w in measured),
        "windows_measured": len(measured),
        "throttled_by": sorted({cause for w in measured for cause in w["throttled_by"]}),
    }


