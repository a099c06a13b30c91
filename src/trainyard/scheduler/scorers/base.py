"""What a placement scorer is: where one task of a gang goes, and how the gang is tried.

A scorer never decides *whether* a job may use a node or a device — ``Access`` does
(quotas, cells, health); it only ranks what it is offered. Candidates come in tiers, each
best fit first; a scorer answers from the first tier that has any fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.ledger import Access, Fit, Ledger
from trainyard.scheduler.snapshot import GpuShare, PendingJob, TaskRequest

NodeFilter = Callable[[FreeNode], bool]
Choice = tuple[FreeNode, Fit]


@dataclass
class GangProgress:
    """The gang being placed: where its tasks went so far and what is still to place."""

    job: PendingJob
    remaining_gpu: int  # milli-GPU of the tasks not yet placed, the current one included
    nodes: list[str] = field(default_factory=list)


class Scorer(Protocol):
    def attempts(self, job: PendingJob, ledger: Ledger) -> Sequence[NodeFilter | None]:
        """Node filters to try the whole gang with, in order (None: every node)."""
        ...

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        """The node and devices for ``task``, or None if it fits nowhere it may go."""
        ...


def select_bestfit(node: FreeNode, task: TaskRequest, tiers: list[list[int]]) -> list[GpuShare] | None:
    """Whole GPUs: the first fully free devices in preference order (index order when all
    tiers are equal: neighbours tend to share a PCIe switch). A fraction: the fullest device
    it still fits on, so that whole devices stay whole for whole-GPU jobs."""
    if task.gpu_milli < MILLI:
        best: tuple[tuple[int, int, int], int] | None = None
        for rank, positions in enumerate(tiers):
            for p in positions:
                free = node.gpu_free[p]
                if free >= task.gpu_milli:
                    key = (rank, free, node.gpu_index[p])
                    if best is None or key < best[0]:
                        best = (key, p)
        return None if best is None else [GpuShare(node.gpu_index[best[1]], task.gpu_milli)]
    wanted = task.gpu_milli // MILLI
    chosen = [p for positions in tiers for p in positions if node.gpu_free[p] == MILLI][:wanted]
    if len(chosen) < wanted:
        return None
    return [GpuShare(node.gpu_index[p], MILLI) for p in chosen]


def first_fit(task: TaskRequest, access: Access) -> Choice | None:
    """The first node, in tier and best-fit order, that takes the task (best-fit's answer)."""
    if task.gpu_milli <= 0 and access.only is None and not access.data_nodes:
        # One tier, in cells too, and a node takes the task where its CPU and memory host it.
        node = access.ledger.capacity.first_host(task)
        return None if node is None else (node, Fit([], None))
    refused: set[tuple[object, ...]] = set()  # fresh nodes' keys (``Access.fit_key``) that did not take it
    for tier in access.tiers(task):
        for node in tier:
            key = access.fit_key(node, task)
            if key is not None and key in refused:
                continue
            fit = access.fit(node, task, select_bestfit)
            if fit is not None:
                return node, fit
            if key is not None:
                refused.add(key)
    return None
