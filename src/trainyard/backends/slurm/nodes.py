"""Slurm's nodes as Trainyard's inventory: CPUs, memory, GPUs (GRES) and schedulability."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from trainyard.backends.base import GpuInfo, NodeInventory
from trainyard.core.metrics import GpuSample, NodeSample

# Node states a new job may be placed in. Any other base state (DOWN, FUTURE, UNKNOWN,
# ...) or flag (DRAIN, FAIL, MAINT, NOT_RESPONDING, REBOOT_*, POWER*, RESERVED, ...) keeps
# Trainyard from placing work there, as it keeps Slurm from starting it.
_USABLE_BASE_STATES = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
_HARMLESS_FLAGS = {"COMPLETING", "PLANNED"}
# ``gpu:4``, ``gpu:a100:4``, ``gpu:a100:4(S:0-1)``; other GRES (shard, mps) are not GPUs.
_GPU_GRES = re.compile(r"^gpu(?::(?P<model>[^:(]+))?:(?P<count>\d+)(?:\(.*\))?$")
UNTYPED_GPU_MODEL = "gpu"  # what an untyped ``gpu:N`` GRES reports as the model


def is_schedulable(state: str) -> bool:
    """Whether Slurm would start new work on a node in this state (``IDLE+DRAIN``, ``MIXED``, ``DOWN*``)."""
    if state.endswith("*"):  # not responding
        return False
    base, *flags = state.split("+")
    return base in _USABLE_BASE_STATES and set(flags) <= _HARMLESS_FLAGS


def gpus_of(gres: str) -> tuple[GpuInfo, ...]:
    """The GPUs of a node's ``Gres=`` field, numbered as Slurm numbers them (by type, in order)."""
    gpus: list[GpuInfo] = []
    for item in gres.split(","):
        match = _GPU_GRES.match(item.strip())
        if match is None:
            continue
        model = match["model"] or UNTYPED_GPU_MODEL
        for _ in range(int(match["count"])):
            # Slurm does not know a GPU's memory; 0 means "unknown" to the scheduler.
            gpus.append(GpuInfo(index=len(gpus), model=model, memory_mb=0))
    return tuple(gpus)


def node_inventory(record: Mapping[str, str]) -> NodeInventory:
    """One ``scontrol show node --oneliner`` record as a node of the inventory."""
    cpus = record.get("CPUEfctv") or record.get("CPUTot") or "0"
    state = record.get("State", "UNKNOWN")
    return NodeInventory(
        name=record["NodeName"],
        # The address Slurm itself uses to reach the node: one the other nodes can reach,
        # which is what MASTER_ADDR and the peers' host lists need.
        address=record.get("NodeAddr") or record["NodeName"],
        cpu_milli=int(cpus) * 1000 if cpus.isdigit() else 0,
        memory_mb=int(record.get("RealMemory", "0") or 0),
        gpus=gpus_of(record.get("Gres", "")),
        schedulable=is_schedulable(state),
        labels={"slurm.state": state, "slurm.partitions": record.get("Partitions", "")},
    )


def in_partition(record: Mapping[str, str], partition: str | None) -> bool:
    return partition is None or partition in record.get("Partitions", "").split(",")


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "", "N/A", "n/a") else None
    except ValueError:
        return None


def node_sample(record: Mapping[str, str], now: datetime) -> NodeSample:
    """What Slurm knows of a node's use (``scontrol show node``): its load (``CPULoad``) and
    memory in use (``RealMemory`` less the OS's ``FreeMem``, never below 0). Slurm measures
    neither CPU percent, disk, network nor GPU use: those stay None ("n/a")."""
    total = _number(record.get("RealMemory"))
    free = _number(record.get("FreeMem"))
    used = None if total is None or free is None else int(min(total, max(0.0, total - free)))
    return NodeSample(
        node=record["NodeName"], at=now, load1=_number(record.get("CPULoad")),
        memory_used_mb=used, memory_total_mb=None if total is None else int(total),
        gpus=tuple(GpuSample(g.index, g.model, g.memory_mb) for g in gpus_of(record.get("Gres", ""))),
    )
