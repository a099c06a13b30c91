"""One scheduling cycle: ``schedule(snapshot) -> decisions``. Pure; no I/O.

Phases, in the manner of Kueue's cycle:
1. order the pending jobs (priority, then submit time, then id);
2. for each job in order, try to place its whole gang on what is still free;
3. jobs that could not be placed keep waiting, with a reason and their queue position.

A job that does not fit does not block the ones behind it (no head-of-line blocking);
reservations against starvation come with backfill in a later cycle design.
"""

from __future__ import annotations

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.placement import describe_shortfall, place_gang
from trainyard.scheduler.snapshot import (
    Decisions,
    KeepWaiting,
    NodeState,
    PendingJob,
    PendingReason,
    Snapshot,
    StartJob,
    TaskRequest,
)


def queue_order(job: PendingJob) -> tuple[int, float, int]:
    return (job.priority_rank, job.submitted_at, job.job_id)


def schedule(snapshot: Snapshot) -> Decisions:
    nodes = {n.name: FreeNode.from_state(n) for n in sorted(snapshot.nodes, key=lambda n: n.name)}
    starts: list[StartJob] = []
    unplaced: list[tuple[PendingJob, str]] = []
    for job in sorted(snapshot.pending, key=queue_order):
        placements = place_gang(job, nodes)
        if placements is None:
            unplaced.append((job, describe_shortfall(job, nodes)))
        else:
            starts.append(StartJob(job.job_id, tuple(placements)))
    waits = tuple(
        KeepWaiting(job.job_id, PendingReason.NO_FIT, message, position)
        for position, (job, message) in enumerate(unplaced, start=1)
    )
    return Decisions(starts=tuple(starts), waits=waits)


def never_fits(nodes: list[NodeState], tasks: list[TaskRequest]) -> list[str]:
    """Why a job could never run on these nodes even if they were empty; [] if it could.

    Used at submit time, so a user hears "no node has 8 GPUs" at once instead of waiting
    forever. Nodes that are not schedulable still count: they may come back.
    """
    problems: list[str] = []
    empty = {n.name: FreeNode.from_state(n, empty=True) for n in nodes}
    for task in tasks:
        if any(node.pick_devices(task) is not None for node in empty.values()):
            continue
        label = f"taskRoles.{task.role}"
        most_gpus = max((node.whole_free_gpus(task) for node in empty.values()), default=0)
        if task.gpu_milli >= MILLI and task.gpu_milli // MILLI > most_gpus:
            what = f" of model {'/'.join(task.gpu_models)}" if task.gpu_models else ""
            problems.append(
                f"{label}: each instance needs {task.gpu_milli // MILLI} GPU{what}; "
                f"the largest node has {most_gpus}"
            )
        elif task.gpu_milli > 0 and most_gpus == 0 and not any(n.gpu_free for n in empty.values()):
            problems.append(f"{label}: each instance needs a GPU; the cluster has none")
        elif task.cpu_milli > max((n.cpu_milli for n in empty.values()), default=0):
            most = max((n.cpu_milli for n in empty.values()), default=0)
            problems.append(f"{label}: each instance needs {task.cpu_milli / MILLI:g} CPU; the largest node has {most / MILLI:g}")
        elif task.memory_mb > max((n.memory_mb for n in empty.values()), default=0):
            most = max((n.memory_mb for n in empty.values()), default=0)
            problems.append(f"{label}: each instance needs {task.memory_mb} MiB of memory; the largest node has {most} MiB")
        else:
            problems.append(f"{label}: no node offers the requested GPU model or GPU memory")
    total = sum(t.gpu_milli for t in tasks)
    capacity = sum(len(n.gpus) for n in nodes) * MILLI
    if total > capacity:
        problems.append(f"the job needs {total / MILLI:g} GPU in total; the cluster has {capacity // MILLI}")
    return sorted(set(problems), key=problems.index)
