"""Gang placement with the best-fit scorer: every task of a gang placed, or none."""

from __future__ import annotations

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode, Tentative
from trainyard.scheduler.snapshot import PendingJob, TaskPlacement, TaskRequest


def best_fit_score(node: FreeNode, task: TaskRequest) -> tuple[int, int, str]:
    """Lower is better: the node left with the least free GPU, then least free CPU.

    Packing tasks onto the fullest node that still fits keeps other nodes empty for
    large gangs (best-fit bin packing).
    """
    return (sum(node.gpu_free), node.cpu_milli, node.name)


def place_gang(job: PendingJob, nodes: dict[str, FreeNode]) -> list[TaskPlacement] | None:
    """Place every task of ``job`` on ``nodes`` (updating them), or change nothing."""
    tentative = Tentative(nodes)
    # Largest requests first: they have the fewest places to go.
    order = sorted(job.tasks, key=lambda t: (-t.gpu_milli, -t.cpu_milli, -t.memory_mb, t.role, t.index))
    for task in order:
        best: tuple[tuple[int, int, str], FreeNode, list] | None = None
        for node in nodes.values():
            devices = node.pick_devices(task)
            if devices is None:
                continue
            score = best_fit_score(node, task)
            if best is None or score < best[0]:
                best = (score, node, devices)
        if best is None:
            tentative.discard()
            return None
        _, node, devices = best
        tentative.allocate(
            TaskPlacement(
                role=task.role,
                index=task.index,
                node=node.name,
                gpus=tuple(devices),
                cpu_milli=task.cpu_milli,
                memory_mb=task.memory_mb,
            )
        )
    return sorted(tentative.placements, key=lambda p: (p.role, p.index))


def describe_shortfall(job: PendingJob, nodes: dict[str, FreeNode]) -> str:
    """Say, in numbers, why the gang does not fit the free capacity right now."""
    biggest = max(job.tasks, key=lambda t: (t.gpu_milli, t.cpu_milli, t.memory_mb))
    total_gpu = sum(t.gpu_milli for t in job.tasks)
    free_gpu = sum(f for n in nodes.values() if n.schedulable for f in n.gpu_free)
    if total_gpu > free_gpu:
        return f"needs {_gpus(total_gpu)} GPU in total, {_gpus(free_gpu)} free"
    if biggest.gpu_milli >= MILLI:
        most = max((n.whole_free_gpus(biggest) for n in nodes.values() if n.schedulable), default=0)
        if most * MILLI < biggest.gpu_milli:
            return (
                f"no node has {_gpus(biggest.gpu_milli)} free GPU together "
                f"for {biggest.role}; the most on one node is {most}"
            )
    free_cpu = max((n.cpu_milli for n in nodes.values() if n.schedulable), default=0)
    if biggest.cpu_milli > free_cpu:
        return f"no node has {_gpus(biggest.cpu_milli)} free CPU for {biggest.role}; the most is {_gpus(free_cpu)}"
    free_mem = max((n.memory_mb for n in nodes.values() if n.schedulable), default=0)
    if biggest.memory_mb > free_mem:
        return f"no node has {biggest.memory_mb} MiB free for {biggest.role}; the most is {free_mem} MiB"
    return f"the {len(job.tasks)} task(s) do not fit the free GPUs, CPUs and memory together"


def _gpus(milli: int) -> str:
    return str(milli // MILLI) if milli % MILLI == 0 else f"{milli / MILLI:g}"
