"""CPU and memory this machine can give to tasks: psutil, narrowed by affinity and cgroup limits."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from trainyard.core.resources import MILLI

_MIB = 1024 * 1024
# Inside a container the cgroup namespace makes the container's own cgroup the root of
# /sys/fs/cgroup, so its limits are found at fixed paths (v2 first, then v1). On a host
# the root cgroup has no limit files, or "unlimited" values, and nothing is narrowed.
_CGROUP = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_cpu_limit() -> float | None:
    """CPUs allowed by the cgroup CPU quota, or None when there is no quota."""
    v2 = _read(_CGROUP / "cpu.max")  # "max 100000" or "200000 100000"
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            return int(quota) / int(period)
        return None
    quota_v1 = _read(_CGROUP / "cpu" / "cpu.cfs_quota_us")
    period_v1 = _read(_CGROUP / "cpu" / "cpu.cfs_period_us")
    if quota_v1 and period_v1 and quota_v1.isdigit() and period_v1.isdigit() and int(period_v1) > 0:
        return int(quota_v1) / int(period_v1)  # "-1" (no quota) fails isdigit
    return None


def _cgroup_memory_limit() -> int | None:
    """Bytes allowed by the cgroup memory limit, or None when there is none."""
    for path in (_CGROUP / "memory.max", _CGROUP / "memory" / "memory.limit_in_bytes"):
        value = _read(path)
        if value is not None and value.isdigit():
            return int(value)  # v1 "unlimited" is a huge number; min() below ignores it
    return None


def host_cpu_milli() -> int:
    """Milli-CPUs usable here: CPUs in our affinity mask, capped by any cgroup quota."""
    cpus: float = len(os.sched_getaffinity(0))
    if (quota := _cgroup_cpu_limit()) is not None:
        cpus = min(cpus, quota)
    return max(1, int(cpus * MILLI))


def host_memory_mb() -> int:
    """MiB of memory usable here: physical memory, capped by any cgroup limit."""
    total = psutil.virtual_memory().total
    if (limit := _cgroup_memory_limit()) is not None:
        total = min(total, limit)
    return total // _MIB
