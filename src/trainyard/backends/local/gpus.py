"""The GPUs of this machine: real ones through NVML, or clearly marked simulated slots."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pynvml

from trainyard.backends.base import GpuInfo
from trainyard.backends.nvml_devices import NO_NVIDIA_GPU

log = logging.getLogger(__name__)

# A simulated slot is named like the card it stands in for (so messages read "needs 2 V100",
# and model quotas and `gpuType` behave as on hardware) and claims that card's 16 GiB rather
# than 0, so memory requests and memory-aware placement behave as they would. That it is
# simulated is said by its ``simulated`` flag: `yard nodes`, the API's node view, start-up.
SIMULATED_GPU_MODEL = "V100"
SIMULATED_GPU_MEMORY_MB = 16384

_MIB = 1024 * 1024


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode() if isinstance(value, bytes) else value


def discover_nvidia_gpus() -> list[GpuInfo]:
    """The NVIDIA GPUs NVML reports, by NVML index; [] when there is no driver or library.

    Indices are NVML's, which follow PCI bus order; the backend sets
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA numbers devices the same way.
    Any other NVML failure is logged as a warning and yields [] rather than a partial list.
    """
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if exc.value in NO_NVIDIA_GPU:
            log.debug("no NVIDIA GPUs: %s", exc)
        else:
            log.warning("NVML failed to initialise, so no GPUs are reported: %s", exc)
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                GpuInfo(
                    index=index,
                    model=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_mb=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    group=numa_group(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId)),
                )
            )
        return gpus
    except pynvml.NVMLError as exc:
        log.warning("NVML failed while listing GPUs, so none are reported: %s", exc)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.warning("NVML shutdown failed: %s", exc)


def numa_group(bus_id: str, sysfs: Path = Path("/sys/bus/pci/devices")) -> str:
    """``numaN`` for the NUMA node of the PCI device ``bus_id``; "" when the kernel does not say.

    NVML's bus id has an 8-digit PCI domain (``00000000:3B:00.0``); sysfs uses 4 digits.
    """
    parts = bus_id.strip().lower().split(":")
    if len(parts) != 3 or not all(parts):
        return ""
    domain, bus, device = parts
    try:
        node = int((sysfs / f"{domain[-4:]}:{bus}:{device}" / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return ""
    return f"numa{node}" if node >= 0 else ""


def with_groups(gpus: list[GpuInfo], groups: list[list[int]]) -> list[GpuInfo]:
    """The GPUs with their topology group set from configuration: one list of indices per group."""
    group_of = {index: f"group{n}" for n, members in enumerate(groups) for index in members}
    return [replace(g, group=group_of.get(g.index, g.group)) for g in gpus]


def simulated_gpus(count: int, model: str = SIMULATED_GPU_MODEL) -> list[GpuInfo]:
    """``count`` simulated GPU slots of ``model`` for machines without GPUs (demos and tests)."""
    if count < 0:
        raise ValueError(f"simulated_gpus must be >= 0, got {count}")
    return [
        GpuInfo(index=i, model=model, memory_mb=SIMULATED_GPU_MEMORY_MB, simulated=True) for i in range(count)
    ]
