"""Gangs that can never fit their VC's cells run as borrowed work instead of waiting for ever.

HiveD's promise (``cells``) covers a gang whose tasks each fit in a cell or take whole
nodes. A task in between — 5 GPUs where cells are 4 GPUs on 8-GPU nodes — needs a node to
itself among its VC's whole nodes, and a VC may hold only ``quota // node size`` of those:
4 tasks of 5 GPUs in a VC guaranteed 20 GPUs (two whole nodes and one cell of 4) fit its
quota and never its cells. Admitted by quota and refused by every placement, such a job
used to wait ``NO_FIT`` for ever, on an empty cluster too, holding its queue's reservation.

Now a guaranteed job outside the promise (``within_promise`` is the cheap test every job
passes that the promise covers) that would not start even alone on the emptied cluster
(``schedule.never_in_cells``, one trial ``schedule`` per VC and set of task resources, made
only for such jobs, at most ``TRIALS_PER_CYCLE`` a cycle)
is not placed in its quota: it reserves nothing, preempts nothing as guaranteed work, and
is tried in the borrowing pass as borrowed work — reclaimable, holding no cells, so other
VCs' guarantees are unchanged. Where its VC may not borrow it waits ``NO_FIT`` with the
reason and what to ask for instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainyard.core.resources import MILLI
from trainyard.scheduler.cells import Budget, Cells
from trainyard.scheduler.snapshot import PendingJob


def _models(cells: Cells, quota: Mapping[str, int] | None, job: PendingJob, allowed: tuple[str, ...]) -> list[str]:
    """The GPU models of the VC's quota the task may use, that have cells."""
    return [m for m in sorted(quota or {}) if m in cells.size and (not allowed or m in allowed)]


def within_promise(cells: Cells, quota: Mapping[str, int] | None, job: PendingJob) -> bool:
    """Whether every task of ``job`` fits in one cell or takes whole nodes, for every model
    of its VC's quota it may use (HiveD's condition; GPU fractions share one device)."""
    for task in job.tasks:
        if task.gpu_milli <= MILLI:
            continue
        if task.gpu_milli % MILLI:
            return False
        gpus = task.gpu_milli // MILLI
        for model in _models(cells, quota, job, task.gpu_models):
            size = cells.size[model]
            node = cells.per_node.get(model, 0) * size
            if size % gpus and (node == 0 or gpus % node):
                return False
    return True


def describe(cells: Cells, quota: Mapping[str, int] | None, job: PendingJob) -> str:
    """What the VC's cells are and which tasks do not fit them, for the job's reason."""
    sizes = sorted({t.gpu_milli // MILLI for t in job.tasks if t.gpu_milli > MILLI})
    budgets = []
    for model in _models(cells, quota, job, ()):
        budget = cells.budget.get((job.vc, model), Budget(0, 0))
        size = cells.size[model]
        budgets.append(
            f"{(quota or {})[model]} {model}: {budget.whole} whole node(s) of {cells.per_node[model] * size} GPUs "
            f"and {budget.loose} cell(s) of {size}"
        )
    return (
        f"its task(s) of {'/'.join(str(s) for s in sizes)} GPUs can never fit VC {job.vc}'s cells "
        f"({'; '.join(budgets) or 'none'}): a task in a VC's quota takes one cell or whole nodes"
    )
