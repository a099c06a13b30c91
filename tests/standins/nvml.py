"""THE NVML STAND-IN: the one stand-in of the test suite.

A fake NVIDIA machine (eight H100 cards by default) behind the ``pynvml`` functions that
Trainyard calls (discovery in ``backends/local/gpus.py``, sampling in
``backends/local/metrics.py``). Tests set each device's figures, the processes using it,
its ECC count, or mark it lost. Everything behind this boundary is real: the sampler's
attribution of processes to tasks, the controller's monitoring tick, the history.

Use the ``fake_nvml`` fixture (``tests/conftest.py``), never patch ``pynvml`` elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

MIB = 1024 * 1024
H100_MEMORY_BYTES = 81559 * MIB


@dataclass
class FakeGpu:
    """One fake device and what NVML would say about it."""

    name: str = "NVIDIA H100 80GB HBM3"
    memory_total: int = H100_MEMORY_BYTES
    memory_used: int = 0
    util: int = 0
    temperature: int = 35
    power_mw: int = 70_000
    ecc_uncorrected: int = 0
    ecc_supported: bool = True
    processes: dict[int, int] = field(default_factory=dict)  # pid -> GPU memory in bytes
    lost: bool = False


class FakeNvml:
    """The fake machine; ``install`` puts it behind ``pynvml``."""

    def __init__(self, count: int = 8) -> None:
        self.gpus = [FakeGpu() for _ in range(count)]
        self.initialised = 0

    def _gpu(self, handle: Any) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def init() -> None:
            self.initialised += 1

        def shutdown() -> None:
            self.initialised -= 1

        def ecc(handle: int, error_type: int, counter: int) -> int:
            gpu = self._gpu(handle)
            assert error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED and counter == pynvml.NVML_VOLATILE_ECC
            if not gpu.ecc_supported:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return gpu.ecc_uncorrected

        def handle_by_index(index: int) -> int:
            if index >= len(self.gpus):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return index

        calls = {
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlDeviceGetCount": lambda: len(self.gpus),
            "nvmlDeviceGetHandleByIndex": handle_by_index,
            "nvmlDeviceGetName": lambda h: self._gpu(h).name,
            "nvmlDeviceGetUUID": lambda h: f"GPU-fake-{h:04d}",
            "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0"),
            "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(
                total=self._gpu(h).memory_total, used=self._gpu(h).memory_used,
                free=self._gpu(h).memory_total - self._gpu(h).memory_used),
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=self._gpu(h).util, memory=0),
            "nvmlDeviceGetTemperature": lambda h, sensor: self._gpu(h).temperature,
            "nvmlDeviceGetPowerUsage": lambda h: self._gpu(h).power_mw,
            "nvmlDeviceGetTotalEccErrors": ecc,
            "nvmlDeviceGetComputeRunningProcesses": lambda h: [
                SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self._gpu(h).processes.items()
            ],
        }
        for name, call in calls.items():
            monkeypatch.setattr(pynvml, name, call)
