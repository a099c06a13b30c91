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
    assert all(gpu.simulated and gpu.model == "V100" and gpu.uuid is None for gpu in slots)
    assert all(gpu.memory_mb == gpus.SIMULATED_GPU_MEMORY_MB for gpu in slots)
    assert {gpu.model for gpu in gpus.simulated_gpus(2, "A100")} == {"A100"}  # yard up --local-gpu-model A100
    assert gpus.simulated_gpus(0) == []
    with pytest.raises(ValueError):
        gpus.simulated_gpus(-1)


def test_a_gpus_numa_node_comes_from_sysfs_by_its_nvml_bus_id(tmp_path) -> None:
    device = tmp_path / "0000:3b:00.0"
    device.mkdir()
    (device / "numa_node").write_text("1\n")
    (tmp_path / "0000:5e:00.0").mkdir()
    (tmp_path / "0000:5e:00.0" / "numa_node").write_text("-1\n")  # the kernel does not know
    assert gpus.numa_group("00000000:3B:00.0", tmp_path) == "numa1"
    assert gpus.numa_group("00000000:5E:00.0", tmp_path) == ""
    assert gpus.numa_group("00000000:AF:00.0", tmp_path) == ""  # no such device
    assert gpus.numa_group("not a bus id", tmp_path) == ""


def test_configured_groups_override_and_unlisted_gpus_keep_theirs() -> None:
    grouped = gpus.with_groups(gpus.simulated_gpus(3), [[0, 1]])
    assert [g.group for g in grouped] == ["group0", "group0", ""]
