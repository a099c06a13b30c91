"""What NVML says of one NVIDIA device: the figures both backends' samplers report.

Shared by the local backend's sampler (``local/metrics.py``) and the Slurm task sampler
(``slurm/runners.py``), which runs on a compute node under the task's own ``python3``:
so this module imports only the standard library and pynvml (nvidia-ml-py), none of
Trainyard's, keeps to Python 3.8, and the Slurm backend installs a copy of it beside
the sampler. A figure NVML does not give is None ("n/a"), never invented.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

MIB = 1024 * 1024
# NVML answers these when the machine simply has no NVIDIA GPU: not worth a warning.
NO_NVIDIA_GPU = (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)


@dataclass(frozen=True)
class DeviceFigures:
    """One device at one moment; ``healthy=False``: NVML reports it lost, or no longer lists it."""

    healthy: bool = True
    util_pct: float | None = None
    memory_used_mb: int | None = None
    memory_total_mb: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_errors: int | None = None  # uncorrected, volatile
    process_memory: dict[int, int] = field(default_factory=dict)  # pid -> its GPU memory in bytes


LOST = DeviceFigures(healthy=False)


def start() -> pynvml.NVMLError | None:
    """Initialise NVML (once per process, kept); None when ready, else NVML's error
    (whose ``value`` is in ``NO_NVIDIA_GPU`` when the machine simply has no NVIDIA GPU)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return exc
    return None


def read_device(index: int) -> DeviceFigures:
    """The figures of NVML's device ``index`` (NVML is started)."""
    try:
        if index >= pynvml.nvmlDeviceGetCount():
            return LOST  # the device fell off the bus
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError:
        return LOST
    lost = False

    def read(call: Callable[..., Any], *args: object) -> Any:
        nonlocal lost
        try:
            return call(handle, *args)
        except pynvml.NVMLError as exc:
            lost = lost or exc.value == pynvml.NVML_ERROR_GPU_IS_LOST
            return None

    util = read(pynvml.nvmlDeviceGetUtilizationRates)
    memory = read(pynvml.nvmlDeviceGetMemoryInfo)
    temperature = read(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
    power_mw = read(pynvml.nvmlDeviceGetPowerUsage)
    ecc = read(pynvml.nvmlDeviceGetTotalEccErrors, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
               pynvml.NVML_VOLATILE_ECC)
    procs = read(pynvml.nvmlDeviceGetComputeRunningProcesses)
    if lost:
        return LOST
    used: dict[int, int] = {}
    for proc in procs if isinstance(procs, list) else []:
        used[int(proc.pid)] = used.get(int(proc.pid), 0) + int(proc.usedGpuMemory or 0)
    return DeviceFigures(
        util_pct=_number(util.gpu if util is not None else None),
        memory_used_mb=int(memory.used) // MIB if memory is not None else None,
        memory_total_mb=int(memory.total) // MIB if memory is not None else None,
        temperature_c=_number(temperature),
        power_w=power_mw / 1000 if _number(power_mw) is not None else None,
        ecc_errors=ecc if isinstance(ecc, int) and not isinstance(ecc, bool) else None,
        process_memory=used,
    )


def index_of_minor(minor: int) -> int:
    """NVML's index of the device whose file is ``/dev/nvidia<minor>``, which is how Slurm
    numbers a node's GPUs (``SLURM_STEP_GPUS``); ``minor`` itself when NVML cannot say
    (NVML's PCI order and the device files' numbering agree on most machines)."""
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            if pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(index)) == minor:
                return index
    except pynvml.NVMLError:
        pass
    return minor


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
