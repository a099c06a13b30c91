"""THE NVML STAND-IN: the one stand-in of the test suite.

A fake NVIDIA machine (eight H100 cards by default) behind the ``pynvml`` functions that
Trainyard calls (discovery in ``backends/local/gpus.py``, sampling in
``backends/local/metrics.py``). Tests set each device's figures, the processes using it,
its ECC count, or mark it lost. Everything behind this boundary is real: the sampler's
attribution of processes to tasks, the controller's monitoring tick, the history.

Use the ``fake_nvml`` fixture (``tests/conftest.py``), never patch ``pynvml`` elsewhere.
Another process (the Slurm task sampler, run inside a job's step) gets the same fake
machine through ``FakeNvml.share``: the environment it names puts ``pynvml.py`` of
``tests/standins/shared/`` first on the process's path, which serves this module's fake
from the state file ``share`` writes (again after every change the test makes).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

import pynvml

if TYPE_CHECKING:
    import pytest

MIB = 1024 * 1024
H100_MEMORY_BYTES = 81559 * MIB
SHARED_MODULE_DIR = Path(__file__).parent / "shared"  # holds the ``pynvml.py`` of other processes
STATE_VARIABLE = "TRAINYARD_TEST_FAKE_NVML"  # names the state file for them


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
        """Put the fake behind ``pynvml`` in this process (for the test's duration)."""
        for name, call in self.calls().items():
            monkeypatch.setattr(pynvml, name, call)

    def share(self, state_file: Path) -> dict[str, str]:
        """Write the fake's devices to ``state_file``; the environment that gives another
        process (its python3) this fake as its ``pynvml``. Share again after a change."""
        tmp = state_file.with_name(state_file.name + ".tmp")
        tmp.write_text(json.dumps([asdict(g) for g in self.gpus]))
        os.replace(tmp, state_file)
        return {"PYTHONPATH": str(SHARED_MODULE_DIR), STATE_VARIABLE: str(state_file)}

    @classmethod
    def shared(cls, state_file: Path) -> FakeNvml:
        """The fake as ``share`` last wrote it."""
        machine = cls(0)
        for gpu in json.loads(state_file.read_text()):
            gpu["processes"] = {int(pid): used for pid, used in gpu["processes"].items()}
            machine.gpus.append(FakeGpu(**gpu))
        return machine

    @staticmethod
    def serve(module: ModuleType, state_file: Path) -> None:
        """Make ``module`` (another process's real ``pynvml``) answer from ``state_file``,
        read again at each call, so that the test's later changes are seen."""
        for name in FakeNvml(0).calls():
            def call(*args: Any, _name: str = name) -> Any:
                return FakeNvml.shared(state_file).calls()[_name](*args)

            setattr(module, name, call)

    def calls(self) -> dict[str, Any]:
        """The ``pynvml`` functions Trainyard calls, answered from this fake."""
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

        def minor_number(handle: int) -> int:
            self._gpu(handle)
            return handle  # the device file of fake device i is /dev/nvidia<i>

        return {
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlDeviceGetCount": lambda: len(self.gpus),
            "nvmlDeviceGetHandleByIndex": handle_by_index,
            "nvmlDeviceGetMinorNumber": minor_number,
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
