"""Consolidation: move suspendable fragments of work so that a waiting gang finds room.

A guaranteed job that is admitted (its VC's and its user's quota have room) but that no
node can hold — the GPUs free, and those suspendable work holds, add up to what it needs,
but not on one node — may have that work *moved*: suspended where it runs, to resume on
GPUs free elsewhere (KAI Scheduler's consolidation; a suspension loses a checkpoint's
worth, not the job's progress). The planner (``preemption``) runs first; a job it cannot
help is tried here (``schedule.preempt_for_queue``). A plan is made only when

* **it is within the budget** the admin sets (``SchedulerConfig.moves_per_hour``, counted
  by the caller over the last hour as ``Snapshot.recent_moves``, and ``moves_per_cycle``;
  0 an hour: never, the default);
* **the moved jobs have somewhere to go**: with the job's placement held, each is placed
  again, as the job it is (its tasks' GPUs, CPU and memory, on its own GPU model), on what
  is free elsewhere now, and that room is held for the rest of the cycle — every moved job
  fits at once, or nothing moves;
* **no guarantee is touched**: a moved job is suspendable, not elastic (the planner
  shrinks those), not borrowed, not a whole-node job, of the waiting job's priority or lower
  (never a higher priority for a lower), and either opportunistic or guaranteed work of
  the waiting job's own VC (never another VC's guaranteed work, never guaranteed work for
  opportunistic: only guaranteed jobs are helped), and never guaranteed work of a VC whose
  HiveD cells are enforced (moving it would change which cells it holds); its quota is its
  own again when it resumes (it is admitted as any job is);
* **no churn**: a job that has run less than ``move_after`` seconds since it last started
  or resumed (a moved job resumes, so this holds for moved ones) is not moved.

Work already stopping counts as free and costs nothing, so in the cycles after a plan the
job waits for the jobs it moved as a preemption plan's job waits for its victims. The
jobs moved are those on the nodes the job takes, found node by node, the nodes whose
movable work holds fewest GPUs first, then spared, the largest first, wherever the job
still fits without them.

What it gives up: the moved jobs' room elsewhere is held for the cycle only; they resume
when the cycles after it place them (as their queue order says), and work that arrives
in between may take it. Their wait, and their checkpoint (``Preempt.suspend``), is the cost.
"""

from __future__ import annotations

from trainyard.core.priorities import OPPORTUNISTIC_RANK, Priority
from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.cycle import Cycle, Wait
from trainyard.scheduler.placement import fits_somewhere, place_gang
from trainyard.scheduler.quota import Owner, job_owner
from trainyard.scheduler.snapshot import (
    PendingJob,
    PendingReason,
    Preempt,
    RunningJob,
    TaskPlacement,
    TaskRequest,
)

# Nodes tried per plan, the cheapest first: past that a job is too far from fitting for
# moves to be the answer (and each try is a placement).
NODES_PER_PLAN = 32


def moves_left(cycle: Cycle) -> int:
    """Moves this cycle may still make: within the hour's budget and the cycle's."""
    config = cycle.snapshot.config
    return max(0, min(config.moves_per_cycle - cycle.moves,
                      config.moves_per_hour - cycle.snapshot.recent_moves - cycle.moves))


def movable_work(cycle: Cycle) -> list[RunningJob]:
    """Running jobs that might be moved for some job: suspendable, not elastic (its workers
    beyond its minimum are the planner's to shrink), not borrowed, not whole-node, holding
    GPUs, not stopping, and run for at least ``move_after`` since they last (re)started.
    Found once per cycle (most clusters have none: then consolidation costs nothing more)."""
    if cycle.movable is None:
        ledger = cycle.ledger
        now, after = cycle.snapshot.now, cycle.snapshot.config.move_after
        cycle.movable = [
            r for r in ledger.running.values()
            if r.suspendable and not r.extra and not r.borrowed and r.placements and not (r.grow or r.shrink)
            and r.job_id not in ledger.preempting and now - r.started_at >= after
            and not any(p.whole_node or not p.gpus for p in r.placements)
        ]
    return cycle.movable


def movable(cycle: Cycle, job: PendingJob, running: RunningJob) -> bool:
    """Whether ``running``, one of ``movable_work``, may be moved to make room for
    guaranteed ``job`` (module doc)."""
    ledger = cycle.ledger
    snapshot = cycle.snapshot
    if running.job_id in cycle.claimed or running.priority_rank < job.priority_rank:
        return False
    if running.priority_rank >= OPPORTUNISTIC_RANK:
        return True
    same_vc = running.vc == job.vc or not snapshot.vcs
    return same_vc and not ledger.enforced.get(running.vc, False)


def consolidate(cycle: Cycle, job: PendingJob) -> bool:
    """Plan moves that make room for ``job`` and record them (its wait is ``PREEMPTING``);
    False, changing nothing, if no plan within the rules (module doc) makes room."""
    config = cycle.snapshot.config
    if config.moves_per_hour <= 0 or job.priority_rank >= OPPORTUNISTIC_RANK or job.borrowing:
        return False
    ledger = cycle.ledger
    if ledger.quotas.admit(job) is not None:
        return False
    gpu_tasks = [t for t in job.tasks if t.gpu_milli > 0]
    if not gpu_tasks:
        return False
    left = moves_left(cycle)
    # Work stopping already, counted as free — but not guaranteed work in HiveD's cells: its
    # leaving may change the cells the next cycle derives (the planner's ``_rederives``).
    stopping = [r for j in sorted(ledger.preempting) if j in ledger.running and j not in cycle.claimed
                and not ((r := ledger.running[j]).guaranteed and ledger.enforced.get(r.vc, False))]
    movers = [r for r in movable_work(cycle) if movable(cycle, job, r)] if left > 0 else []
    if not movers and not stopping:
        return False
    # Enough GPUs in all, free and movable? (A cheap no for most jobs.)
    need = sum(t.gpu_milli for t in gpu_tasks)
    if ledger.capacity.free_gpu() + sum(_milli(r) for r in (*stopping, *movers)) < need:
        return False
    return _plan(cycle, job, stopping, movers, left)


def _milli(job: RunningJob) -> int:
    return sum(s.milli for p in job.placements for s in p.gpus)


def _node_order(cycle: Cycle, job: PendingJob, movers: list[RunningJob]) -> list[list[RunningJob]]:
    """The movable work, by node: nodes where it could give the job's smallest GPU task room,
    those whose movable work holds fewest GPUs first (then the most free), at most
    ``NODES_PER_PLAN``."""
    nodes = cycle.ledger.capacity.nodes
    smallest = min(t.gpu_milli for t in job.tasks if t.gpu_milli > 0)
    on: dict[str, list[RunningJob]] = {}
    for r in movers:
        for p in r.placements:
            on.setdefault(p.node, [])
            if r not in on[p.node]:
                on[p.node].append(r)
    ranked = []
    for name, there in on.items():
        node = nodes.get(name)
        if node is None or not node.schedulable:
            continue
        moved = sum(s.milli for r in there for p in r.placements if p.node == name for s in p.gpus)
        free = sum(max(0, f) for f in node.gpu_free)
        if free + moved < smallest or not any(
                node.suits_all(t) or node.eligible_devices(t) for t in job.tasks if t.gpu_milli > 0):
            continue
        ranked.append((moved, -free, name))
    ranked.sort()
    return [on[name] for _, _, name in ranked[:NODES_PER_PLAN]]


def _fits(cycle: Cycle, job: PendingJob) -> list[TaskPlacement] | None:
    ledger = cycle.ledger
    if fits_somewhere(job, ledger) is False:
        return None
    attempt = Tentative()
    placed = place_gang(job, ledger, cycle.scorer, attempt)
    attempt.discard()
    return placed


def _plan(cycle: Cycle, job: PendingJob, stopping: list[RunningJob], movers: list[RunningJob], left: int) -> bool:
    ledger = cycle.ledger
    released = Tentative()
    gone: dict[int, RunningJob] = {}

    def release(jobs: list[RunningJob]) -> None:
        for r in jobs:
            if r.job_id not in gone:
                gone[r.job_id] = r
                ledger.release(r, released)

    plan = Tentative()
    holds = Tentative()
    try:
        release(stopping)
        placed = _fits(cycle, job)
        for group in _node_order(cycle, job, movers):
            if placed is not None:
                break
            release(group)
            placed = _fits(cycle, job)
        if placed is None:
            return False
        taken = {p.node for p in placed}
        waiting = {r.job_id for r in stopping}
        victims = [r for r in gone.values() if r.job_id not in waiting and any(p.node in taken for p in r.placements)]
        for r in gone.values():  # moved work on nodes the job does not take stays
            if r.job_id not in waiting and r not in victims:
                ledger.occupy(r, released)
        for victim in sorted(victims, key=lambda r: (-_milli(r), r.job_id)):  # spare the largest first
            mark = released.mark()
            ledger.occupy(victim, released)
            if _fits(cycle, job) is not None:
                victims.remove(victim)
            else:
                released.rollback(mark)
        if not victims or len(victims) > left:
            # Only work stopping already makes room (the planner, or a later cycle, waits for
            # it), or more moves than the budget allows.
            if not victims and stopping:
                return _wait_only(cycle, job, stopping, released, plan)
            return False
        ledger.cells.binding_log = []
        placed = None if ledger.quotas.admit(job) is not None else place_gang(job, ledger, cycle.scorer, plan)
        bound, ledger.cells.binding_log = ledger.cells.binding_log, None
        if placed is None:
            return False
        taken = {p.node for p in placed}
        destinations = {}
        for victim in sorted(victims, key=lambda r: (-_milli(r), r.job_id)):  # the largest first
            where = _resume_place(cycle, victim, taken, holds)
            if where is None:
                return False
            destinations[victim.job_id] = where
        ledger.cells.planned.update(c for c in bound if ledger.cells.owner.get(c) == job.vc)
        plan.commit()  # the job's placement stays held, and the moved jobs' room elsewhere
        holds.commit()
        waits_for = [r for r in stopping if any(p.node in taken for p in r.placements)]
        _record(cycle, job, victims, waits_for, destinations)
        return True
    finally:
        plan.discard()
        holds.discard()
        released.discard()  # the moved jobs hold what they hold until they have stopped


def _wait_only(
    cycle: Cycle, job: PendingJob, stopping: list[RunningJob], released: Tentative, plan: Tentative
) -> bool:
    """The job fits once work stopping already has stopped: hold its place, and wait."""
    ledger = cycle.ledger
    placed = place_gang(job, ledger, cycle.scorer, plan)
    if placed is None:
        return False
    taken = {p.node for p in placed}
    waits_for = [r for r in stopping if any(p.node in taken for p in r.placements)]
    if not waits_for:
        return False  # it fits as things are: the caller starts it
    plan.commit()
    _note_wait(cycle, job, waits_for)
    return True


def _resume_place(cycle: Cycle, victim: RunningJob, avoid: set[str], holds: Tentative) -> list[TaskPlacement] | None:
    """Where ``victim`` would resume now, off the nodes in ``avoid``, its room held in
    ``holds`` (charged to no quota: the victim still holds its own until it stops)."""
    ledger = cycle.ledger
    tasks = []
    for p in victim.placements:
        models = tuple(sorted({m for s in p.gpus if (m := ledger.model_of(p.node, s.index))}))
        milli = sum(s.milli for s in p.gpus)
        node = ledger.capacity.nodes.get(p.node)
        memory = min((node.gpu_memory_mb[node.position[s.index]] for s in p.gpus if node is not None
                      and s.index in node.position), default=0) if node is not None else 0
        tasks.append(TaskRequest(p.role, p.index, milli, p.cpu_milli, p.memory_mb, gpu_models=models,
                                 gpu_memory_mb=memory))
    pending = PendingJob(victim.job_id, victim.priority_rank, victim.started_at, tuple(tasks), victim.user,
                         victim.vc, suspendable=True, attained_service=victim.attained_service)
    if ledger.quotas.admit(pending) is not None:
        return None
    attempt = Tentative()
    where = place_gang(pending, ledger, cycle.scorer, attempt)
    attempt.discard()
    if where is None or any(p.node in avoid for p in where):
        return None
    ledger.hold(Owner(victim.vc, victim.user, victim.priority_rank, extra=True), where, holds)
    return where


def _record(
    cycle: Cycle, job: PendingJob, victims: list[RunningJob], waits_for: list[RunningJob],
    destinations: dict[int, list[TaskPlacement]],
) -> None:
    owner = job_owner(job)
    gpus = sum(t.gpu_milli for t in job.tasks) / MILLI
    largest = max(t.gpu_milli for t in job.tasks) / MILLI
    for victim in sorted(victims, key=lambda r: r.job_id):
        cycle.claimed.add(victim.job_id)
        cycle.moves += 1
        nodes = ", ".join(sorted({p.node for p in destinations[victim.job_id]}))
        why = (
            f"moved to make room for job {job.job_id} of VC {owner.vc} ({Priority.of_rank(owner.rank)}): "
            f"it needs {gpus:g} GPU ({largest:g} on one node) and no node had them together; suspended here, "
            f"it resumes on GPUs free now elsewhere ({nodes})"
        )
        cycle.preemptions.append(
            Preempt(victim.job_id, victim.grace_seconds, why, job.job_id, suspend=True, move=True)
        )
    _note_wait(cycle, job, [*victims, *waits_for])


def _note_wait(cycle: Cycle, job: PendingJob, victims: list[RunningJob]) -> None:
    now = cycle.snapshot.now
    eta = max((v.stops_by if v.stops_by is not None and v.job_id in cycle.ledger.preempting
               else now + v.grace_seconds for v in victims), default=now)
    cycle.wait(job, Wait(PendingReason.PREEMPTING, eta=max(eta, now),
                         victims=tuple(sorted(v.job_id for v in victims)), moving=True))
