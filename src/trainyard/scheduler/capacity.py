"""Free capacity during one scheduling cycle, with tentative allocations that roll back.

Like Volcano's ``Statement``: a gang's tasks are allocated one by one into a
``Tentative`` record; if a later task of the gang cannot be placed, everything the gang
took is handed back, so gangs are all-or-nothing by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainyard.core.resources import MILLI
from trainyard.scheduler.snapshot import GpuShare, NodeState, TaskPlacement, TaskRequest


@dataclass
class FreeNode:
    name: str
    cpu_milli: int
    memory_mb: int
    gpu_free: list[int]  # free milli-GPU per device, by position in ``gpu_index``
    gpu_index: list[int]
    gpu_model: list[str]
    gpu_memory_mb: list[int]
    schedulable: bool

    @classmethod
    def from_state(cls, node: NodeState, *, empty: bool = False) -> FreeNode:
        """The node's free capacity now, or (``empty``) as if nothing ran and it were up."""
        return cls(
            name=node.name,
            cpu_milli=node.cpu_milli - (0 if empty else node.cpu_used_milli),
            memory_mb=node.memory_mb - (0 if empty else node.memory_used_mb),
            gpu_free=[MILLI - (0 if empty else g.used_milli) for g in node.gpus],
            gpu_index=[g.index for g in node.gpus],
            gpu_model=[g.model for g in node.gpus],
            gpu_memory_mb=[g.memory_mb for g in node.gpus],
            schedulable=empty or node.schedulable,
        )

    def eligible_devices(self, task: TaskRequest) -> list[int]:
        """Positions of the devices whose model and memory suit the task."""
        return [
            i
            for i in range(len(self.gpu_free))
            if (not task.gpu_models or self.gpu_model[i] in task.gpu_models)
            and self.gpu_memory_mb[i] >= task.gpu_memory_mb
        ]

    def whole_free_gpus(self, task: TaskRequest) -> int:
        return sum(1 for i in self.eligible_devices(task) if self.gpu_free[i] == MILLI)

    def pick_devices(self, task: TaskRequest) -> list[GpuShare] | None:
        """Choose devices for ``task`` on this node, or ``None`` if it does not fit.

        Whole GPUs take fully free devices, lowest index first (neighbours tend to share a
        PCIe switch). A fraction goes to the fullest shared device it still fits on, so
        that whole devices stay whole for whole-GPU jobs.
        """
        if not self.schedulable or task.cpu_milli > self.cpu_milli or task.memory_mb > self.memory_mb:
            return None
        if task.gpu_milli <= 0:
            return []
        devices = self.eligible_devices(task)
        if task.gpu_milli < MILLI:
            fits = [i for i in devices if self.gpu_free[i] >= task.gpu_milli]
            if not fits:
                return None
            best = min(fits, key=lambda i: (self.gpu_free[i], self.gpu_index[i]))
            return [GpuShare(self.gpu_index[best], task.gpu_milli)]
        wanted = task.gpu_milli // MILLI
        free = [i for i in devices if self.gpu_free[i] == MILLI]
        if len(free) < wanted:
            return None
        return [GpuShare(self.gpu_index[i], MILLI) for i in free[:wanted]]

    def take(self, placement: TaskPlacement) -> None:
        self._apply(placement, -1)

    def give_back(self, placement: TaskPlacement) -> None:
        self._apply(placement, +1)

    def _apply(self, placement: TaskPlacement, sign: int) -> None:
        self.cpu_milli += sign * placement.cpu_milli
        self.memory_mb += sign * placement.memory_mb
        for share in placement.gpus:
            pos = self.gpu_index.index(share.index)
            self.gpu_free[pos] += sign * share.milli


@dataclass
class Tentative:
    """Allocations made for one gang, undone as a whole unless committed."""

    nodes: dict[str, FreeNode]
    placements: list[TaskPlacement] = field(default_factory=list)

    def allocate(self, placement: TaskPlacement) -> None:
        self.nodes[placement.node].take(placement)
        self.placements.append(placement)

    def discard(self) -> None:
        for placement in reversed(self.placements):
            self.nodes[placement.node].give_back(placement)
        self.placements.clear()
