"""Gang placement: every task of a gang placed, or none, with the configured scorer."""

from __future__ import annotations

from collections.abc import Sequence

from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.quota import job_owner
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter, Scorer, first_fit
from trainyard.scheduler.snapshot import PendingJob, TaskPlacement, TaskRequest


class CellOrder:
    """The cell model's own order (``Access.tiers``: the VC's cells, then holes, then the
    emptiest fresh nodes), first fit. A scorer that trades that order for a better score
    can bind a node that cannot hold the rest of the gang — FGD binds a partly used node
    to keep an empty one whole for other work — and the gang then fails where the cell
    order places it; so a guaranteed gang in cells that its scorer cannot place is tried
    once more this way. The preemption planner places through ``place_gang`` too, so a
    plan it makes is one the next cycle finds again."""

    def attempts(self, job: PendingJob, ledger: Ledger) -> Sequence[NodeFilter | None]:
        return (None,)

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        return first_fit(task, access)


CELL_ORDER = CellOrder()


def task_order(job: PendingJob) -> list[TaskRequest]:
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
    if scorer is not CELL_ORDER and Access(ledger, job).in_cells:
        return place_gang(job, ledger, CELL_ORDER, tentative)
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
