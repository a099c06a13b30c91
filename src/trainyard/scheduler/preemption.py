"""The preemption planner: the fewest, cheapest running jobs to stop so a guaranteed job fits.

Who may be a victim of guaranteed job J of VC V (never anyone else):
* any elastic job's workers beyond its minimum (``elastic``), first: they use GPUs no one
  waiting could, and lose only a restart from the job's last checkpoint;
* any opportunistic job, of any VC, and any borrowed work (``borrowing``) — reclaim: V
  wants its guaranteed share back; borrowed work of the VC that borrows most beyond its
  weighted share goes first;
* if V allows priority preemption, V's own guaranteed jobs of lower priority than J;
* with time-sharing (``SchedulerConfig.timeshare``), V's own suspendable jobs of J's
  priority that have received enough more service than J (GPU-seconds over their whole
  chain: ``turn_ratio`` times J's, and more than ``turn_floor``) and have run a whole time
  slice since they last (re)started: jobs take turns, least attained service first, and
  none is suspended more than once per slice (the rules are ``turns``').
Another VC's guaranteed job is never a victim. A job J tried as borrowed work (over its
VC's quota, ``PendingJob.borrowing``) may take only extra workers and opportunistic work, and — fair share
by weight — borrowed work of another VC whose weighted borrowed share is above what V's
would be with J, once that work has run a whole time slice (with
``SchedulerConfig.borrow_within_vcs``, also another VC's borrowed work of lower priority
than J's, at once: ``lower_borrowed``). A job already being preempted is never
preempted twice; it is the first candidate, since its resources are coming back anyway,
and it is counted as free only by the one plan that claims it.

How (Volcano's statements): candidates in order — already stopping, then lowest priority
(opportunistic first), then suspendable ones (they lose only a checkpoint's worth), the
most attained service first, then the rest by least work lost (shortest running), then
id — are released
tentatively, skipping those that free nothing J could use: over quota, first as few of
V's own as give the quota back; then the shortest prefix of the rest after which J's whole
gang fits (found by doubling, then halving). Then victims, most valuable first, are given
back (in halving blocks) if J still fits without them. Victims are whole jobs, so gangs
stop whole.

J does not start in this cycle: its resources free only after the victims stop. It waits
as PREEMPTING, and what it will use is held (with the victims still on it) so that no one
else takes it meanwhile; in later cycles its stopping victims are counted for it again.
The scheduler keeps no plan between cycles, so a plan must hold in the cycle after the
victims stop, and that cycle derives every VC's cells again from the work still running.
When guaranteed work leaves (J's victims, or work stopping already, for J or for another
job) and some VC may hold whole nodes of several cells, cells can change hands — not only
the leaving work's VC's: a VC's loose cell becomes part of its whole node once no other VC
holds a cell of that node, and the hole beside it that J counted on is gone. So the plan
is checked against every VC's cells derived without the victims and the work stopping
already (as that cycle will), and searched again that way if it does not hold; either
way J then waits for the work stopping already as well.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterator

from trainyard.core.priorities import OPPORTUNISTIC_RANK, Priority
from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.cycle import Cycle, Wait
from trainyard.scheduler.ledger import Access, Ledger, Released
from trainyard.scheduler.placement import fits_somewhere, place_gang
from trainyard.scheduler.quota import job_owner
from trainyard.scheduler.snapshot import (
    PendingJob,
    PendingReason,
    Preempt,
    RunningJob,
    TaskPlacement,
    TaskRequest,
)
from trainyard.scheduler.turns import slice_over, turn_over_for, turn_threshold

VictimKey = tuple[bool, int, float, int, bool, float, int]


def victim_key(cycle: Cycle) -> Callable[[RunningJob], VictimKey]:
    """The order running jobs are given up in: already stopping first, then elastic jobs'
    workers beyond their minimum (shrinking before suspending or stopping; those whose job
    loses least of its speed without them first), then opportunistic
    work, then borrowed work (of the VC furthest over its weighted share first), then
    guaranteed work; within each, the lowest priority, then suspendable ones, the most
    attained service first (LAS), then the others by least work lost (shortest running),
    then by id."""
    stopping = cycle.ledger.preempting
    now = cycle.snapshot.now
    shares = borrow_shares(cycle)

    def key(r: RunningJob) -> VictimKey:
        cost = -r.attained_at(now) if r.suspendable else -r.started_at
        tier = -1 if r.extra else 0 if r.priority_rank >= OPPORTUNISTIC_RANK else 1 if r.borrowed else 2
        share = -shares.get(r.vc, 0.0) if tier == 1 else r.worth if tier == -1 else 0.0
        return (r.job_id not in stopping, tier, share, -r.priority_rank, not r.suspendable, cost, r.job_id)

    return key


def borrow_shares(cycle: Cycle) -> dict[str, float]:
    """Each VC's weighted borrowed share at the start of the cycle: the GPUs its borrowed
    work holds, plus (fair share on) the GPUs it has borrowed on average recently
    (``Snapshot.borrowed_usage`` over ``H / ln 2``), divided by its weight
    (``VirtualCluster.weight``). The one measure of who borrows first (``borrowing``) and
    whose borrowed work goes first (``victim_key``, ``fair_victim``)."""
    if cycle.borrow_shares is None:
        shares: dict[str, float] = defaultdict(float)
        leaving = cycle.ledger.preempting | cycle.claimed
        for r in (*cycle.ledger.running.values(), *cycle.started):
            if r.borrowed and r.job_id not in leaving:
                shares[r.vc] += r.gpus
        half_life = cycle.snapshot.config.fair_share_half_life
        if half_life > 0:
            for vc, used in cycle.snapshot.borrowed_usage.items():
                shares[vc] += used * math.log(2) / half_life
        cycle.borrow_shares = defaultdict(float, {vc: gpus / vc_weight(cycle, vc) for vc, gpus in shares.items()})
    return cycle.borrow_shares


def _shift_shares(cycle: Cycle, job: PendingJob, victims: list[RunningJob]) -> None:
    """A plan's effect on the weighted borrowed shares, for the plans after it in this cycle:
    its borrowed victims' VCs lose them, and the job's VC gains it if it borrows."""
    if cycle.borrow_shares is None:
        return  # not asked yet: worked out from scratch (with the plans' claims) when it is
    shares = cycle.borrow_shares
    for victim in victims:
        if victim.borrowed:
            shares[victim.vc] -= victim.gpus / vc_weight(cycle, victim.vc)
    if job.borrowing:
        shares[job.vc] += sum(t.gpu_milli for t in job.tasks) / 1000 / vc_weight(cycle, job.vc)


def vc_weight(cycle: Cycle, vc: str) -> float:
    policy = cycle.ledger.quotas.vcs.get(vc)
    return policy.weight if policy is not None and policy.weight > 0 else 1.0


def fair_victim(cycle: Cycle, job: PendingJob, running: RunningJob) -> bool:
    """Whether borrowed ``job`` may reclaim ``running`` for fair share: borrowed work of
    another VC that has run a whole time slice since it last started (no churn within a
    slice), and whose VC's weighted share without it stays at least what ``job``'s VC's
    would be with ``job`` (Kueue's rule: the freed GPUs then go to ``job``'s VC in the next
    cycles' borrowing order, not back; ``fair_after`` checks the whole plan)."""
    if not running.borrowed or running.vc == job.vc:
        return False
    if cycle.snapshot.now - running.started_at < cycle.snapshot.config.time_slice:
        return False
    return fair_after(cycle, job, [running])


def lower_borrowed(cycle: Cycle, job: PendingJob, running: RunningJob) -> bool:
    """Whether borrowed ``job`` may reclaim ``running`` for its priority alone
    (``SchedulerConfig.borrow_within_vcs``, Kueue's ``borrowWithinCohort: LowerPriority``):
    another VC's borrowed work of lower priority, at once."""
    return (cycle.snapshot.config.borrow_within_vcs and running.borrowed and running.vc != job.vc
            and running.priority_rank > job.priority_rank)


def fair_after(cycle: Cycle, job: PendingJob, victims: list[RunningJob]) -> bool:
    """Whether every VC that ``victims`` (borrowed work of other VCs) take from keeps a
    weighted borrowed share at least that of ``job``'s VC once ``job`` borrows (victims
    taken for their lower priority, ``lower_borrowed``, are not counted)."""
    shares = borrow_shares(cycle)
    mine = shares.get(job.vc, 0.0) + sum(t.gpu_milli for t in job.tasks) / 1000 / vc_weight(cycle, job.vc)
    taken: dict[str, float] = defaultdict(float)
    for victim in victims:
        if victim.borrowed and victim.vc != job.vc and not lower_borrowed(cycle, job, victim):
            taken[victim.vc] += victim.gpus
    return all(shares.get(vc, 0.0) - gpus / vc_weight(cycle, vc) >= mine for vc, gpus in taken.items())


def victim_order(cycle: Cycle) -> tuple[list[RunningJob], dict[str, list[RunningJob]]]:
    """Running jobs in ``victim_key``'s order: the reclaimable ones (opportunistic and
    borrowed work), and each VC's guaranteed ones. Sorted once per cycle."""
    if cycle.victims is None:
        ledger = cycle.ledger
        ordered = sorted(ledger.running.values(), key=victim_key(cycle))
        by_vc: dict[str, list[RunningJob]] = {}
        reclaimable = []
        for running in ordered:
            if not running.guaranteed:
                reclaimable.append(running)
            else:
                by_vc.setdefault(running.vc, []).append(running)
        cycle.victims = (reclaimable, by_vc)
    return cycle.victims


def candidates(
    cycle: Cycle, job: PendingJob, useful: Callable[[RunningJob], bool] | None = None
) -> Iterator[RunningJob]:
    """Possible victims for ``job`` that ``useful`` accepts, in the order they should be
    given up (lazily): opportunistic and borrowed work; the VC's own lower priorities
    (when its policy allows); its own jobs whose turn is over (``takes_turn_from``); and
    guaranteed work of another VC that holds more than its quota (an admin lowered it) —
    ``plan_preemption`` then takes no more of it than the overage. A job tried as borrowed
    work: opportunistic work, and other VCs' borrowed work by fair share (``fair_victim``)."""
    policy = cycle.ledger.quotas.policy(job.vc)
    if policy is None or job.priority_rank >= OPPORTUNISTIC_RANK:
        return iter(())
    reclaimable, by_vc = victim_order(cycle)
    claimed = cycle.claimed  # stopping for another plan already: see ``_claimed_for``
    if job.borrowing:
        return (
            v for v in reclaimable
            if v.job_id not in claimed
            and (v.extra or v.priority_rank >= OPPORTUNISTIC_RANK or lower_borrowed(cycle, job, v)
                 or fair_victim(cycle, job, v))
            and (useful is None or useful(v))
        )
    streams: list[Iterator[RunningJob]] = [iter(reclaimable)]
    if policy.allow_priority_preemption:
        streams.append(r for r in by_vc.get(job.vc, ()) if r.priority_rank > job.priority_rank)
    if cycle.snapshot.config.timeshare:
        # Without VCs, one VC holds every job (``Quotas.implicit``), whatever VC it names.
        # ``_turns`` is in ``victim_key``'s order, as the streams merged here must be.
        anyone = not cycle.snapshot.vcs
        threshold = turn_threshold(cycle.snapshot.config, job.attained_service)
        streams.append(
            r for attained, r in _turns(cycle).get(job.priority_rank, ())
            if attained > threshold and (anyone or r.vc == job.vc)
        )
    over = _over_quota(cycle, job.vc)
    for vc in sorted({vc for vc, _ in over}):
        streams.append(r for r in by_vc.get(vc, ()) if _on_over_models(cycle, r, over))
    merged = heapq.merge(*streams, key=victim_key(cycle))
    return (v for v in merged if v.job_id not in claimed and (useful is None or useful(v)))


def _turns(cycle: Cycle) -> dict[int, list[tuple[float, RunningJob]]]:
    """Guaranteed running jobs whose time slice is over (``turns.slice_over``), by priority,
    with the service they have attained, in ``victim_key``'s order. Derived once per cycle."""
    if cycle.turns is None:
        config, now = cycle.snapshot.config, cycle.snapshot.now
        _, by_vc = victim_order(cycle)
        merged = heapq.merge(*(by_vc[vc] for vc in sorted(by_vc)), key=victim_key(cycle))
        cycle.turns = {}
        for r in merged:
            if slice_over(config, r, now):
                cycle.turns.setdefault(r.priority_rank, []).append((r.attained_at(now), r))
    return cycle.turns


def takes_turn_from(cycle: Cycle, job: PendingJob, running: RunningJob) -> bool:
    """Whether ``job`` may suspend ``running`` to take its turn: both are guaranteed work of
    one VC and one priority, and ``running``'s turn is over for ``job``
    (``turns.turn_over_for``: suspendable, a whole slice run, enough more service)."""
    return (
        running.priority_rank == job.priority_rank
        and (running.vc == job.vc or not cycle.snapshot.vcs)
        and turn_over_for(cycle.snapshot.config, job.attained_service, running, cycle.snapshot.now)
    )


def _on_over_models(cycle: Cycle, job: RunningJob, over: dict[tuple[str, str], int]) -> bool:
    """Whether ``job`` holds GPUs of a model its VC holds more of than its quota."""
    return any((job.vc, cycle.ledger.model_of(p.node, s.index)) in over for p in job.placements for s in p.gpus)


def _claimed_for(cycle: Cycle, job: PendingJob) -> list[RunningJob]:
    """Jobs another plan of this cycle stops that ``job`` could count on too (by the rules
    of ``candidates``). What that plan holds of theirs stays held in the ledger, so counting
    on the rest of what they free takes nothing from it, and costs nothing more."""
    if not cycle.claimed:
        return []
    policy = cycle.ledger.quotas.policy(job.vc)
    if policy is None or job.priority_rank >= OPPORTUNISTIC_RANK:
        return []
    over = {} if job.borrowing else _over_quota(cycle, job.vc)
    running = cycle.ledger.running
    nodes = cycle.ledger.capacity.nodes
    found = []
    for job_id in sorted(cycle.claimed):
        r = running.get(job_id)
        if r is None:
            continue
        if not r.guaranteed and not any(
            nodes[p.node].gpu_free[nodes[p.node].position[g.index]] + g.milli > 0
            for p in r.placements if p.node in nodes for g in p.gpus if g.index in nodes[p.node].position
        ):
            continue  # what it frees, the plan it stops for takes whole
        if job.borrowing:
            if r.extra or r.priority_rank >= OPPORTUNISTIC_RANK or lower_borrowed(cycle, job, r) \
                    or fair_victim(cycle, job, r):
                found.append(r)
            continue
        own_lower = (
            policy.allow_priority_preemption and r.vc == job.vc and r.guaranteed
            and r.priority_rank > job.priority_rank
        )
        if (not r.guaranteed or own_lower or takes_turn_from(cycle, job, r)
                or _on_over_models(cycle, r, over)):
            found.append(r)
    return found


def _takes_no_more_than_the_overage(cycle: Cycle, job: PendingJob, victims: list[RunningJob]) -> bool:
    """Whether the guaranteed work ``victims`` take from each other VC is no more than what
    brings it back to its quota, give or take the last job (jobs are stopped whole)."""
    over = _over_quota(cycle, job.vc)
    stopping = cycle.ledger.preempting | cycle.claimed  # counted in ``over`` already
    taken: dict[tuple[str, str], list[int]] = defaultdict(list)
    for victim in victims:
        if (victim.vc == job.vc or victim.job_id in stopping or not victim.guaranteed
                or takes_turn_from(cycle, job, victim)):  # without VCs, a turn's victim may name another
            continue
        per_model: dict[str, int] = defaultdict(int)
        for p in victim.placements:
            for share in p.gpus:
                per_model[cycle.ledger.model_of(p.node, share.index) or ""] += share.milli
        for model, milli in per_model.items():
            taken[(victim.vc, model)].append(milli)
    return all(sum(gpus) - max(gpus) < over.get(key, 0) for key, gpus in taken.items())


def _over_quota(cycle: Cycle, vc: str) -> dict[tuple[str, str], int]:
    """(VC, model) pairs of other VCs whose guaranteed work holds more of that model than
    their quota, by how much (milli-GPU, beyond what is being stopped already)."""
    over = {key: -free for key, free in cycle.ledger.quotas.free.items() if key[0] != vc and free < 0}
    if not over:
        return over
    stopping = _stopping_gpus(cycle)
    return {key: milli - stopping.get(key, 0) for key, milli in over.items() if milli > stopping.get(key, 0)}


def _stopping_gpus(cycle: Cycle) -> dict[tuple[str, str], int]:
    """The guaranteed GPUs (milli) the work being stopped holds, by (VC, model): summed again
    only when a plan has claimed more (asked for every candidate victim of every job). The
    count of claims is the key because, within a cycle, ``ledger.preempting`` is fixed and
    ``cycle.claimed`` only grows (``_record``): a claim given back would need a real key."""
    if cycle.stopping_gpus is None or cycle.stopping_claims != len(cycle.claimed):
        ledger = cycle.ledger
        gpus: dict[tuple[str, str], int] = defaultdict(int)
        for job_id in ledger.preempting | cycle.claimed:
            victim = ledger.running.get(job_id)
            if victim is None or not victim.guaranteed:
                continue
            for p in victim.placements:
                for share in p.gpus:
                    gpus[(victim.vc, ledger.model_of(p.node, share.index) or "")] += share.milli
        cycle.stopping_gpus, cycle.stopping_claims = dict(gpus), len(cycle.claimed)
    return cycle.stopping_gpus


def plan_preemption(cycle: Cycle, job: PendingJob) -> bool:
    """Find and record victims for ``job``; False (changing nothing) if none would do."""
    ledger = cycle.ledger
    refusal = ledger.quotas.admit(job)
    # Over quota, its own lower priorities may give quota back; borrowed, other VCs'
    # borrowed work may give back what may be borrowed (fair share). Nothing lifts a
    # user's quota or a VC's own borrowing limit.
    if refusal is not None and refusal.kind not in (("nothing_idle", "lend_limit") if job.borrowing else ("vc",)):
        return False
    victims = _search(cycle, job, refusal is not None, rederive=False)
    if job.borrowing and not fair_after(cycle, job, victims):
        return False  # it would take so much from another VC that the GPUs would go back to it
    placed = None
    if victims and _rederives(cycle, victims):
        # Guaranteed work stopping (these victims, or work stopping already) may change the
        # cells the next cycle derives: the plan must hold in those, and then waits for the
        # work stopping already as well. If it does not, plan against those cells instead
        # (slower: they are derived again at every step). A job no victims help in this
        # cycle's cells is not searched again (most of those are hopeless, and each such
        # search costs a derivation per step): it is planned once the work has stopped.
        taken = {v.job_id for v in victims}
        victims = [v for v in _stopping(cycle) if v.job_id not in taken] + victims
        if _takes_no_more_than_the_overage(cycle, job, victims):
            placed = _hold(cycle, job, victims, rederive=True)
        if placed is None:
            victims = _search(cycle, job, refusal is not None, rederive=True)
            if job.borrowing and not fair_after(cycle, job, victims):
                return False
    if placed is None:
        if not victims or not _takes_no_more_than_the_overage(cycle, job, victims):
            return False

        placed = _hold(cycle, job, victims, rederive=_rederives(cycle, victims))
        assert placed is not None, "a plan that fitted a moment ago must fit again"
    # Of the jobs another plan stops already, the ones this plan waits for: those on its
    # nodes, and guaranteed ones (their quota and cells come back too).
    nodes = {p.node for p in placed}
    victims = [
        v for v in victims
        if v.job_id not in cycle.claimed or v.guaranteed
        or any(p.node in nodes for p in v.placements)
    ]
    _record(cycle, job, victims)
    return True


def _hold(cycle: Cycle, job: PendingJob, victims: list[RunningJob], *, rederive: bool) -> list[TaskPlacement] | None:
    """Place ``job`` as if ``victims`` had stopped (``rederive``: in every VC's cells derived
    as the next cycle will) and hold that placement for it; None, changing nothing, if it
    does not fit."""
    ledger = cycle.ledger
    released = Released(ledger, victims)
    released.set(len(victims))
    rebound = Tentative()
    _rebind(cycle, job, victims, rebound, rederive=rederive)
    plan = Tentative()
    ledger.cells.binding_log = []
    placed = None if ledger.quotas.admit(job) is not None else place_gang(job, ledger, cycle.scorer, plan)
    bound, ledger.cells.binding_log = ledger.cells.binding_log, None
    if placed is None:
        plan.discard()
        rebound.discard()
        released.tentative.discard()
        return None
    if rebound.mark() > 0:  # placed as the next cycle will see its cells: hold, do not bind
        plan.discard()
        rebound.discard()
        plan = Tentative()
        ledger.hold(job_owner(job), placed, plan)  # its resources and quota; its cells come next cycle
    else:  # its cells are its own until it starts (not those an attempt bound and undid)
        ledger.cells.planned.update(c for c in bound if ledger.cells.owner.get(c) == job.vc)
    plan.commit()  # J's future placement stays held ...
    released.tentative.discard()  # ... and the victims hold theirs until they stop
    return placed


def _search(cycle: Cycle, job: PendingJob, short_of_quota: bool, *, rederive: bool) -> list[RunningJob]:
    """The fewest, cheapest victims after which ``job`` fits; [] if none do (or none needed).

    Over quota, only the VC's own lower priorities give quota back: those come first, as
    few as make the quota suffice; then whatever frees room, in the usual order.
    """
    ledger = cycle.ledger
    over = _over_quota(cycle, job.vc)  # before the quota of the work stopping comes back
    released = Released(ledger, [])
    base = Tentative()
    if rederive:
        # Work stopping already is gone when the plan's job starts: released from the
        # start, and the cells derived without it, so that victims are judged by the cells
        # the next cycle sees; it is waited for, and never spared.
        released.jobs.extend(_stopping(cycle))
        released.set(len(released.jobs))
        _rebind(cycle, job, released.jobs, base, rederive=_rederives(cycle, released.jobs))
    try:
        return _victims(cycle, job, short_of_quota, released, over, rederive=rederive)
    finally:
        released.tentative.discard()
        base.discard()


def _victims(
    cycle: Cycle, job: PendingJob, short_of_quota: bool, released: Released, over: dict[tuple[str, str], int],
    *, rederive: bool,
) -> list[RunningJob]:
    """``_search`` once the work it counts on as stopping (the first ``released.count``
    jobs) is released; ``over``: other VCs' guaranteed work over quota (``_over_quota``)."""
    ledger = cycle.ledger
    access = Access(ledger, job)
    gpu_tasks = [t for t in job.tasks if t.gpu_milli > 0]
    free = {v.job_id for v in released.jobs}  # stopping already: never spared

    def fits() -> bool:
        return _fits_after(cycle, job, released.jobs[: released.count], rederive=rederive, released=True)

    if short_of_quota:
        for_quota = (v for v in candidates(cycle, job) if v.job_id not in free and _gives_quota(job, v))
        # The shortest prefix after which the job is admitted. A victim gives back at most
        # its GPUs, so admission is asked again only once the victims taken since could
        # cover the shortfall (the same prefix as asking after each, with fewer questions).
        while (refusal := ledger.quotas.admit(job)) is not None:
            short = refusal.need - refusal.free if refusal.kind in ("vc", "user", "nothing_idle", "lend_limit") else 1
            while short > 0:
                victim = next(for_quota, None)
                if victim is None:
                    return []
                released.jobs.append(victim)
                short -= sum(s.milli for p in victim.placements for s in p.gpus)
            released.set(len(released.jobs))
    taken = {v.job_id for v in released.jobs}
    shared = [
        v for v in _claimed_for(cycle, job)
        if v.job_id not in taken and _frees_room(ledger, access, job, gpu_tasks, v, over)
    ]
    if shared:  # free to count on: always released, never spared
        released.jobs.extend(shared)
        released.set(len(released.jobs))
        free.update(v.job_id for v in shared)
    count = released.count
    taken = {v.job_id for v in released.jobs}
    released._more = candidates(
        cycle, job, lambda v: v.job_id not in taken and _frees_room(ledger, access, job, gpu_tasks, v, over)
    )
    if not fits():
        # The shortest prefix of the rest that makes room: grow it by doubling (few victims
        # are the common case), then halve the last step.
        lo = hi = count + 1
        while True:
            total = released.available(hi)
            if total < lo:
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
        return []
    released.set(count)
    victims = released.jobs[:count]
    spared: set[int] = set()
    # Spare what is not needed after all, most valuable first, in halving blocks (a few
    # tries for a long list of victims of which few are needed). First, in one try, those
    # with nothing on the nodes the job takes once they are all gone: the prefix found by
    # doubling holds many of them.
    spare = list(reversed([v for v in victims[:-1] if v.job_id not in free]))
    placed = _placed_after(cycle, job, victims, rederive=rederive, released=True)
    if placed is not None:
        taken_nodes = {p.node for p in placed}
        away = [v for v in spare if not any(p.node in taken_nodes for p in v.placements)]
        if away and len(away) < len(spare):
            _spare(cycle, job, released.tentative, away, spared, victims, rederive, halve=False)
    _spare(cycle, job, released.tentative, [v for v in spare if v.job_id not in spared], spared, victims, rederive)
    return [v for v in victims if v.job_id not in spared]


def _stopping(cycle: Cycle) -> list[RunningJob]:
    """Guaranteed work in cells that is stopping (preempted in an earlier cycle, or by a
    plan of this one): gone, and its cells with it, by the time a plan's job can start."""
    ledger = cycle.ledger
    found = []
    for job_id in sorted(ledger.preempting | cycle.claimed):
        running = ledger.running.get(job_id)
        if running is not None and running.guaranteed and ledger.enforced.get(running.vc):
            found.append(running)
    return found


def _rederives(cycle: Cycle, victims: list[RunningJob]) -> bool:
    """Whether the cells the next cycle derives may differ from this cycle's once ``victims``
    and the work stopping already have stopped: only guaranteed work holds cells, and only
    where a VC may hold whole nodes of several cells can a node's cells change hands
    (``Cells.rederivable``) — another VC's too, not only the one that loses work."""
    ledger = cycle.ledger
    if not ledger.cells.rederivable:
        return False
    return any(v.guaranteed and ledger.enforced.get(v.vc, False) for v in victims) or bool(_stopping(cycle))


def _survivors(cycle: Cycle, vc: str, victims: list[RunningJob]) -> list[RunningJob]:
    gone = {v.job_id for v in victims}
    mine = [*cycle.ledger.running.values(), *cycle.started]
    return [r for r in mine if r.vc == vc and r.guaranteed and r.job_id not in gone]


def _rebind(
    cycle: Cycle, job: PendingJob, victims: list[RunningJob], tentative: Tentative, *, rederive: bool
) -> None:
    """Derive cells again as the next cycle will once ``victims`` have stopped: with
    ``rederive``, every VC's, without the work stopping already too; else only the cells
    of each other VC that loses guaranteed work (one over its quota: its cells come free)."""
    ledger = cycle.ledger
    if rederive:
        gone = {v.job_id for v in victims} | {v.job_id for v in _stopping(cycle)}
        survivors = [r for r in (*ledger.running.values(), *cycle.started) if r.job_id not in gone]
        ledger.derive_cells_again(survivors, tentative)
        return
    vcs = {v.vc for v in victims if v.guaranteed and v.vc != job.vc}
    for vc in sorted(vcs):
        ledger.cells.rebind(vc, _survivors(cycle, vc, victims), tentative)


def _victims_gone(
    cycle: Cycle, job: PendingJob, victims: list[RunningJob], *, rederive: bool, released: bool
) -> Tentative:
    """Make the ledger as it will be once ``victims`` have stopped (``released``: they are
    released in it already; ``rederive``: with the job's VC's cells derived as the next cycle
    will); discarding the returned changes puts it back as it was. (Not a context manager:
    asked thousands of times a cycle, a generator's ``with`` cost more than the rest.)"""
    ledger = cycle.ledger
    undo = Tentative()
    if not released:
        for victim in victims:
            ledger.release(victim, undo)
    try:
        _rebind(cycle, job, victims, undo, rederive=rederive and _rederives(cycle, victims))
    except BaseException:
        undo.discard()
        raise
    return undo


def _fits_after(
    cycle: Cycle, job: PendingJob, victims: list[RunningJob], *, rederive: bool, released: bool = False
) -> bool:
    """Whether ``job`` fits once ``victims`` have stopped (``_victims_gone``'s terms)."""
    undo = _victims_gone(cycle, job, victims, rederive=rederive, released=released)
    try:
        if cycle.ledger.quotas.admit(job) is not None:
            return False
        somewhere = fits_somewhere(job, cycle.ledger)  # a yes or no: no scorer's search where it can tell
        return _fits(cycle, job) is not None if somewhere is None else somewhere
    finally:
        undo.discard()


def _placed_after(
    cycle: Cycle, job: PendingJob, victims: list[RunningJob], *, rederive: bool, released: bool = False
) -> list[TaskPlacement] | None:
    """Where ``job`` would go once ``victims`` have stopped (``_victims_gone``'s terms), if anywhere."""
    undo = _victims_gone(cycle, job, victims, rederive=rederive, released=released)
    try:
        return _fits(cycle, job)
    finally:
        undo.discard()


def _spare(
    cycle: Cycle,
    job: PendingJob,
    tentative: Tentative,
    block: list[RunningJob],
    spared: set[int],
    victims: list[RunningJob],
    rederive: bool,
    *,
    halve: bool = True,
) -> None:
    """Spare ``block`` if the job still fits without it; else (``halve``) try each half."""
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
    if halve and len(block) > 1:
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
    """Whether stopping ``victim`` gives ``job`` back quota: its VC's own guaranteed work
    does; for a job tried as borrowed work, other VCs' borrowed work gives back what may
    be borrowed (``candidates`` has already kept only those that fair share allows)."""
    if job.borrowing:
        return victim.borrowed and victim.vc != job.vc and any(s.milli for p in victim.placements for s in p.gpus)
    return victim.vc == job.vc and victim.guaranteed and any(s.milli for p in victim.placements for s in p.gpus)


def _frees_room(
    ledger: Ledger, access: Access, job: PendingJob, gpu_tasks: list[TaskRequest], victim: RunningJob,
    over: dict[tuple[str, str], int],
) -> bool:
    """Whether stopping ``victim`` frees anything ``job`` could be placed on."""
    nodes = ledger.capacity.nodes
    # Another VC's guaranteed work (over its quota for the model) gives back its cells too.
    other = victim.vc != job.vc and victim.guaranteed
    for p in victim.placements:
        node = nodes.get(p.node)
        if node is None or not node.schedulable:
            continue
        if len(gpu_tasks) < len(job.tasks):
            return True  # a CPU-only task can use the CPU and memory it frees
        for share in p.gpus:
            pos = node.position.get(share.index)
            frees_cell = other and (victim.vc, node.gpu_model[pos] if pos is not None else "") in over
            if pos is None or not (frees_cell or access.may_use(node, pos)):
                continue
            if any(node.suits(pos, t) for t in gpu_tasks):
                return True
    return False


def _wanted(job: PendingJob) -> str:
    """What a reclaim's message says the job needs back: its VC's GPUs, or, for a job that asks
    for none, the CPU and memory the victim holds on its node (a trial read "needs its
    guaranteed GPUs back" of a CPU-only job)."""
    if any(t.gpu_milli > 0 for t in job.tasks):
        return "its guaranteed GPUs back"
    return "the CPU and memory it holds"


def _record(cycle: Cycle, job: PendingJob, victims: list[RunningJob]) -> None:
    ledger = cycle.ledger
    owner = job_owner(job)
    now = cycle.snapshot.now
    claiming = [v for v in victims if v.job_id not in ledger.preempting and v.job_id not in cycle.claimed]
    _shift_shares(cycle, job, claiming)
    for victim in sorted(victims, key=lambda v: v.job_id):
        if victim.job_id in ledger.preempting or victim.job_id in cycle.claimed:
            continue  # stopping already, or preempted for another job of this cycle
        cycle.claimed.add(victim.job_id)
        if victim.extra:
            why = (f"job {job.job_id} of VC {owner.vc} ({Priority.of_rank(owner.rank)}) needs the GPUs that "
                   "workers beyond its minimum use (they use what no one waiting needed, and go first)")
        elif victim.priority_rank >= OPPORTUNISTIC_RANK and job.borrowing:
            why = f"reclaimed: job {job.job_id} of VC {owner.vc} ({Priority.of_rank(owner.rank)}) borrows these GPUs"
        elif victim.priority_rank >= OPPORTUNISTIC_RANK:
            why = f"reclaimed: VC {owner.vc} needs {_wanted(job)} for job {job.job_id}"
        elif victim.borrowed and job.borrowing:
            shares = borrow_shares(cycle)
            why = (
                f"reclaimed for fair share: VC {victim.vc} borrows more than its weighted share "
                f"({shares.get(victim.vc, 0.0):g} GPU per unit of weight), and job {job.job_id} of VC {owner.vc} "
                f"borrows in its place"
            )
        elif victim.borrowed:
            why = (
                f"reclaimed: it runs on borrowed GPUs, and VC {owner.vc} needs {_wanted(job)} "
                f"for job {job.job_id}"
            )
        elif takes_turn_from(cycle, job, victim):
            why = (
                f"suspended to let job {job.job_id} of VC {owner.vc} take its turn: it has received "
                f"more service ({_gpu_hours(victim.attained_at(now))} against "
                f"{_gpu_hours(job.attained_service)})"
            )
        elif victim.vc != owner.vc:
            why = (
                f"reclaimed: VC {victim.vc} holds more than its quota, and VC {owner.vc} needs "
                f"{_wanted(job)} for job {job.job_id}"
            )
        else:
            why = (
                f"preempted by job {job.job_id} of higher priority "
                f"({Priority.of_rank(owner.rank)}) in VC {owner.vc}"
            )
        cycle.preemptions.append(
            Preempt(victim.job_id, victim.grace_seconds, why, job.job_id, suspend=victim.suspendable)
        )
    # A victim stopping since an earlier cycle is gone when its grace period ends, not a
    # whole grace period from now (which would move the ETA on every cycle).
    eta = max(
        (v.stops_by if v.stops_by is not None and v.job_id in ledger.preempting else now + v.grace_seconds
         for v in victims),
        default=now,
    )
    eta = max(eta, now)
    cycle.wait(job, Wait(PendingReason.PREEMPTING, eta=eta, victims=tuple(sorted(v.job_id for v in victims))))


def _gpu_hours(gpu_seconds: float) -> str:
    return f"{gpu_seconds / 3600:.1f} GPU-h"
