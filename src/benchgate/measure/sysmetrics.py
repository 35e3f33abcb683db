"""System metrics sampled during the timed steps: CPU, memory and, on GPU hosts, each GPU's use.

A slowdown with the GPU at 40% utilisation is a different bug from one at 99%: these series let people
tell them apart in MLflow next to the step times. Rank 0 samples from a daemon thread every
`interval_s`; a sample costs tens of microseconds, so it does not show in the step times. Names follow
MLflow's own system-metric names, so the UI shows them in its "System metrics" section.

`device_window` is the other reading around the measured steps: every rank's own GPU through NVML
(measure/device.py), whose windows become the metrics' "device_state" (energy, clocks, throttling).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil

from benchgate.measure.device import NvmlUnavailable, Probe, WindowRecorder, gpu_probe, nvml_index_for_uuid


def _cpu_probe() -> Probe:
    psutil.cpu_percent(interval=None)  # the first call only starts the measurement window

    def probe() -> dict[str, float]:
        memory = psutil.virtual_memory()
        return {
            "cpu_utilization_percentage": psutil.cpu_percent(interval=None),
            "system_memory_usage_megabytes": (memory.total - memory.available) / 2**20,
            "system_memory_usage_percentage": memory.percent,
        }

    return probe


class SystemSampler:
    """Collects probe readings on a background thread until stopped; `result()` gives the series."""

    def __init__(self, interval_s: float = 0.5, probes: list[Probe] | None = None) -> None:
        self.interval_s = interval_s
        if probes is None:
            gpu = gpu_probe()
            probes = [_cpu_probe(), *([gpu] if gpu else [])]
        self.probes = probes
        self.times: list[float] = []
        self.series: dict[str, list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="benchgate-sysmetrics", daemon=True)
        self._started = 0.0

    def _sample(self) -> None:
        reading: dict[str, float] = {}
        for probe in self.probes:
            reading.update(probe())
        self.times.append(time.perf_counter() - self._started)
        for name, value in reading.items():
            # A series that appears late (or skips a sample) is padded so every series aligns with times.
            series = self.series.setdefault(name, [float("nan")] * (len(self.times) - 1))
            series.append(float(value))
        for series in self.series.values():
            if len(series) < len(self.times):
                series.append(float("nan"))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> None:
        self._started = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # a last reading, so even a run shorter than one interval has one

    def result(self) -> dict[str, Any]:
        return {"interval_s": self.interval_s, "t_s": self.times, "series": self.series}


@contextlib.contextmanager
def sampling(enabled: bool, interval_s: float = 0.5) -> Iterator[SystemSampler | None]:
    if not enabled:
        yield None
        return
    sampler = SystemSampler(interval_s)
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop()


@dataclass
class DeviceWindow:
    """This rank's GPU over the measured steps (measure/device.py): the window, or None without NVML."""

    result: dict[str, Any] | None = None


@contextlib.contextmanager
def device_window(uuid: str | None) -> Iterator[DeviceWindow | None]:
    """NVML's window around the block of the GPU whose UUID torch reports for this rank's device
    (`torch.cuda.get_device_properties(device).uuid`): clocks, power, temperature, throttling, energy.
    None on CPU (no UUID). Where NVML cannot read that GPU (no nvidia-ml-py, no driver, a MIG instance,
    which NVML's device UUIDs do not name) the window's result stays None and the metrics say so."""
    if uuid is None:
        yield None
        return
    recorder: WindowRecorder | None = None
    window = DeviceWindow()
    index = nvml_index_for_uuid(uuid)
    if index is not None:
        recorder = WindowRecorder(index)
        try:
            recorder.start()
        except NvmlUnavailable:
            recorder = None
    try:
        yield window
    finally:
        if recorder is not None:
            window.result = recorder.stop()
