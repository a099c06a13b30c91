"""Borrowing: a guaranteed job over its VC's quota runs on other VCs' idle guaranteed GPUs.

Kueue's cohorts and KAI Scheduler's over-quota share, in the scheduler's terms:

* **Who borrows.** A job of a guaranteed priority (prod, normal, low) that its VC's quota
  refuses, once every guaranteed job that could start in its quota has, and every
  reservation and preemption plan for one holds (so borrowing never delays a guarantee).
  Borrowing comes before preempting the VC's own lower priorities to make quota: it
  stops nothing.
* **What it may take.** Idle GPUs anywhere, as borrowed work (``RunningJob.borrowed``):
  it holds no quota and no cells, as opportunistic work, so HiveD's promise is unchanged;
  it counts against what may be borrowed instead (``Quotas.borrow_free``): for each GPU
  model, every VC's unused quota up to its lending limit (``VirtualCluster.lend_limit``),
  less what is borrowed already, and at most its own VC's borrowing limit
  (``borrow_limit``).
* **Who goes first.** Idle GPUs go to the VCs that want them in proportion to their
  weights, not to whoever asked first: borrowing VCs take turns by their *weighted
  borrowed share* — the GPUs their borrowed work holds now plus, with fair share on, the
  average they have borrowed recently (``Snapshot.borrowed_usage``, decayed with the
  half-life), divided by their weight; each job a VC starts adds to it. Within a VC its
  own order (priority, fair share between users, submit time) holds.
* **Reclaim.** Borrowed work is reclaimed like opportunistic work — after it, and the VC
  furthest over its weighted share first (``preemption.victim_key``) — by any job that
  runs within its VC's quota, as soon as that job needs the GPUs: suspended where it can
  be, else requeued. A borrowing job may itself reclaim opportunistic work, and, for fair
  share, another VC's borrowed work once that has run a whole time slice and only while
  that VC's weighted share stays above its own (``preemption.fair_victim``).

A borrowed job stays borrowed until it ends or is reclaimed; when it waits again it is
admitted afresh, in its quota if that has room by then.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import replace

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.cycle import Cycle, Reservation, Shape, Wait, shape, start_if_fits
from trainyard.scheduler.placement import fits_somewhere, place_gang
from trainyard.scheduler.preemption import borrow_shares, plan_preemption, vc_weight
from trainyard.scheduler.quota import Refusal, gpu_need
from trainyard.scheduler.snapshot import PendingJob, PendingReason, TaskRequest

# Preemption plans for borrowing jobs per cycle (as ``schedule.PLANS_PER_QUEUE`` per VC).
BORROW_PLANS = 16
# Refusals of a borrowing job that preempting other VCs' borrowed work may lift.
LIFTED_BY_RECLAIM = ("nothing_idle", "lend_limit")


def candidates(cycle: Cycle, order: Sequence[PendingJob]) -> list[PendingJob]:
    """The jobs to try as borrowed work, in queue order: waiting for their VC's quota and
    nothing else, or never fitting its cells (``outside_cells``), in a VC that may borrow."""
    if not cycle.snapshot.config.borrowing or not cycle.snapshot.vcs:
        return []
    quotas = cycle.ledger.quotas
    found = []
    for job in order:
        wait = cycle.waits.get(job.job_id)
        refused = wait is not None and (
            (wait.reason == PendingReason.QUOTA and wait.refusal is not None and wait.refusal.kind == "vc")
            or wait.outside_cells)
        if refused and quotas.may_borrow(job):
            found.append(job)
    return found


def borrows_now(cycle: Cycle, job: PendingJob) -> bool:
    """Whether ``job`` (refused by its VC's quota) would start as borrowed work as things
    are: then it is not worth stopping its VC's own lower priorities for it."""
    if not cycle.snapshot.config.borrowing or not cycle.ledger.quotas.may_borrow(job):
        return False
    borrowing = replace(job, borrowing=True)
    if cycle.ledger.quotas.admit(borrowing) is not None:
        return False
    somewhere = fits_somewhere(borrowing, cycle.ledger)
    if somewhere is not None:
        return somewhere
    attempt = Tentative()
    placed = place_gang(borrowing, cycle.ledger, cycle.scorer, attempt)
    attempt.discard()
    return placed is not None


def borrow_order(cycle: Cycle, jobs: Sequence[PendingJob]) -> list[PendingJob]:
    """``jobs`` (in queue order) interleaved by VC: the next is always the first job of the
    VC with the least weighted borrowed share, counting the jobs placed before it."""
    by_vc: dict[str, list[PendingJob]] = {}
    for job in jobs:
        by_vc.setdefault(job.vc, []).append(job)
    shares = borrow_shares(cycle)
    weights = {vc: vc_weight(cycle, vc) for vc in by_vc}
    needs: dict[tuple[TaskRequest, ...], int] = {}  # most jobs share a few kinds of tasks
    heap: list[tuple[float, str, int]] = [(shares.get(vc, 0.0), vc, 0) for vc in by_vc]
    heapq.heapify(heap)
    out = []
    while heap:
        share, vc, index = heapq.heappop(heap)
        job = by_vc[vc][index]
        out.append(job)
        if index + 1 < len(by_vc[vc]):
            need = needs.get(job.tasks)
            if need is None:
                need = needs[job.tasks] = gpu_need(job)
            heapq.heappush(heap, (share + need / MILLI / weights[vc], vc, index + 1))
    return out


def run_borrowing(cycle: Cycle, order: Sequence[PendingJob], holds: list[Reservation | None]) -> None:
    """Try the jobs waiting for their VC's quota as borrowed work, then plan preemption
    (opportunistic work, other VCs' borrowed work by fair share) for those it could help.

    ``holds`` are the guaranteed queues' reservations, applied: a job's own is lifted
    while it is tried, and dropped if it starts. Every job tried keeps its quota wait,
    with why borrowing did not start it, unless it now waits for victims to stop.
    """
    jobs = candidates(cycle, order)
    if not jobs:
        return
    own = {r.job.job_id: r for r in holds if r is not None}
    before = {job.job_id: cycle.waits[job.job_id] for job in jobs}
    failed: dict[Shape, Wait] = {}
    # The waits of jobs whose shape failed, by (their quota wait, the outcome): the same
    # two give the same wait, one object shared as ``run_queue`` shares its own (at 14,000
    # waiting jobs, a copy each was a tenth of the cycle: issue 33).
    worded: dict[tuple[int, int], Wait] = {}
    # Jobs whose shape is known are not copied as borrowed work (``borrowing``): the copy
    # is made only for a job tried here, and by ``_preempt_for_borrowers`` for one it plans.
    blocked: list[PendingJob] = []
    for job in borrow_order(cycle, jobs):
        key = borrowed_shape(cycle, job)
        known = failed.get(key)
        if known is not None:  # its own quota wait (its reservation, if any), the same outcome
            quota_wait = before[job.job_id]
            wait = worded.get((id(quota_wait), id(known)))
            if wait is None:
                wait = worded[(id(quota_wait), id(known))] = _borrow_wait(quota_wait, known.borrow_refusal)
            cycle.wait(job, wait)
            if known.borrow_refusal is None or known.borrow_refusal.kind in LIFTED_BY_RECLAIM:
                blocked.append(job)
            continue
        job = replace(job, borrowing=True)
        hold = own.get(job.job_id)
        if hold is not None:
            hold.lift()
        if start_if_fits(cycle, job):
            if hold is not None:
                holds[holds.index(hold)] = None
            continue
        if hold is not None:
            hold.apply(cycle.ledger)
        refusal = cycle.ledger.quotas.admit(job)
        cycle.wait(job, _borrow_wait(before[job.job_id], refusal))
        failed[key] = cycle.waits[job.job_id]
        if refusal is None or refusal.kind in LIFTED_BY_RECLAIM:
            blocked.append(job)
    _preempt_for_borrowers(cycle, blocked, own)


def borrowed_shape(cycle: Cycle, job: PendingJob) -> Shape:
    """The shape of ``job`` tried as borrowed work, whether or not it is that copy."""
    kind = shape(cycle, job)
    return kind if job.borrowing else (kind[0], kind[1], kind[2], True, kind[4])


def _borrow_wait(quota_wait: Wait, refusal: Refusal | None) -> Wait:
    limited = refusal is not None and refusal.kind in ("borrow_limit", "lend_limit")
    waits_for = PendingReason.NO_FIT if quota_wait.outside_cells else PendingReason.QUOTA
    return replace(
        quota_wait, reason=PendingReason.BORROW_LIMIT if limited else waits_for,
        borrow_tried=True, borrow_refusal=refusal,
    )


def _preempt_for_borrowers(cycle: Cycle, blocked: list[PendingJob], own: dict[int, Reservation]) -> None:
    hopeless: set[Shape] = set()
    plans = 0
    for job in blocked:
        if plans >= BORROW_PLANS:
            break  # the rest are planned in the next cycles, in borrowing order
        key = borrowed_shape(cycle, job)
        if key in hopeless:
            continue
        if not job.borrowing:
            job = replace(job, borrowing=True)
        hold = own.get(job.job_id)
        if hold is not None:
            hold.lift()
        quota_wait = cycle.waits[job.job_id]
        stopping = len(cycle.preemptions)
        if plan_preemption(cycle, job):
            plans += len(cycle.preemptions) > stopping
            continue
        cycle.waits[job.job_id] = quota_wait
        if hold is not None:
            hold.apply(cycle.ledger)
        hopeless.add(key)
