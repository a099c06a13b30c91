"""Topology-aware placement: a task's GPUs in one PCIe/NUMA group, a gang on few nodes, one rack.

Collective communication is fastest inside a PCIe switch, then inside a node, then inside a
rack, so a multi-GPU task takes GPUs of one topology group when a node has them, a gang's
tasks go to nodes the gang already uses (or a node that can hold the rest of it), and a
multi-node gang is first tried inside one rack (racks from the ``rack_label`` node label),
the fullest rack that can still hold it first. Unknown groups ("") count as one group.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.ledger import Access, Fit, Ledger
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter, select_bestfit
from trainyard.scheduler.snapshot import GpuShare, PendingJob, Snapshot, TaskRequest

SCAN = 32  # fitting nodes compared per task, in best-fit order: enough to find a better shape
RACKS_TRIED = 4  # racks a gang is tried in before it may span racks


class Topology:
    @classmethod
    def for_snapshot(cls, snapshot: Snapshot) -> Topology:
        return cls()

    def attempts(self, job: PendingJob, ledger: Ledger) -> Sequence[NodeFilter | None]:
        if len(job.tasks) < 2:
            return (None,)
        need = sum(t.gpu_milli for t in job.tasks)
        free = ledger.capacity.rack_free
        racks = sorted((f, rack) for rack, f in free.items() if f >= need)[:RACKS_TRIED]
        return (*(_in_rack(rack) for _, rack in racks), None)

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        nodes = access.ledger.capacity.nodes
        best: tuple[tuple[int, ...], FreeNode, Fit] | None = None
        for order, name in enumerate(gang.nodes):  # the gang's own nodes first: fewest nodes
            node = nodes[name]
            if access.only is not None and not access.only(node):
                continue
            fit = access.fit(node, task, select_grouped)
            if fit is not None:
                key = (_groups(node, fit.devices), order)
                if best is None or key < best[0]:
                    best = (key, node, fit)
        if best is not None:
            return best[1], best[2]
        rest = gang.remaining_gpu - task.gpu_milli
        # (needs another node for the rest, whole GPUs left negated, groups, scan order)
        found: tuple[tuple[bool, int, int, int], FreeNode, Fit] | None = None
        for tier in access.tiers(task):
            seen = 0
            for node in tier:
                if found is not None and _at_best(node, task, rest) >= found[0][:3]:
                    seen += 1  # compared by its best possible key: cannot beat the best so far
                    if seen >= SCAN:
                        break
                    continue
                fit = access.fit(node, task, select_grouped)
                if fit is None:
                    continue
                whole_after = node.whole - len(fit.devices) if task.gpu_milli >= MILLI else node.whole
                holds_rest = whole_after * MILLI >= rest
                # Prefer a node that can take the rest of the gang too; failing that, the
                # one with most whole GPUs left (fewest nodes); then one group; then best fit.
                rank = (not holds_rest, 0 if holds_rest else -whole_after, _groups(node, fit.devices), seen)
                if found is None or rank < found[0]:
                    found = (rank, node, fit)
                seen += 1
                if seen >= SCAN or rank[:3] == (False, 0, 1):  # nothing later can do better
                    break
            if found is not None:
                return found[1], found[2]
        return None


def _at_best(node: FreeNode, task: TaskRequest, rest: int) -> tuple[bool, int, int]:
    """The best key ``node`` could get in ``choose`` (before its place in the order), from
    its free capacity alone: the quota and cell rules only ever take devices away."""
    whole_after = node.whole - task.gpu_milli // MILLI if task.gpu_milli >= MILLI else node.whole
    holds_rest = whole_after * MILLI >= rest
    return (not holds_rest, 0 if holds_rest else -whole_after, _fewest_groups(node, task))


def _fewest_groups(node: FreeNode, task: TaskRequest) -> int:
    """The fewest topology groups ``task``'s devices could come from on ``node``."""
    if task.gpu_milli <= 0:
        return 0
    wanted = task.gpu_milli // MILLI
    if wanted <= 1:
        return 1
    sizes: dict[str, int] = {}
    for p, free in enumerate(node.gpu_free):
        if free == MILLI:
            sizes[node.gpu_group[p]] = sizes.get(node.gpu_group[p], 0) + 1
    groups = 0
    for size in sorted(sizes.values(), reverse=True):
        groups += 1
        wanted -= size
        if wanted <= 0:
            break
    return groups


class InRack:
    """A node filter for one rack, which ``Access.tiers`` reads to look at that rack's
    nodes alone (``Capacity.candidates``)."""

    def __init__(self, rack: str) -> None:
        self.rack = rack

    def __call__(self, node: FreeNode) -> bool:
        return node.rack == self.rack


def _in_rack(rack: str) -> NodeFilter:
    return InRack(rack)


def _groups(node: FreeNode, devices: list[GpuShare]) -> int:
    if len(devices) <= 1:
        return len(devices)
    return len({node.gpu_group[node.position[d.index]] for d in devices})


def select_grouped(node: FreeNode, task: TaskRequest, tiers: list[list[int]]) -> list[GpuShare] | None:
    """Whole GPUs from one topology group when one has enough (the fullest such group),
    else from the groups with most free GPUs first; a fraction as best-fit does."""
    if task.gpu_milli < MILLI:
        return select_bestfit(node, task, tiers)
    wanted = task.gpu_milli // MILLI
    free = [p for positions in tiers for p in positions if node.gpu_free[p] == MILLI]
    if len(free) < wanted:
        return None
    groups: dict[str, list[int]] = {}
    for p in free:  # in preference order, so each group's first devices are its best
        groups.setdefault(node.gpu_group[p], []).append(p)
    if len(groups) == 1:
        return [GpuShare(node.gpu_index[p], MILLI) for p in free[:wanted]]
    order = list(groups)  # dicts keep insertion order: min/sorted below break ties by it
    enough = [g for g in order if len(groups[g]) >= wanted]
    if enough:
        chosen = groups[min(enough, key=lambda g: len(groups[g]))][:wanted]
    else:
        chosen = []
        for group in sorted(order, key=lambda g: -len(groups[g])):
            chosen.extend(groups[group][: wanted - len(chosen)])
            if len(chosen) == wanted:
                break
    return [GpuShare(node.gpu_index[p], MILLI) for p in chosen]
