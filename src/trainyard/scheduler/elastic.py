"""Elastic jobs: a job that runs on between *min* and *max* workers of one role.

What the scheduler does with them (Pollux's and Arena's model, within Trainyard's rules):

* **Start at the minimum.** A pending elastic job is the gang of its *min* tasks
  (``PendingJob.tasks``), admitted, placed and reserved for like any job; the tasks it may
  add are ``PendingJob.grow``.
* **Grow into idle GPUs** (``grow``): once every other phase has run — guaranteed queues,
  preemption plans, borrowing, the opportunistic queue — what is still free is idle: no
  waiting job could use it this cycle, and every reservation and plan holds what it needs.
  Elastic jobs (running ones, and those that started in this cycle) then get one worker at
  a time, in turns (the highest priority first, then the job one more worker speeds up
  most in proportion — by its throughput curve, ``PendingJob.speedup``, where the caller
  knows one, else as if linear: the one with fewest workers — then the oldest), until none
  can grow or would be sped up by growing. A worker beyond the minimum is
  placed like opportunistic work: it counts against no quota (VC, user, or borrowing) and
  holds no HiveD cell, wherever it lands.
* **Shrink before suspending, suspending before stopping** (``split``): each running
  elastic job's workers beyond its minimum enter the cycle as running work of their own
  (``RunningJob.extra``), and the preemption planner gives them up first, before any
  opportunistic, borrowed or guaranteed job (``preemption.victim_key``) — those whose job
  loses the least share of its speed without them first — for any job whose
  guarantee, priority or turn it serves — the same rules as reclaiming opportunistic work,
  so no guarantee (quota, gang, HiveD's cells) is ever weaker for an extra worker being
  somewhere. A job never shrinks below its minimum: those workers stay in the job itself,
  which is a victim as any job is.
* **Resources come back only once removed workers have exited**: a worker being removed
  (``RunningJob.leaving``) still holds what it holds, as work already stopping; a job that
  is resizing (workers leaving) does not grow in the same cycle.
* **Hysteresis**: a running job grows no sooner than ``SchedulerConfig.grow_interval``
  after its workers last (re)started (its start, or a resize: ``RunningJob.resized_at``),
  so that GPUs freed for a moment do not restart its workers twice; shrinks are never
  held back.

The planner names a removed worker by an id of its own (negative: no job has one), which
``decisions`` turns back into ``Shrink`` decisions (and the waiting jobs' "waits for job N
to stop" into the elastic job's id).

What it gives up: growth is greedy, one worker at a time, by the speedup of the next worker
alone (Pollux optimises every job's allocation together, and adapts batch sizes); without
a throughput curve every worker is assumed to help alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.cycle import Cycle, Worker
from trainyard.scheduler.placement import place_gang
from trainyard.scheduler.snapshot import (
    Grow,
    PendingJob,
    Preempt,
    RunningJob,
    Shrink,
    Snapshot,
    TaskPlacement,
    TaskRequest,
)

# The ids the planner knows removable workers by: below every real job id and below the
# trial cycle's (-1, ``schedule._TRIAL``).
_FIRST_WORKER_ID = -2


def split(snapshot: Snapshot) -> tuple[Snapshot, dict[int, Worker]]:
    """The snapshot with each running elastic job's removable and leaving workers as
    running work of their own (``RunningJob.extra``), and what each such id stands for.
    A worker being removed, or of a job being stopped, is work stopping already."""
    if not any(r.shrink or r.leaving for r in snapshot.running):
        return snapshot, {}
    workers: dict[int, Worker] = {}
    running: list[RunningJob] = []
    preempting = set(snapshot.preempting)
    next_id = _FIRST_WORKER_ID
    for job in snapshot.running:
        if not (job.shrink or job.leaving):
            running.append(job)
            continue
        apart = [*job.leaving, *job.shrink]  # the order the planner takes them in
        by_task = {(p.role, p.index): p for p in job.placements}
        running.append(replace(job, placements=tuple(p for p in job.placements if (p.role, p.index) not in apart),
                               shrink=(), leaving=()))
        # Ids fall as the workers come, so that among one job's workers (equal in every
        # other part of the planner's order) the first to go has the lowest id.
        ids = range(next_id - len(apart) + 1, next_id + 1)
        next_id -= len(apart)
        # Workers of its elastic role it runs on, once the leaving have left.
        size = _of_role(job.placements, apart[0][0]) - len(job.leaving)
        for worker_id, task in zip(ids, apart, strict=True):
            placement = by_task.get(task)
            if placement is None:
                continue  # not running (the controller's view moved on): nothing to take
            worth = 0.0
            if task not in job.leaving:  # what the job loses of its speed if this one goes too
                worth = 1.0 - throughput(job.speedup, size - 1) / throughput(job.speedup, size)
                size -= 1
            running.append(RunningJob(
                worker_id, job.vc, job.user, job.priority_rank, (placement,), job.started_at, job.expected_end,
                grace_seconds=job.grace_seconds, stops_by=job.stops_by, extra=True, worth=worth,
            ))
            workers[worker_id] = Worker(job.job_id, *task)
            if task in job.leaving or job.job_id in snapshot.preempting:
                preempting.add(worker_id)
    return replace(snapshot, running=tuple(running), preempting=frozenset(preempting)), workers


def grow(cycle: Cycle) -> list[Grow]:
    """Grow elastic jobs into what is left free, one worker at a time in turns; the workers
    of jobs started in this cycle join their starts (``cycle.starts``), the others are
    returned as ``Grow`` decisions."""
    snapshot, ledger = cycle.snapshot, cycle.ledger
    stopping = ledger.preempting | cycle.claimed
    extras: dict[int, int] = {}
    resizing = set()  # jobs with workers leaving, or told to leave in this cycle: they do not grow
    for worker_id, worker in cycle.workers.items():
        extras[worker.job_id] = extras.get(worker.job_id, 0) + 1
        if worker_id in stopping:
            resizing.add(worker.job_id)
    pending = {job.job_id: job for job in snapshot.pending if job.grow}
    growing: list[_Growing] = []
    settled = snapshot.now - snapshot.config.grow_interval  # grown no sooner than this after a (re)start
    for job in snapshot.running:
        if job.grow and not job.extra and job.job_id not in stopping and job.job_id not in resizing \
                and (job.started_at if job.resized_at is None else job.resized_at) <= settled:
            size = _of_role(job.placements, job.grow[0].role) + extras.get(job.job_id, 0)
            growing.append(_Growing(job.job_id, job.vc, job.user, job.priority_rank, job.started_at, size,
                                    list(job.grow), job.speedup))
    for start in cycle.starts:
        waiting = pending.get(start.job_id)
        if waiting is not None:
            growing.append(_Growing(waiting.job_id, waiting.vc, waiting.user, waiting.priority_rank, snapshot.now,
                                    _of_role(start.placements, waiting.grow[0].role), list(waiting.grow),
                                    waiting.speedup))
    added: dict[int, list[TaskPlacement]] = {}
    growing = [g for g in growing if g.gain() > 0]
    while growing:
        growing.sort(key=_Growing.turn)
        turn = growing[0]
        task = turn.tasks.pop(0)
        placement = _place_one(cycle, turn, task)
        if placement is None:
            growing.pop(0)  # its next workers are the same task: none fits either
            continue
        turn.size += 1
        added.setdefault(turn.job_id, []).append(placement)
        if not turn.tasks or turn.gain() <= 0:  # at its maximum, or more workers would not speed it up
            growing.pop(0)
    starts = {start.job_id: i for i, start in enumerate(cycle.starts)}
    grows = []
    for job_id, placements in added.items():
        if job_id in starts:
            i = starts[job_id]
            cycle.starts[i] = replace(cycle.starts[i], placements=(*cycle.starts[i].placements, *placements))
        else:
            grows.append(Grow(job_id, tuple(placements)))
    return grows


def _of_role(placements: tuple[TaskPlacement, ...], role: str) -> int:
    """How many of ``placements`` are workers of ``role`` (an elastic job's other roles do not count)."""
    return sum(1 for p in placements if p.role == role)


@dataclass
class _Growing:
    job_id: int
    vc: str
    user: str
    priority_rank: int
    since: float
    size: int  # workers it has (or will have once this cycle's are added)
    tasks: list[TaskRequest]  # the workers it may still add, in order
    speedup: tuple[tuple[int, float], ...]

    def gain(self) -> float:
        """How much faster one more worker makes it, as a share of its speed now."""
        return throughput(self.speedup, self.size + 1) / throughput(self.speedup, self.size) - 1.0

    def turn(self) -> tuple[int, float, float, int]:
        """Whose turn it is to grow: the highest priority, then the job one more worker
        speeds up most (in proportion: with linear speedups, the one with fewest workers),
        then the one running longest, then the lowest id."""
        return (self.priority_rank, -self.gain(), self.since, self.job_id)


def throughput(points: tuple[tuple[int, float], ...], workers: int) -> float:
    """A job's throughput on ``workers`` by its measured ``points`` (ascending workers):
    linear between them, in proportion below the first, flat beyond the last (more workers
    than were measured buy nothing); with no points, ``workers`` (linear)."""
    if not points:
        return float(max(workers, 0))
    if workers <= points[0][0]:
        n, rate = points[0]
        return rate * max(workers, 0) / n
    for (n0, r0), (n1, r1) in zip(points, points[1:], strict=False):
        if workers <= n1:
            return r0 + (r1 - r0) * (workers - n0) / (n1 - n0)
    return points[-1][1]


def _place_one(cycle: Cycle, job: _Growing, task: TaskRequest) -> TaskPlacement | None:
    """Place one worker beyond the job's minimum as an extra (no quota, no cells), or None."""
    worker = PendingJob(job.job_id, job.priority_rank, job.since, (task,), user=job.user, vc=job.vc, extra=True)
    attempt = Tentative()
    placements = place_gang(worker, cycle.ledger, cycle.scorer, attempt)
    if placements is None:
        return None
    attempt.commit()
    return placements[0]


def _owner_of(cycle: Cycle, worker_id: int) -> int:
    worker = cycle.workers.get(worker_id)
    return worker.job_id if worker is not None else worker_id


def decisions(cycle: Cycle, preemptions: list[Preempt]) -> tuple[list[Preempt], list[Shrink]]:
    """The plans' victims that are workers, as ``Shrink`` decisions (one per job, its
    workers together); a job stopped whole is not shrunk as well. The waiting jobs' waits
    name the elastic job, not its workers."""
    if not cycle.workers:
        return preemptions, []
    whole = [p for p in preemptions if p.job_id not in cycle.workers]
    stopped = {p.job_id for p in whole}
    shrinks: dict[int, Shrink] = {}
    for p in preemptions:
        worker = cycle.workers.get(p.job_id)
        if worker is None or worker.job_id in stopped:
            continue
        known = shrinks.get(worker.job_id)
        task = (worker.role, worker.index)
        if known is None:
            shrinks[worker.job_id] = Shrink(worker.job_id, (task,), p.grace_seconds, p.reason, p.for_job_id)
        else:
            shrinks[worker.job_id] = replace(known, tasks=(*known.tasks, task))
    for wait in cycle.waits.values():
        if any(v in cycle.workers for v in wait.victims):
            wait.victims = tuple(dict.fromkeys(_owner_of(cycle, v) for v in wait.victims))
    return whole, [shrinks[job_id] for job_id in sorted(shrinks)]
