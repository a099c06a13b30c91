"""Gang placement: every task of a gang placed, or none, with the configured scorer."""

from __future__ import annotations

from collections.abc import Sequence

from trainyard.core.resources import MILLI
from trainyard.scheduler import whole_nodes
from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.quota import job_owner
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter, Scorer, first_fit, select_bestfit
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
    """Place every task of ``job`` (allocating into ``tentative``), or change nothing.

    Tasks are placed one at a time, largest first. A task that finds no room once the
    tasks before it are placed may be the gang's real bottleneck — a smaller task that
    only one node can host (for its CPU, memory or GPU model), whose GPUs a larger task
    took — so the gang is tried again with that task first, each kind of task first at
    most once (a gang of one kind of task is never tried twice). Without that, such a gang
    waits as NO_FIT even on an idle cluster, or gets a preemption plan that only holds
    while the scorer measures the same pending mix.
    """
    attempts: Sequence[NodeFilter | None] = scorer.attempts(job, ledger)
    if job.avoid_nodes:  # a retry after a platform fault: elsewhere first, there if nowhere else
        attempts = [*(_avoiding(job.avoid_nodes, only) for only in attempts), *attempts]
    for only in attempts:
        order = task_order(job)
        first = {_kind(t) for t in order[:1]}
        while True:
            attempt = Tentative()
            placements, stuck = _place_all(job, ledger, scorer, attempt, only, order)
            if placements is not None:
                tentative.adopt(attempt)
                return placements
            attempt.discard()
            if stuck is None or _kind(stuck) in first:
                break
            first.add(_kind(stuck))
            order = [stuck, *(t for t in order if t is not stuck)]
    if scorer is not CELL_ORDER and not _one_device(job, ledger) and Access(ledger, job).in_cells:
        return place_gang(job, ledger, CELL_ORDER, tentative)
    return None


def _one_device(job: PendingJob, ledger: Ledger) -> bool:
    """A job of one task on one device (a fraction, or one GPU), on nodes of one GPU model
    each: whether a node takes it, in cells too, does not depend on which device a scorer
    picks (it binds one cell, of the node's one model, whichever: ``Cells.binding_for``
    looks at the node and the number of cells), so a scorer that finds no node leaves none
    to the cell order or to first fit."""
    tasks = job.tasks
    return (
        len(tasks) == 1 and tasks[0].gpu_milli <= MILLI and not tasks[0].whole_node and not job.avoid_nodes
        and not ledger.capacity.mixed
    )


def fits_somewhere(job: PendingJob, ledger: Ledger, *, cells: bool = True) -> bool | None:
    """Whether ``place_gang`` would place ``job`` with any scorer, worked out without one
    (cheap); None where this cannot tell. For questions that need only a yes or no
    (``borrows_now``, ``schedule._held_back``, a preemption plan's probes): a scorer's
    search costs up to a hundred times more.

    Every scorer is complete for one task: it places it wherever some node in
    ``Access.tiers`` takes it. Outside cells, on nodes of one GPU model, whether a node
    takes a task does not depend on which devices the scorer would pick (in cells it
    does, for a task on several devices: which cells it binds; on a node of several
    models: the quota per model). So one task fits if some node takes it (first fit over
    the emptiest nodes first: the likeliest to take it at once); in cells, a task on one
    device (``_one_device``) fits if some node of the tiers takes it (``cells``: whether to
    answer for those; where a yes is followed by the placement itself, the scorer's search
    alone costs less). A gang of like tasks of whole GPUs each takes one *slot* of one node
    (a node has as many as its free suitable GPUs, CPU and memory hold tasks), whatever the
    order they are placed in or the nodes a scorer prefers, so it fits if the nodes have
    as many slots as it has tasks. Other gangs (unlike tasks, fractions), whole-node tasks
    and retries that avoid nodes are left to ``place_gang``.
    """
    tasks = job.tasks
    if not tasks or job.avoid_nodes or tasks[0].whole_node:
        return None
    task = tasks[0]
    if len(tasks) > 1 and (task.gpu_milli < MILLI or task.gpu_milli % MILLI
                           or any(_kind(t) != _kind(task) for t in tasks[1:])):
        return None
    access = Access(ledger, job)
    if access.in_cells:
        if not cells or not _one_device(job, ledger):
            return None
        return any(access.fit(node, task, select_bestfit) is not None for tier in access.tiers(task) for node in tier)
    per_model = task.gpu_milli > 0 and (access.limited or access.borrowing)
    # Outside cells ``Access.tiers`` is one tier, these nodes best fit first; any order answers.
    nodes = ledger.capacity.candidates(task, emptiest_first=True)
    if len(tasks) == 1:
        fraction = 0 < task.gpu_milli < MILLI
        for node in nodes:
            if per_model and node.only_model is None:
                return None
            if fraction and max(node.gpu_free) < task.gpu_milli:
                continue  # no device with room: ``Access.fit`` says no, at more cost
            if access.fit(node, task, select_bestfit) is not None:
                return True
        return False
    wanted = task.gpu_milli // MILLI
    # Borrowed work also counts against what may be borrowed, per model: no more tasks on a
    # model's nodes than that allows (each placement takes a slot and its quota).
    slots: dict[str | None, int] = {}
    for node in nodes:
        if per_model and node.only_model is None:
            return None
        if access.fit(node, task, select_bestfit) is None:
            continue
        whole = sum(1 for p, free in enumerate(node.gpu_free) if free == MILLI and node.suits(p, task))
        model = node.only_model
        slots[model] = slots.get(model, 0) + min(
            whole // wanted,
            node.cpu_milli // task.cpu_milli if task.cpu_milli > 0 else len(tasks),
            node.memory_mb // task.memory_mb if task.memory_mb > 0 else len(tasks),
        )
        if access.borrowing:
            quotas = ledger.quotas
            vc = access.owner.vc
            total = sum(min(n, quotas.borrow_free(vc, m or "") // task.gpu_milli) for m, n in slots.items())
        else:
            total = sum(slots.values())
        if total >= len(tasks):
            return True
    return False


def _avoiding(nodes: frozenset[str], only: NodeFilter | None) -> NodeFilter:
    return lambda node: node.name not in nodes and (only is None or only(node))


def _kind(task: TaskRequest) -> tuple[object, ...]:
    """What decides where a task fits (its request, not its name)."""
    return (task.gpu_milli, task.cpu_milli, task.memory_mb, task.gpu_models, task.gpu_memory_mb, task.whole_node,
            task.selector)


def _place_all(
    job: PendingJob, ledger: Ledger, scorer: Scorer, attempt: Tentative, only: NodeFilter | None,
    order: list[TaskRequest],
) -> tuple[list[TaskPlacement] | None, TaskRequest | None]:
    """The gang's placements in ``order``; else None and the task that found no room."""
    access = Access(ledger, job, only)
    owner = job_owner(job)
    gang = GangProgress(job, remaining_gpu=sum(t.gpu_milli for t in order))
    placements = []
    for task in order:
        if task.whole_node:  # no scorer's choice: the smallest suitable empty node
            chosen = whole_nodes.choose(task, access)
            if chosen is None:
                return None, task
            node, took, fit = chosen
        else:
            choice = scorer.choose(task, access, gang)
            if choice is None:
                return None, task
            (node, fit), took = choice, task
        placement = TaskPlacement(
            role=task.role,
            index=task.index,
            node=node.name,
            gpus=tuple(fit.devices),
            cpu_milli=took.cpu_milli,
            memory_mb=took.memory_mb,
            whole_node=task.whole_node,
        )
        ledger.allocate(owner, placement, fit.binding, attempt)
        placements.append(placement)
        gang.remaining_gpu -= task.gpu_milli
        if node.name not in gang.nodes:
            gang.nodes.append(node.name)
    return sorted(placements, key=lambda p: (p.role, p.index)), None
