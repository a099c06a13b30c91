"""The preemption planner: the fewest, cheapest running jobs to stop so a guaranteed job fits.

Who may be a victim of guaranteed job J of VC V (never anyone else):
* any opportunistic job, of any VC — reclaim: V wants its guaranteed share back;
* if V allows priority preemption, V's own guaranteed jobs of lower priority than J.
Another VC's guaranteed job is never a victim. A job already being preempted is never
preempted twice; it is the first candidate, since its resources are coming back anyway,
and it is counted as free only by the one plan that claims it.

How (Volcano's statements): candidates in order — already stopping, then lowest priority
(opportunistic first), then least work lost (shortest running), then id — are released
tentatively, skipping those that free nothing J could use: over quota, first as few of
V's own as give the quota back; then the shortest prefix of the rest after which J's whole
gang fits (found by doubling, then halving). Then victims, most valuable first, are given
back (in halving blocks) if J still fits without them. Victims are whole jobs, so gangs
stop whole.

J does not start in this cycle: its resources free only after the victims stop. It waits
as PREEMPTING, and what it will use is held (with the victims still on it) so that no one
else takes it meanwhile; in later cycles its stopping victims are counted for it again.
The scheduler keeps no plan between cycles, so a plan must hold in the cycle after the
victims stop: when V's own jobs are victims and V has both whole nodes and loose cells,
the plan is checked against V's cells derived without them (as that cycle will), and
searched again that way if it does not hold.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.cycle import Cycle, Wait
from trainyard.scheduler.ledger import Access, Ledger, Released
from trainyard.scheduler.placement import place_gang
from trainyard.scheduler.quota import job_owner
from trainyard.scheduler.snapshot import (
    OPPORTUNISTIC_RANK,
    PendingJob,
    PendingReason,
    Preempt,
    RunningJob,
    TaskPlacement,
)

PRIORITY_NAMES = ("prod", "normal", "low", "oppo")


def victim_order(cycle: Cycle) -> tuple[list[RunningJob], dict[str, list[RunningJob]]]:
    """Running jobs in the order they should be given up — already stopping first, then the
    lowest priority, then the shortest running, then by id: the opportunistic ones, and
    each VC's guaranteed ones. Sorted once per cycle."""
    if cycle.victims is None:
        ledger = cycle.ledger
        ordered = sorted(
            ledger.running.values(),
            key=lambda r: (r.job_id not in ledger.preempting, -r.priority_rank, -r.started_at, r.job_id),
        )
        by_vc: dict[str, list[RunningJob]] = {}
        opportunistic = []
        for running in ordered:
            if running.priority_rank >= OPPORTUNISTIC_RANK:
                opportunistic.append(running)
            else:
                by_vc.setdefault(running.vc, []).append(running)
        cycle.victims = (opportunistic, by_vc)
    return cycle.victims


def candidates(cycle: Cycle, job: PendingJob) -> Iterator[RunningJob]:
    """Possible victims for ``job``, in the order they should be given up (lazily)."""
    policy = cycle.ledger.quotas.policy(job.vc)
    if policy is None or job.priority_rank >= OPPORTUNISTIC_RANK:
        return iter(())
    opportunistic, by_vc = victim_order(cycle)
    streams = [iter(opportunistic)]
    if policy.allow_priority_preemption:
        streams.append(r for r in by_vc.get(job.vc, ()) if r.priority_rank > job.priority_rank)
    key = cycle.ledger.preempting
    merged = heapq.merge(
        *streams, key=lambda r: (r.job_id not in key, -r.priority_rank, -r.started_at, r.job_id)
    )
    return (r for r in merged if r.job_id not in cycle.claimed)


def plan_preemption(cycle: Cycle, job: PendingJob) -> bool:
    """Find and record victims for ``job``; False (changing nothing) if none would do."""
    ledger = cycle.ledger
    refusal = ledger.quotas.admit(job)
    if refusal is not None and refusal.kind != "vc":
        return False
    victims = _search(cycle, job, refusal is not None, rederive=False)
    if victims and _rederives(cycle, job, victims) and not _fits_after(cycle, job, victims, rederive=True):
        # Stopping the VC's own jobs changes the cells the next cycle derives for it: plan
        # against those instead (slower: the cells are derived again at every step).
        victims = _search(cycle, job, refusal is not None, rederive=True)
    if not victims:
        return False
    released = Released(ledger, victims)
    released.set(len(victims))
    rebound = Tentative()
    if _rederives(cycle, job, victims):
        ledger.cells.rebind(job.vc, _survivors(cycle, job, victims), rebound)
    plan = Tentative()
    placed = place_gang(job, ledger, cycle.scorer, plan)
    assert placed is not None, "a plan that fitted a moment ago must fit again"
    if rebound.mark() > 0:  # placed as the next cycle will see its cells: hold, do not bind
        plan.discard()
        rebound.discard()
        plan = Tentative()
        ledger.hold(job_owner(job), placed, plan)  # its resources and quota; its cells come next cycle
    plan.commit()  # J's future placement stays held ...
    released.tentative.discard()  # ... and the victims hold theirs until they stop
    _record(cycle, job, victims)
    return True


def _search(cycle: Cycle, job: PendingJob, short_of_quota: bool, *, rederive: bool) -> list[RunningJob]:
    """The fewest, cheapest victims after which ``job`` fits; [] if none do (or none needed).

    Over quota, only the VC's own lower priorities give quota back: those come first, as
    few as make the quota suffice; then whatever frees room, in the usual order.
    """
    ledger = cycle.ledger
    access = Access(ledger, job)
    gpu_tasks = [t for t in job.tasks if t.gpu_milli > 0]
    released = Released(ledger, [])

    def fits() -> bool:
        return _fits_after(cycle, job, released.jobs[: released.count], rederive=rederive, released=True)

    if short_of_quota:
        for_quota = (v for v in candidates(cycle, job) if _gives_quota(job, v))
        while ledger.quotas.admit(job) is not None:
            victim = next(for_quota, None)
            if victim is None:
                released.tentative.discard()
                return []
            released.jobs.append(victim)
            released.set(len(released.jobs))
    count = released.count
    taken = {v.job_id for v in released.jobs}
    released._more = (
        v for v in candidates(cycle, job) if v.job_id not in taken and _frees_room(ledger, access, job, gpu_tasks, v)
    )
    if not fits():
        # The shortest prefix of the rest that makes room: grow it by doubling (few victims
        # are the common case), then halve the last step.
        lo = hi = count + 1
        while True:
            total = released.available(hi)
            if total < lo:
                released.tentative.discard()
                return []
            hi = min(hi, total)
            released.set(hi)
            if fits():
                break
            lo, hi = hi + 1, count + 2 * (hi - count)
        while lo < hi:
            mid = (lo + hi) // 2
            released.set(mid)
            if fits():
                hi = mid
            else:
                lo = mid + 1
        count = lo
    if count == 0:  # it fits as things are: nothing to preempt (the caller starts it)
        released.tentative.discard()
        return []
    released.set(count)
    victims = released.jobs[:count]
    spared: set[int] = set()
    # Spare what is not needed after all, most valuable first, in halving blocks (a few
    # tries for a long list of victims of which few are needed).
    _spare(cycle, job, released.tentative, list(reversed(victims[:-1])), spared, victims, rederive)
    released.tentative.discard()
    return [v for v in victims if v.job_id not in spared]


def _rederives(cycle: Cycle, job: PendingJob, victims: list[RunningJob]) -> bool:
    """Whether stopping ``victims`` may change the cells the next cycle derives for the VC:
    only its own guaranteed jobs hold its cells, and only a VC with both whole nodes and
    loose cells can see which of its nodes is whole change when some of its jobs stop."""
    cells = cycle.ledger.cells
    mixed = any(
        b.whole > 0 and b.loose > 0 and cells.per_node.get(model, 1) > 1
        for (vc, model), b in cells.budget.items()
        if vc == job.vc
    )
    return mixed and any(v.vc == job.vc and v.priority_rank < OPPORTUNISTIC_RANK for v in victims)


def _survivors(cycle: Cycle, job: PendingJob, victims: list[RunningJob]) -> list[RunningJob]:
    gone = {v.job_id for v in victims}
    mine = [*cycle.ledger.running.values(), *cycle.started]
    return [r for r in mine if r.vc == job.vc and r.priority_rank < OPPORTUNISTIC_RANK and r.job_id not in gone]


def _fits_after(
    cycle: Cycle, job: PendingJob, victims: list[RunningJob], *, rederive: bool, released: bool = False
) -> bool:
    """Whether ``job`` fits once ``victims`` have stopped (``released``: they are released in
    the ledger already); ``rederive``: with its VC's cells derived as the next cycle will."""
    ledger = cycle.ledger
    undo = Tentative()
    if not released:
        for victim in victims:
            ledger.release(victim, undo)
    if rederive and _rederives(cycle, job, victims):
        ledger.cells.rebind(job.vc, _survivors(cycle, job, victims), undo)
    fits = _fits(cycle, job) is not None
    undo.discard()
    return fits


def _spare(
    cycle: Cycle,
    job: PendingJob,
    tentative: Tentative,
    block: list[RunningJob],
    spared: set[int],
    victims: list[RunningJob],
    rederive: bool,
) -> None:
    if not block:
        return
    mark = tentative.mark()
    for victim in block:
        cycle.ledger.occupy(victim, tentative)
    sparing = {v.job_id for v in block}
    kept = [v for v in victims if v.job_id not in spared and v.job_id not in sparing]
    if _fits_after(cycle, job, kept, rederive=rederive, released=True):
        spared.update(v.job_id for v in block)
        return
    tentative.rollback(mark)
    if len(block) > 1:
        half = len(block) // 2
        _spare(cycle, job, tentative, block[:half], spared, victims, rederive)
        _spare(cycle, job, tentative, block[half:], spared, victims, rederive)


def _fits(cycle: Cycle, job: PendingJob) -> list[TaskPlacement] | None:
    if cycle.ledger.quotas.admit(job) is not None:
        return None
    attempt = Tentative()
    placed = place_gang(job, cycle.ledger, cycle.scorer, attempt)
    attempt.discard()
    return placed


def _gives_quota(job: PendingJob, victim: RunningJob) -> bool:
    return (
        victim.vc == job.vc
        and victim.priority_rank < OPPORTUNISTIC_RANK
        and any(s.milli for p in victim.placements for s in p.gpus)
    )


def _frees_room(ledger: Ledger, access: Access, job: PendingJob, gpu_tasks: list, victim: RunningJob) -> bool:
    """Whether stopping ``victim`` frees anything ``job`` could be placed on."""
    nodes = ledger.capacity.nodes
    for p in victim.placements:
        node = nodes.get(p.node)
        if node is None or not node.schedulable:
            continue
        if len(gpu_tasks) < len(job.tasks):
            return True  # a CPU-only task can use the CPU and memory it frees
        for share in p.gpus:
            pos = node.position.get(share.index)
            if pos is not None and access.may_use(node, pos) and any(node.suits(pos, t) for t in gpu_tasks):
                return True
    return False


def _record(cycle: Cycle, job: PendingJob, victims: list[RunningJob]) -> None:
    ledger = cycle.ledger
    owner = job_owner(job)
    for victim in sorted(victims, key=lambda v: v.job_id):
        cycle.claimed.add(victim.job_id)
        if victim.job_id in ledger.preempting:
            continue
        if victim.priority_rank >= OPPORTUNISTIC_RANK:
            why = f"reclaimed: VC {owner.vc} needs its guaranteed GPUs back for job {job.job_id}"
        else:
            why = (
                f"preempted by job {job.job_id} of higher priority "
                f"({PRIORITY_NAMES[owner.rank]}) in VC {owner.vc}"
            )
        cycle.preemptions.append(Preempt(victim.job_id, victim.grace_seconds, why, job.job_id))
    now = cycle.snapshot.now
    eta = now + max((v.grace_seconds for v in victims), default=0.0)
    cycle.wait(job, Wait(PendingReason.PREEMPTING, eta=eta, victims=tuple(sorted(v.job_id for v in victims))))
