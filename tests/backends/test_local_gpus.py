"""GPU discovery through NVML, and simulated GPU slots."""

from __future__ import annotations

import os

import pytest

from trainyard.backends.local import gpus


def test_discovery_reports_the_nvidia_gpus_or_none_without_a_driver():
    found = gpus.discover_nvidia_gpus()
    if not os.path.exists("/proc/driver/nvidia"):
        assert found == []
    else:
        assert found, "an NVIDIA driver is loaded but NVML reported no GPU"
        assert [gpu.index for gpu in found] == list(range(len(found)))
        for gpu in found:
            assert gpu.model and gpu.memory_mb > 0 and gpu.uuid and not gpu.simulated


def test_simulated_gpus_are_marked_and_numbered():
    slots = gpus.simulated_gpus(3)
    assert [gpu.index for gpu in slots] == [0, 1, 2]
    assert all(gpu.simulated and gpu.model == "simulated" and gpu.uuid is None for gpu in slots)
    assert all(gpu.memory_mb == gpus.SIMULATED_GPU_MEMORY_MB for gpu in slots)
    assert gpus.simulated_gpus(0) == []
    with pytest.raises(ValueError):
        gpus.simulated_gpus(-1)
