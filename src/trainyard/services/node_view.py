"""The nodes as the scheduler sees them, built once from the store for its two readers: the
controller's cycle (``in_use``: with what unfinished tasks hold, since allocations are
derived, not stored) and a submit's checks (empty nodes: ``never_fits``, and the GPUs a
whole-node task counts against quotas). Both follow the same rules: a node takes work when
its backend says so and no admin cordoned it; its labels are the backend's with the admin's
laid over them (``core.labels``); a GPU share is at most a whole device."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from trainyard.core.labels import merged_labels
from trainyard.scheduler.snapshot import GpuSlot, NodeState
from trainyard.store.queries import nodes as node_queries

WHOLE_GPU_MILLI = 1000


def gpu_slot(gpu: Mapping[str, Any], used_milli: int = 0) -> GpuSlot:
    """One stored GPU (``{index, model, memory_mb[, group]}``) as the scheduler sees it."""
    return GpuSlot(gpu["index"], gpu["model"], gpu["memory_mb"], used_milli, gpu.get("group", ""))


def node_states(session: Session, *, in_use: bool) -> list[NodeState]:
    """Every node by name; ``in_use``: with what its unfinished tasks hold, else empty."""
    used_gpu: dict[tuple[str, int], int] = defaultdict(int)
    used_cpu: dict[str, int] = defaultdict(int)
    used_memory: dict[str, int] = defaultdict(int)
    if in_use:
        for node, gpus, cpu, memory in node_queries.unfinished_task_usage(session):
            used_cpu[node] += cpu
            used_memory[node] += memory
            for index, milli in gpus:
                used_gpu[(node, index)] += milli
    return [
        NodeState(
            name=row.name,
            cpu_milli=row.cpu_milli,
            memory_mb=row.memory_mb,
            gpus=tuple(gpu_slot(g, min(WHOLE_GPU_MILLI, used_gpu.get((row.name, g["index"]), 0))) for g in row.gpus),
            cpu_used_milli=used_cpu.get(row.name, 0),
            memory_used_mb=used_memory.get(row.name, 0),
            schedulable=row.schedulable and not row.cordoned,
            labels=merged_labels(row.labels, row.admin_labels),
        )
        for row in node_queries.all_nodes(session)
    ]
