"""Slurm's nodes as Trainyard's inventory: CPUs, memory, GPUs (GRES) and schedulability."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainyard.backends.base import GpuInfo, NodeInventory
from trainyard.core.labels import GPU_SHARES_LABEL
from trainyard.core.metrics import GpuSample, NodeSample

# Node states a new job may be placed in. Any other base state (DOWN, FUTURE, UNKNOWN,
# ...) or flag (DRAIN, FAIL, MAINT, NOT_RESPONDING, REBOOT_*, POWER*, RESERVED, ...) keeps
# Trainyard from placing work there, as it keeps Slurm from starting it.
_USABLE_BASE_STATES = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
_HARMLESS_FLAGS = {"COMPLETING", "PLANNED"}
# ``gpu:4``, ``gpu:a100:4``, ``gpu:a100:4(S:0-1)``, ``shard:a100_i0:1000``; other GRES (mps) are not GPUs.
_GRES = re.compile(r"^(?P<name>gpu|shard)(?::(?P<type>[^:(]+))?:(?P<count>\d+)(?:\(.*\))?$")
# A GRES type that names one device (``docs/slurm.md``, "GPUs"): ``i<N>`` or ``<model>_i<N>``,
# N being the number of its device file (``/dev/nvidia<N>``, as Slurm numbers it).
_INDEX_TYPE = re.compile(r"^(?:(?P<model>[A-Za-z0-9_.-]+)_)?i(?P<index>\d{1,4})$")
_SAFE_TYPE = re.compile(r"[A-Za-z0-9_.-]+")  # a GRES type safe to put back into --gres
UNTYPED_GPU_MODEL = "gpu"  # what an untyped ``gpu:N`` GRES reports as the model
WHOLE_GPU_SHARDS = 1000  # shards per GPU for Trainyard's thousandths: ``shard:<type>:1000``



def is_schedulable(state: str) -> bool:
    """Whether Slurm would start new work on a node in this state (``IDLE+DRAIN``, ``MIXED``, ``DOWN*``)."""
    if state.endswith("*"):  # not responding
        return False
    base, *flags = state.split("+")
    return base in _USABLE_BASE_STATES and set(flags) <= _HARMLESS_FLAGS


@dataclass(frozen=True)
class NodeGres:
    """How a node's GPUs are asked for in ``--gres``.

    ``types``: the Slurm GRES type of each of the node's GPUs by Trainyard's index ("" for
    an untyped GPU). ``pinned``: each type is one device (``i<N>``/``<model>_i<N>``), so
    a job asks for exactly the devices Trainyard chose (``gpu:<type>:1``); otherwise types
    are models and Slurm picks which devices of a type a job gets. ``shards``: pinned,
    and every device also has ``shard:<type>:1000``, so a fraction of it can be asked for
    in Trainyard's thousandths (``shard:<type>:<milli>``)."""

    types: tuple[str, ...] = ()
    pinned: bool = False
    shards: bool = False


def _gres_items(gres: str) -> list[tuple[str, str, int]]:
    """(name, type, count) of a ``Gres=`` field's GPU and shard items, in order."""
    items = []
    for item in gres.split(","):
        match = _GRES.match(item.strip())
        if match is not None:
            items.append((match["name"], match["type"] or "", int(match["count"])))
    return items


def node_gres(gres: str) -> tuple[tuple[GpuInfo, ...], NodeGres]:
    """The GPUs of a node's ``Gres=`` field, and how to ask for them.

    Pinned (every GPU item is ``gpu:i<N>:1`` or ``gpu:<model>_i<N>:1``, each N once): GPU
    N is Trainyard's index N, of that model (``gpu`` when none). Otherwise the GPUs are
    numbered as Slurm numbers them (by type, in order), the type being their model."""
    items = _gres_items(gres)
    gpus = [(kind, count) for name, kind, count in items if name == "gpu"]
    matches = [_INDEX_TYPE.fullmatch(kind) if count == 1 else None for kind, count in gpus]
    found = [m for m in matches if m is not None]
    if gpus and len(found) == len(gpus) and len({m["index"] for m in found}) == len(found):
        pinned = sorted((int(m["index"]), m["model"] or UNTYPED_GPU_MODEL, m.string) for m in found)
        shards = {kind: count for name, kind, count in items if name == "shard"}
        return (
            tuple(GpuInfo(index=i, model=model, memory_mb=0) for i, model, _ in pinned),
            NodeGres(types=tuple(kind for _, _, kind in pinned), pinned=True,
                     shards=all(shards.get(kind) == WHOLE_GPU_SHARDS for _, _, kind in pinned)),
        )
    infos: list[GpuInfo] = []
    types: list[str] = []
    for kind, count in gpus:
        for _ in range(count):
            # Slurm does not know a GPU's memory; 0 means "unknown" to the scheduler.
            infos.append(GpuInfo(index=len(infos), model=kind or UNTYPED_GPU_MODEL, memory_mb=0))
            types.append(kind if _SAFE_TYPE.fullmatch(kind) else "")
    return tuple(infos), NodeGres(types=tuple(types))


def gpus_of(gres: str) -> tuple[GpuInfo, ...]:
    """The GPUs of a node's ``Gres=`` field (``node_gres``)."""
    return node_gres(gres)[0]


def node_inventory(record: Mapping[str, str]) -> NodeInventory:
    """One ``scontrol show node --oneliner`` record as a node of the inventory."""
    cpus = record.get("CPUEfctv") or record.get("CPUTot") or "0"
    state = record.get("State", "UNKNOWN")
    gpus, gres = node_gres(record.get("Gres", ""))
    labels = {"slurm.state": state, "slurm.partitions": record.get("Partitions", "")}
    if gpus:
        labels[GPU_SHARES_LABEL] = "true" if gres.shards else "false"
    return NodeInventory(
        name=record["NodeName"],
        # The address Slurm itself uses to reach the node: one the other nodes can reach,
        # which is what MASTER_ADDR and the peers' host lists need.
        address=record.get("NodeAddr") or record["NodeName"],
        cpu_milli=int(cpus) * 1000 if cpus.isdigit() else 0,
        memory_mb=int(record.get("RealMemory", "0") or 0),
        gpus=gpus,
        schedulable=is_schedulable(state),
        labels=labels,
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


def figure(record: Mapping[str, Any], name: str) -> float | None:
    """A number a task sampler's record holds (None where it holds none)."""
    value = record.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def whole(record: Mapping[str, Any], name: str) -> int | None:
    value = figure(record, name)
    return None if value is None else int(value)


def with_measured_gpus(sample: NodeSample, measured: Mapping[int, Mapping[str, Any]]) -> NodeSample:
    """The node's sample with the GPUs its tasks' samplers measured in place of Slurm's n/a."""
    if not measured:
        return sample
    gpus = []
    for gpu in sample.gpus:
        device = measured.get(gpu.index)
        if device is None:
            gpus.append(gpu)
            continue
        gpus.append(dataclasses.replace(
            gpu, healthy=device.get("healthy") is not False, util_pct=figure(device, "util_pct"),
            memory_used_mb=whole(device, "memory_used_mb"), temperature_c=figure(device, "temperature_c"),
            memory_total_mb=whole(device, "memory_total_mb") or gpu.memory_total_mb,
            power_w=figure(device, "power_w"), ecc_errors=whole(device, "ecc_errors"),
        ))
    return dataclasses.replace(sample, gpus=tuple(gpus))
