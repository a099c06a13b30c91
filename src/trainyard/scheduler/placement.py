"""Gang placement: every task of a gang placed, or none, with the configured scorer."""

from __future__ import annotations

from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.quota import job_owner
from trainyard.scheduler.scorers.base import GangProgress, NodeFilter, Scorer
from trainyard.scheduler.snapshot import PendingJob, TaskPlacement


def task_order(job: PendingJob) -> list:
    """Largest requests first: they have the fewest places to go."""
    return sorted(job.tasks, key=lambda t: (-t.gpu_milli, -t.cpu_milli, -t.memory_mb, t.role, t.index))


def place_gang(job: PendingJob, ledger: Ledger, scorer: Scorer, tentative: Tentative) -> list[TaskPlacement] | None:
    """Place every task of ``job`` (allocating into ``tentative``), or change nothing."""
    for only in scorer.attempts(job, ledger):
        attempt = Tentative()
        placements = _place_all(job, ledger, scorer, attempt, only)
        if placements is not None:
            tentative.adopt(attempt)
            return placements
        attempt.discard()
    return None


def _place_all(
    job: PendingJob, ledger: Ledger, scorer: Scorer, attempt: Tentative, only: NodeFilter | None
) -> list[TaskPlacement] | None:
    access = Access(ledger, job, only)
    owner = job_owner(job)
    tasks = task_order(job)
    gang = GangProgress(job, remaining_gpu=sum(t.gpu_milli for t in tasks))
    placements = []
    for task in tasks:
        choice = scorer.choose(task, access, gang)
        if choice is None:
            return None
        node, fit = choice
        placement = TaskPlacement(
            role=task.role,
            index=task.index,
            node=node.name,
            gpus=tuple(fit.devices),
            cpu_milli=task.cpu_milli,
            memory_mb=task.memory_mb,
        )
        ledger.allocate(owner, placement, fit.binding, attempt)
        placements.append(placement)
        gang.remaining_gpu -= task.gpu_milli
        if node.name not in gang.nodes:
            gang.nodes.append(node.name)
    return sorted(placements, key=lambda p: (p.role, p.index))
