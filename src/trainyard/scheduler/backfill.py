"""EASY backfill: the first job of a queue that cannot start gets a reservation.

The reservation is the earliest time the job would fit if running jobs ended when they are
expected to (``RunningJob.expected_end``; this cycle's starts end after their
``max_runtime``; jobs being preempted within their grace period), found by releasing them
in order of end time and trying the gang. **A running job without an expected end is
treated as never ending**; if the job fits only once such jobs are gone too, the
reservation has no start time (``inf``). Such a reservation first holds nothing: for
``SchedulerConfig.drain_after`` seconds from the job's submission, smaller jobs start on
idle GPUs as if there were none (a cluster where nobody declares run times stays busy).
After that it drains the resources it needs: they are held so that nothing long starts
on them, and the job starts when they are free, so a big job is never starved. With
``SchedulerConfig.reserve_at_once`` it drains at once what jobs of lower priority would
take (``Reservation.at_once``): a higher priority is never overtaken by lower ones. (An
opportunistic job's reservation never drains: it would hold GPUs that guaranteed work
runs on and never yields.) While a
reservation holds, later jobs in the queue may use the held resources only if they
surely end before the reservation starts (their ``max_runtime``); elsewhere they start
as usual.

Probing assumes that fitting is monotone in time (more ends, more room), and leaves other
VCs' cells bound as they are now — both conservative, neither affects correctness.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from trainyard.core.priorities import OPPORTUNISTIC_RANK
from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.cycle import Cycle, Reservation
from trainyard.scheduler.ledger import Released
from trainyard.scheduler.placement import place_gang
from trainyard.scheduler.quota import gpu_need, job_owner
from trainyard.scheduler.snapshot import PendingJob, RunningJob, TaskPlacement


def end_times(cycle: Cycle, job: PendingJob) -> tuple[list[tuple[float, int, RunningJob]], list[RunningJob]]:
    """The running work whose end could make room for ``job``: by expected end (known ends,
    sorted), and the work whose end is unknown.

    Another VC's guaranteed work is left out for a guaranteed job of a VC with cells: it
    runs in cells that job may not use, which stay bound while the reservation is probed.
    """
    now = cycle.snapshot.now
    ledger = cycle.ledger
    owner = job_owner(job)
    policy = ledger.quotas.policy(job.vc)
    in_cells = owner.guaranteed and policy is not None and policy.limited and ledger.enforced.get(job.vc, False)
    known: list[tuple[float, int, RunningJob]] = []
    unknown: list[RunningJob] = []
    for running in [*ledger.running.values(), *cycle.started]:
        if in_cells and running.vc != job.vc and running.guaranteed:
            if ledger.enforced.get(running.vc, False):
                continue
        end = running.expected_end
        if running.job_id in ledger.preempting or running.job_id in cycle.claimed:
            end = min(end if end is not None else math.inf, now + running.grace_seconds)
        if end is None or math.isinf(end):
            unknown.append(running)
        else:
            known.append((max(end, now), running.job_id, running))
    known.sort(key=lambda e: (e[0], e[1]))
    unknown.sort(key=lambda j: j.job_id)
    return known, unknown


def reserve(cycle: Cycle, job: PendingJob) -> Reservation | None:
    """The job's reservation (already holding its resources), or None if it never fits."""
    ledger = cycle.ledger
    known, unknown = end_times(cycle, job)
    times: list[float] = []
    upto: list[int] = []  # how many known ends fall at or before each distinct time
    for count, (end, _, _) in enumerate(known, start=1):
        if times and times[-1] == end:
            upto[-1] = count
        else:
            times.append(end)
            upto.append(count)
    released = Released(ledger, [running for _, _, running in known] + unknown)

    def fits_at(index: int) -> list[TaskPlacement] | None:
        released.set(upto[index])
        return _fits(cycle, job)

    found: tuple[float, list[TaskPlacement]] | None = None
    first = _first_possible(ledger.capacity.free_gpu(), gpu_need(job), known, upto)
    hit = _earliest(fits_at, first, len(times))
    if hit is not None:
        found = (times[hit[0]], hit[1])
    else:
        released.set(len(released.jobs))
        placed = _fits(cycle, job)
        if placed is not None:
            found = (math.inf, placed)
    released.tentative.discard()
    if found is None:
        return None
    drains_at = -math.inf
    at_once = False
    if math.isinf(found[0]):
        if job.priority_rank >= OPPORTUNISTIC_RANK or job.borrowing:
            # Opportunistic and borrowed work never drains: it would hold GPUs that
            # guaranteed work runs on and never yields, and idle the rest, for work that
            # is reclaimed anyway.
            drains_at = math.inf
        else:
            since = job.submitted_at if job.waiting_since is None else job.waiting_since
            drains_at = since + cycle.snapshot.config.drain_after
            at_once = cycle.snapshot.config.reserve_at_once and drains_at > cycle.snapshot.now
    reservation = Reservation(job, found[0], found[1], job_owner(job), drains_at=drains_at, at_once=at_once)
    reservation.apply(ledger)
    cycle.reservations.append(reservation)
    return reservation


def _first_possible(free: int, need: int, known: list[tuple[float, int, RunningJob]], upto: list[int]) -> int:
    """The first end time by which enough GPU could be free at all (a lower bound)."""
    freed = free
    count = 0
    for index, reached in enumerate(upto):
        while count < reached:
            freed += sum(s.milli for p in known[count][2].placements for s in p.gpus)
            count += 1
        if freed >= need:
            return index
    return len(upto)


def _earliest(
    fits_at: Callable[[int], list[TaskPlacement] | None], first: int, count: int
) -> tuple[int, list[TaskPlacement]] | None:
    """The smallest index >= ``first`` at which ``fits_at`` holds, with its placements:
    steps that double from ``first`` (few releases when it fits early), then halving."""
    tried, index, step = first - 1, first, 1
    while True:
        index = min(index, count - 1)
        if index <= tried:
            return None
        placed = fits_at(index)
        if placed is not None:
            break
        tried, index, step = index, index + step, step * 2
    best = (index, placed)
    lo, hi = tried + 1, index
    while lo < hi:
        mid = (lo + hi) // 2
        placed = fits_at(mid)
        if placed is not None:
            hi, best = mid, (mid, placed)
        else:
            lo = mid + 1
    return best


def _fits(cycle: Cycle, job: PendingJob) -> list[TaskPlacement] | None:
    refusal = cycle.ledger.quotas.admit(job)
    if refusal is not None and refusal.kind != "user":
        return None
    attempt = Tentative()
    placed = place_gang(job, cycle.ledger, cycle.scorer, attempt)
    attempt.discard()
    return placed
