"""Whole-node tasks (``taskRoles.<role>.nodes``): which nodes suit one, and taking all of one.

A whole-node task names no amounts: it gets every GPU, all the CPU and all the memory of
one node, and nothing else may share that node while it runs. So it goes only to a node
that is *empty* — nothing runs, is placed, reserved or planned on it in this cycle
(``FreeNode.empty``) — and whose every GPU suits the task's ``gpu_models`` and
``gpu_memory_mb``. Once placed, the node is sealed (``FreeNode.sealed``): not even a task
that asks for no CPU, memory or GPU lands beside it. The ledger seals the nodes of running
whole-node tasks too (any task that holds all of its node counts as one: the store keeps
what a task holds, not how it asked).

Before a cycle, ``resolve`` gives each whole-node task the least that a node suiting it
offers (GPUs, CPU, memory, each the smallest over those nodes): a lower bound of what it
will take, which admission, the order of a gang's tasks, backfill's first possible time and
the reasons count. The placement then takes the chosen node's all, and quotas are charged
what was placed, per GPU model: a VC's quota counts the GPUs of the nodes its job got.

Which node: the job's tiers are the cell model's order (``Access.tiers``); within the first
tier that has a suitable empty node, the smallest is taken (fewest GPUs, then CPU, memory,
name), so that big nodes stay for the jobs that need them. A gang of whole-node tasks is
placed all-or-nothing like any gang (``placement.place_gang``), and may preempt like any
job of its priority and VC: the planner releases victims until the gang fits, which for
these tasks means until enough suitable nodes are empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.ledger import Access, Fit
from trainyard.scheduler.snapshot import GpuShare, GpuSlot, NodeState, PendingJob, Snapshot, TaskRequest

Kind = tuple[tuple[str, ...], int]  # (GPU models, least GPU memory): what decides which nodes suit


def kind_of(task: TaskRequest) -> Kind:
    return (task.gpu_models, task.gpu_memory_mb)


def gpu_suits(gpu: GpuSlot, kind: Kind) -> bool:
    models, memory = kind
    return (not models or gpu.model in models) and gpu.memory_mb >= memory


def node_suits(node: NodeState, kind: Kind) -> bool:
    """Whether a whole-node task of this kind may have the node: it has GPUs, all suitable."""
    return bool(node.gpus) and all(gpu_suits(g, kind) for g in node.gpus)


def free_node_suits(node: FreeNode, kind: Kind) -> bool:
    """``node_suits`` for a node of the cycle's ledger."""
    models, memory = kind
    return bool(node.gpu_free) and all(
        (not models or model in models) and size >= memory
        for model, size in zip(node.gpu_model, node.gpu_memory_mb, strict=True)
    )


def suitable(nodes: Sequence[NodeState], kind: Kind) -> list[NodeState]:
    return [n for n in nodes if node_suits(n, kind)]


def resolve_tasks(tasks: Sequence[TaskRequest], nodes: Sequence[NodeState]) -> tuple[TaskRequest, ...]:
    """``tasks`` with each whole-node task's amounts set to the least a suitable node offers
    (one GPU, no CPU or memory if no node suits: it never fits, and says so)."""
    least: dict[Kind, tuple[int, int, int]] = {}
    resolved = []
    for task in tasks:
        if not task.whole_node:
            resolved.append(task)
            continue
        kind = kind_of(task)
        amounts = least.get(kind)
        if amounts is None:
            fitting = suitable(nodes, kind)
            amounts = least[kind] = (
                (
                    min(len(n.gpus) for n in fitting) * MILLI,
                    min(n.cpu_milli for n in fitting),
                    min(n.memory_mb for n in fitting),
                )
                if fitting
                else (MILLI, 0, 0)
            )
        gpu, cpu, memory = amounts
        resolved.append(replace(task, gpu_milli=gpu, cpu_milli=cpu, memory_mb=memory))
    return tuple(resolved)


def resolve(snapshot: Snapshot) -> Snapshot:
    """The snapshot with its pending whole-node tasks resolved (``resolve_tasks``); the
    same snapshot when none asks for a whole node."""
    if not any(t.whole_node for job in snapshot.pending for t in job.tasks):
        return snapshot
    pending: list[PendingJob] = []
    for job in snapshot.pending:
        if any(t.whole_node for t in job.tasks):
            job = replace(job, tasks=resolve_tasks(job.tasks, snapshot.nodes))
        pending.append(job)
    return replace(snapshot, pending=tuple(pending))


def taken(task: TaskRequest, node: FreeNode) -> TaskRequest:
    """What the task takes on ``node``: all of it."""
    return replace(task, gpu_milli=len(node.gpu_free) * MILLI, cpu_milli=node.cpu_total, memory_mb=node.memory_total)


def _every_device(node: FreeNode, task: TaskRequest, tiers: list[list[int]]) -> list[GpuShare] | None:
    """Every device of the node, or None if the job may not use them all (cells, quota)."""
    positions = sorted({p for tier in tiers for p in tier})
    if len(positions) != len(node.gpu_free):
        return None
    return [GpuShare(node.gpu_index[p], MILLI) for p in positions]


def choose(task: TaskRequest, access: Access) -> tuple[FreeNode, TaskRequest, Fit] | None:
    """The node for a whole-node task (see the module doc), with what it takes there and
    how (devices, cells it binds); None if no suitable node is empty."""
    kind = kind_of(task)
    probe = replace(task, gpu_milli=MILLI, cpu_milli=0, memory_mb=0, whole_node=False)
    for tier in access.tiers(probe):
        best: tuple[tuple[int, int, int, str], FreeNode, TaskRequest, Fit] | None = None
        for node in tier:
            if not node.empty:
                continue
            key = (len(node.gpu_free), node.cpu_total, node.memory_total, node.name)
            if best is not None and key >= best[0]:
                continue
            if not free_node_suits(node, kind):
                continue
            whole = taken(task, node)
            fit = access.fit(node, whole, _every_device)
            if fit is not None:
                best = (key, node, whole, fit)
        if best is not None:
            return best[1], best[2], best[3]
    return None


def empty_suitable(nodes: Sequence[FreeNode], task: TaskRequest) -> tuple[int, int, tuple[int, int]]:
    """(empty nodes that suit the whole-node task, nodes that suit it, the fewest and the
    most GPUs such a node has) among ``nodes``."""
    kind = kind_of(task)
    fitting = [n for n in nodes if free_node_suits(n, kind)]
    sizes = [len(n.gpu_free) for n in fitting] or [0]
    return sum(1 for n in fitting if n.empty), len(fitting), (min(sizes), max(sizes))
