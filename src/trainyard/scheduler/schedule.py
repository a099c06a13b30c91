"""One scheduling cycle: ``schedule(snapshot) -> decisions``. Pure; no I/O.

Phases, in the manner of Kueue's cycle, over one ``Ledger`` built from the snapshot:

1. **order**: pending jobs by priority, then (with time-sharing) least attained service,
   then submit time, then id, in queues — one per VC for guaranteed jobs (VCs in name
   order; quotas and cells keep them from competing; one queue for all when the snapshot
   has no VCs), then one queue of opportunistic jobs from every VC, so that guaranteed
   work goes first; with fair share, the jobs of one queue and priority are then
   interleaved by their users' recent usage (``fairshare``);
2. each guaranteed queue in order: **admit** (VC quota, user quota) → **place** the whole
   gang with the configured scorer, or nothing → **backfill**: the first job that cannot
   start gets a reservation (EASY), and later jobs may use what it holds only if they
   surely end before it starts;
3. **preempt**, only now that every guaranteed job that could start has: for each VC, its
   jobs that could not start, in order, get victims (reclaimed opportunistic work, its
   own lower priorities, or — time-sharing — its own suspendable jobs of the same priority
   that have received enough more service and run a whole time slice: ``turns``) until
   one cannot be helped, which keeps the reservation; a job no victim helps because no
   node has room together may have suspendable work moved elsewhere (``consolidate``,
   within the admin's budget of moves);
4. **borrow** (``borrowing``): the guaranteed jobs still waiting for their VC's quota
   alone, VCs taking turns by weighted borrowed share, start on idle GPUs as borrowed
   work (within the borrowing and lending limits), behind every guaranteed reservation
   and plan; those with no room may reclaim opportunistic work, or other VCs' borrowed
   work by fair share;
5. the opportunistic queue, like 2, behind all of those;
6. **grow** (``elastic``): elastic jobs take what is still idle, a worker at a time in turns;
   the plans' victims that are elastic jobs' extra workers become ``Shrink`` decisions;
7. **explain**: every waiting job gets a reason, its position in its VC and an ETA.

A job that does not fit does not block smaller ones behind it (backfill), and the first
one that does not fit is not starved either (its reservation).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from trainyard.core.labels import GPU_SHARES_LABEL
from trainyard.core.priorities import OPPORTUNISTIC_RANK
from trainyard.core.resources import MILLI
from trainyard.core.selectors import SelectorError, compile_selector
from trainyard.scheduler import elastic, whole_nodes
from trainyard.scheduler.backfill import reserve
from trainyard.scheduler.borrowing import borrows_now, run_borrowing
from trainyard.scheduler.capacity import FreeNode, Tentative
from trainyard.scheduler.consolidate import consolidate
from trainyard.scheduler.cycle import Cycle, Reservation, Shape, Wait, shape, start_if_fits
from trainyard.scheduler.fairshare import fair_order
from trainyard.scheduler.ledger import Ledger
from trainyard.scheduler.outside_cells import within_promise
from trainyard.scheduler.placement import fits_somewhere, place_gang
from trainyard.scheduler.preemption import candidates, plan_preemption
from trainyard.scheduler.quota import Refusal
from trainyard.scheduler.reasons import explain
from trainyard.scheduler.scorers.registry import scorer_for
from trainyard.scheduler.selection import unmet
from trainyard.scheduler.snapshot import (
    Decisions,
    Grow,
    NodeState,
    PendingJob,
    PendingReason,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TaskRequest,
)

# Preemption plans that stop more work, per VC queue and cycle: each costs a search over
# victims; a long queue of jobs that all need work stopped is planned over a few cycles,
# in queue order (plans that only wait on work stopping already do not count).
PLANS_PER_QUEUE = 16
# Trial cycles ``never_in_cells`` makes per cycle, each for another VC and set of tasks.
TRIALS_PER_CYCLE = 8
# The job id of ``never_in_cells``' trial cycle, whose own outcome is final (no trial of a trial).
_TRIAL = -1



def queue_order(job: PendingJob, config: SchedulerConfig) -> tuple[int, float, float, int]:
    """Priority, then with time-sharing least attained service (jobs that never ran have
    none, so they keep submit order), then submit time, then id."""
    return (job.priority_rank, job.attained_service if config.timeshare else 0.0, job.submitted_at, job.job_id)


def ordered(snapshot: Snapshot) -> tuple[list[PendingJob], dict[int, int]]:
    """Every pending job in queue order (``queue_order``), and with fair share on, the jobs
    of one queue and priority reordered by their users' recent usage (``fairshare``); and
    how many jobs of other users fair share put ahead of each job it moved back."""
    order = sorted(snapshot.pending, key=lambda job: queue_order(job, snapshot.config))
    by_vc = bool(snapshot.vcs)

    def group(job: PendingJob) -> tuple[str, int]:
        guaranteed = job.priority_rank < OPPORTUNISTIC_RANK
        return (job.vc if by_vc and guaranteed else "", job.priority_rank)

    return fair_order(order, snapshot.usage, snapshot.config.fair_share_half_life, group, by_vc=by_vc)


@dataclass(frozen=True)
class Queue:
    jobs: list[PendingJob]
    guaranteed: bool


class _Laps:
    """Seconds spent in each phase, added to ``phases`` when a caller passes one (a
    benchmark's cost model); a clock read per phase, nothing per job."""

    def __init__(self, phases: dict[str, float] | None) -> None:
        self.phases = phases
        self.last = time.perf_counter() if phases is not None else 0.0

    def lap(self, phase: str) -> None:
        if self.phases is not None:
            now = time.perf_counter()
            self.phases[phase] = self.phases.get(phase, 0.0) + now - self.last
            self.last = now


def schedule(snapshot: Snapshot, phases: dict[str, float] | None = None) -> Decisions:
    """One cycle's decisions. ``phases``, if given, gets the seconds spent in each phase
    added to it: ``prepare`` (ledger, scorer, order), ``guaranteed`` (steps 2),
    ``preempt`` (3), ``borrow`` (4), ``opportunistic`` (5), ``elastic`` (6), ``explain`` (7)."""
    with _without_cyclic_gc():
        return _schedule(snapshot, _Laps(phases))


@contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """No cyclic garbage collection during the cycle. A cycle allocates a great many small
    objects (every tried placement records its undo), which set off collections that walk
    every object the process holds — the snapshot's jobs, and in the controller the whole
    server: 10-20 % of a cycle at 1,000 nodes, more the bigger the heap. What a cycle
    throws away is freed by reference counting (its undo records form no cycles); the
    rest waits for the first collection after it. Collection is turned back on only if it
    was on (another thread's cycle may still be running: it then runs with collection)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _schedule(snapshot: Snapshot, laps: _Laps) -> Decisions:
    snapshot = whole_nodes.resolve(snapshot)  # whole-node tasks' amounts, as a lower bound
    snapshot, workers = elastic.split(snapshot)  # elastic jobs' extra workers, as work of their own
    ledger = Ledger(snapshot)
    cycle = Cycle(snapshot, ledger, scorer_for(snapshot), workers=workers)
    order, overtaken = ordered(snapshot)
    cycle.overtaken = overtaken
    *guaranteed, opportunistic = queues(order, by_vc=bool(snapshot.vcs))
    laps.lap("prepare")
    passes = []
    for queue in guaranteed:
        if cycle.capped:
            break
        reservation, blocked = run_queue(cycle, queue)
        if reservation is not None:
            reservation.lift()  # other VCs' guaranteed jobs are not held back by it
        passes.append((reservation, blocked))
    laps.lap("guaranteed")
    grows: list[Grow] = []
    if not cycle.capped:
        # Preempt only now that every guaranteed job that could start has: a plan then sees
        # the cycle's final state, and holds in the next cycle if its victims have stopped.
        holds = [preempt_for_queue(cycle, reservation, blocked) for reservation, blocked in passes]
        for reservation in holds:  # borrowed and opportunistic work must not delay them
            if reservation is not None:
                reservation.apply(ledger)
        laps.lap("preempt")
        run_borrowing(cycle, order, holds)
        laps.lap("borrow")
        run_queue(cycle, opportunistic)
        laps.lap("opportunistic")
        if not cycle.capped:
            grows = elastic.grow(cycle)
    if cycle.capped:  # the rest are tried in the next cycle, which the caller runs at once
        started = {s.job_id for s in cycle.starts}
        untried = Wait(PendingReason.BEHIND, untried=True)  # one for all: nothing changes it after
        known = cycle.waits
        for job in order:
            if job.job_id not in known and job.job_id not in started:
                known[job.job_id] = untried
    preemptions, shrinks = elastic.decisions(cycle, cycle.preemptions)
    laps.lap("elastic")
    waits = explain(cycle, order)
    ledger.close()  # its state is freed as soon as the cycle returns
    laps.lap("explain")
    return Decisions(
        starts=tuple(cycle.starts),
        waits=waits,
        preemptions=tuple(sorted(preemptions, key=lambda p: p.job_id)),
        grows=tuple(grows),
        shrinks=tuple(shrinks),
        more=cycle.capped,
    )


def queues(order: list[PendingJob], *, by_vc: bool) -> list[Queue]:
    """Guaranteed queues (one per VC when VCs exist, else one), then the opportunistic one."""
    guaranteed: dict[str, list[PendingJob]] = {}
    opportunistic = []
    for job in order:
        if job.priority_rank >= OPPORTUNISTIC_RANK:
            opportunistic.append(job)
        else:
            guaranteed.setdefault(job.vc if by_vc else "", []).append(job)
    return [Queue(guaranteed[vc], True) for vc in sorted(guaranteed)] + [Queue(opportunistic, False)]


def run_queue(cycle: Cycle, queue: Queue) -> tuple[Reservation | None, list[PendingJob]]:
    """Admit and place each job of one queue, reserving for the first that cannot start.

    Returns the queue's reservation and the jobs that could not start for lack of room
    or of VC quota (the ones preemption may help), in queue order.
    """
    ledger = cycle.ledger
    now = cycle.snapshot.now
    reservation: Reservation | None = None
    blocked: list[PendingJob] = []
    # Within a pass free resources and quota only shrink, so a job just like one that did
    # not start will not start either: its outcome is reused (most queues are made of few
    # shapes of job). Jobs let through a reservation see more, so they are always tried.
    failed: dict[Shape | tuple[Shape, str], Wait] = {}
    bound = cycle.snapshot.config.max_starts
    for job in queue.jobs:
        holding = reservation is not None and reservation.holds(now)
        passes = holding and reservation is not None and reservation.lets_pass(job, now)
        # A reservation that holds at once against lower priorities spares the others: they
        # are tried as if it held nothing (``Reservation.spares``), and their outcomes are
        # reused among themselves (the same lifted state, which only shrinks too).
        spared = holding and not passes and reservation is not None and reservation.spares(job, now)
        kind = shape(cycle, job)
        key: Shape | tuple[Shape, str] = (kind, "spared") if spared else kind
        if not passes and key in failed:
            known = failed[key]
            cycle.wait(job, known)
            if known.refusal is None or known.refusal.kind == "vc":
                blocked.append(job)
            continue
        with _lifted(reservation if passes or spared else None, ledger):
            if start_if_fits(cycle, job):
                if bound and len(cycle.starts) >= bound:
                    cycle.capped = True  # the jobs after it are not tried (``_schedule``)
                    break
                continue
            refusal = ledger.quotas.admit(job)
        if refusal is not None and refusal.kind != "vc":
            reason = PendingReason.USER_QUOTA if refusal.kind == "user" else PendingReason.QUOTA
            cycle.wait(job, Wait(reason, refusal))
            failed[key] = cycle.waits[job.job_id]
            continue
        if refusal is None and never_in_cells(cycle, job):
            # No room or victim in its quota will ever hold it: it reserves nothing and is
            # tried as borrowed work (``outside_cells``).
            cycle.wait(job, Wait(PendingReason.NO_FIT, outside_cells=True))
            failed[key] = cycle.waits[job.job_id]
            continue
        blocked.append(job)
        if reservation is None:
            if cycle.snapshot.config.backfill:
                reservation = reserve(cycle, job)
            cycle.wait(job, _blocked(refusal, reservation))
            continue  # the first in line: its outcome (a reservation) is its own
        if holding and not passes and not spared and _held_back(cycle, job, reservation):
            cycle.wait(job, Wait(PendingReason.RESERVED, reservation=reservation))
        else:
            cycle.wait(job, _blocked(refusal, None))
        if not passes:
            failed[key] = cycle.waits[job.job_id]
    return reservation, blocked


def preempt_for_queue(
    cycle: Cycle, reservation: Reservation | None, blocked: list[PendingJob]
) -> Reservation | None:
    """Preemption for one VC's jobs that could not start, in queue order; returns the
    reservation that still holds (the first job's, or a new one).

    A job that cannot be helped keeps (or gets) the queue's reservation, and the jobs
    behind it may still reclaim room — but not what the reservation holds, so they never
    delay it. Without that, one job too big for its VC's share would keep every job behind
    it from getting its guaranteed share back from opportunistic work.
    """
    ledger = cycle.ledger
    # Resources only shrink in this loop, so a job just like one that could not be helped
    # cannot be helped either: its outcome is reused, as in ``run_queue``.
    hopeless: set[Shape] = set()
    borrowable: dict[Shape, bool] = {}  # whether jobs of a shape start borrowed as things are
    # Shapes over their VC's quota that start borrowed: quota only shrinks here too, so a
    # later job of the shape is refused again and left to borrowing, as it was.
    borrowing: set[Shape] = set()
    plans = 0
    for position, job in enumerate(blocked):
        kind = shape(cycle, job)
        if kind in hopeless:
            continue
        if kind in borrowing and (reservation is None or reservation.job is not job) and plans < PLANS_PER_QUEUE:
            continue
        if plans >= PLANS_PER_QUEUE:  # the rest are planned in the next cycles, in queue order
            for later in blocked[position:]:
                known = cycle.waits.get(later.job_id)
                if known is not None and known.reason != PendingReason.NO_FIT:
                    continue  # QUOTA and RESERVED stay true
                if _has_victims(cycle, later):
                    cycle.wait(later, Wait(PendingReason.BEHIND))
                elif known is None:
                    cycle.wait(later, Wait(PendingReason.NO_FIT))
            break
        # The queue's reservation, when it is this job's.
        head = reservation if reservation is not None and reservation.job is job else None
        if head is not None:
            head.lift()  # its own hold must not stand in its way
        # Since it was tried, holds were lifted and other VCs' plans took their holes: it
        # may simply fit now.
        if start_if_fits(cycle, job):
            if head is not None:
                reservation = None
            continue
        refusal = ledger.quotas.admit(job)
        stopping = len(cycle.preemptions)
        if refusal is not None and kind not in borrowable:
            borrowable[kind] = borrows_now(cycle, job)
        if refusal is not None and borrowable[kind]:
            # It starts as borrowed work in this cycle's borrowing pass, stopping nothing
            # (``borrowing``); its reservation, if it is the head, holds until then.
            borrowing.add(kind)
            if head is not None:
                head.apply(ledger)
            continue
        if (_may_preempt(cycle, job, refusal) and plan_preemption(cycle, job)) or (
                refusal is None and consolidate(cycle, job)):  # moves, when preemption cannot help
            plans += len(cycle.preemptions) > stopping  # waiting on work stopping already is cheap
            if head is not None:
                reservation = None
            continue
        hopeless.add(kind)
        if head is not None:
            head.apply(ledger)
        elif reservation is None and position > 0 and cycle.snapshot.config.backfill:
            reservation = reserve(cycle, job)  # first in line now that those ahead preempt
            cycle.wait(job, _blocked(refusal, reservation))
    if reservation is not None:
        reservation.lift()
    return reservation


def never_in_cells(cycle: Cycle, job: PendingJob) -> bool:
    """Whether ``job``, guaranteed in a VC whose cells are enforced, can never fit them: its
    tasks are outside HiveD's promise (``outside_cells.within_promise``) and it would not
    start even alone, every node emptied and every other job gone (one trial ``schedule``
    per VC and tasks in a cycle; the VCs stay as they are, so cells are the same size)."""
    ledger = cycle.ledger
    if (job.job_id == _TRIAL or job.borrowing or job.priority_rank >= OPPORTUNISTIC_RANK
            or not ledger.enforced.get(job.vc, False)):
        return False
    policy = ledger.quotas.vcs.get(job.vc)
    if within_promise(ledger.cells, policy.quota if policy is not None else None, job):
        return False
    # What the trial's outcome depends on: the VC and the tasks' resources, not their
    # names (a user must not buy a trial a job by renaming roles), and at most
    # ``TRIALS_PER_CYCLE`` of them a cycle (the jobs after those wait as before: NO_FIT).
    key = (job.vc, tuple(sorted((t.gpu_milli, t.cpu_milli, t.memory_mb, t.gpu_models, t.gpu_memory_mb, t.whole_node,
                                 t.selector) for t in job.tasks)))
    if key not in cycle.alone:
        if len(cycle.alone) >= TRIALS_PER_CYCLE:
            return False
        snapshot = cycle.snapshot
        empty = tuple(
            replace(n, gpus=tuple(replace(g, used_milli=0) for g in n.gpus), cpu_used_milli=0, memory_used_mb=0)
            for n in snapshot.nodes if n.schedulable
        )
        trial = replace(snapshot, nodes=empty, pending=(replace(job, job_id=_TRIAL),), running=(),
                        preempting=frozenset(), user_quotas={}, config=replace(snapshot.config, borrowing=False))
        cycle.alone[key] = bool(schedule(trial).starts)
    return not cycle.alone[key]


def _blocked(refusal: Refusal | None, reservation: Reservation | None) -> Wait:
    reason = PendingReason.QUOTA if refusal is not None else PendingReason.NO_FIT
    return Wait(reason, refusal, reservation=reservation)


def _has_victims(cycle: Cycle, job: PendingJob) -> bool:
    """Whether any work the job may preempt runs on GPUs it could use (the planner's first
    condition, cheap: a job past the plan cap is told it waits its turn only if it has one)."""
    nodes = cycle.ledger.capacity.nodes
    tasks = [t for t in job.tasks if t.gpu_milli > 0]

    def useful(victim: RunningJob) -> bool:
        for placement in victim.placements:
            node = nodes.get(placement.node)
            if node is not None and any(
                node.suits(node.position[g.index], t) for g in placement.gpus for t in tasks
            ):
                return True
        return not tasks  # a CPU-only job: any victim frees CPU

    return next(candidates(cycle, job, useful), None) is not None


def _may_preempt(cycle: Cycle, job: PendingJob, refusal: Refusal | None) -> bool:
    """Over quota, only its own VC's lower priorities, or (time-sharing) its own jobs of
    the same priority whose turn is over, could make room."""
    if refusal is None:
        return True
    policy = cycle.ledger.quotas.policy(job.vc)
    return policy is not None and (policy.allow_priority_preemption or cycle.snapshot.config.timeshare)


def _held_back(cycle: Cycle, job: PendingJob, reservation: Reservation) -> bool:
    """Whether the job would start if the reservation did not hold anything."""
    ledger = cycle.ledger
    reservation.lift()  # as ``_lifted`` does (asked for most jobs behind a reservation: without a generator)
    try:
        if ledger.quotas.admit(job) is not None:
            return False
        somewhere = fits_somewhere(job, ledger)
        if somewhere is not None:
            return somewhere
        attempt = Tentative()
        placed = place_gang(job, ledger, cycle.scorer, attempt)
        attempt.discard()
    finally:
        reservation.apply(ledger)
    return placed is not None


@contextmanager
def _lifted(reservation: Reservation | None, ledger: Ledger) -> Iterator[None]:
    """Give the reservation's resources back for a while (to a job that ends before it)."""
    if reservation is None:
        yield
        return
    reservation.lift()
    try:
        yield
    finally:
        reservation.apply(ledger)


def never_fits(nodes: list[NodeState], tasks: list[TaskRequest]) -> list[str]:
    """Why a job could never run on these nodes even if they were empty; [] if it could.

    Used at submit time, so a user hears "no node has 8 GPUs" at once instead of waiting
    forever. Nodes that are not schedulable still count: they may come back. The parts of
    a resource expression that read node labels or names are left to why-pending: an admin
    may label a node for them at any time (``yard node label``); its other ``&&`` parts
    (``gpu.memoryMB >= 40000``) are checked, since no label makes a GPU bigger.
    """
    problems: list[str] = []
    # The nodes as if empty, built as far as they are read: most tasks fit the first one, and
    # building all of them was most of a submit's check at 1,000 nodes (2.7 ms; issue 33).
    built: list[FreeNode] = []

    def empty() -> Iterator[FreeNode]:
        for i, node in enumerate(nodes):
            if i == len(built):
                built.append(FreeNode.from_state(node, empty=True))
            yield built[i]

    whole_problems = _whole_nodes_never_fit(nodes, tasks)
    problems += whole_problems
    tasks = list(whole_nodes.resolve_tasks(tasks, nodes))
    gpu_nodes = [n for n in nodes if n.gpus]
    unshared = bool(gpu_nodes) and all(n.labels.get(GPU_SHARES_LABEL) == "false" for n in gpu_nodes)
    for task in tasks:
        if unshared and 0 < task.gpu_milli < MILLI:
            problems.append(f"taskRoles.{task.role}.resourcePerInstance.gpu: each instance needs a fraction of a GPU, "
                            "and no node here can share one (on Slurm: no shard GRES; see docs/slurm.md); "
                            "ask for whole GPUs")
            continue
        if task.selector:
            task = replace(task, selector=_fixed_part(task.selector, gpus=task.gpu_milli > 0))
        if task.whole_node or any(node.pick_devices(task) is not None for node in empty()):
            continue
        label = f"taskRoles.{task.role}"
        unmatched = unmet(empty(), task)
        if unmatched is not None:
            problems.append(f"{label}.resourcePerInstance.selector: {unmatched}")
            continue
        most_gpus = max((node.whole_free_gpus(task) for node in empty()), default=0)
        if task.gpu_milli >= MILLI and task.gpu_milli // MILLI > most_gpus:
            what = f" of model {'/'.join(task.gpu_models)}" if task.gpu_models else ""
            problems.append(
                f"{label}: each instance needs {task.gpu_milli // MILLI} GPU{what}; "
                f"the largest node has {most_gpus}"
            )
        elif task.gpu_milli > 0 and most_gpus == 0 and not any(n.gpu_free for n in empty()):
            problems.append(f"{label}: each instance needs a GPU; the cluster has none")
        elif task.cpu_milli > max((n.cpu_milli for n in empty()), default=0):
            most = max((n.cpu_milli for n in empty()), default=0)
            problems.append(
                f"{label}: each instance needs {task.cpu_milli / MILLI:g} CPU; the largest node has {most / MILLI:g}"
            )
        elif task.memory_mb > max((n.memory_mb for n in empty()), default=0):
            most = max((n.memory_mb for n in empty()), default=0)
            problems.append(
                f"{label}: each instance needs {task.memory_mb} MiB of memory; the largest node has {most} MiB"
            )
        else:
            problems.append(f"{label}: no node offers the requested GPU model or GPU memory")
    if whole_problems:  # the totals would only repeat them, with guessed amounts
        return sorted(set(problems), key=problems.index)
    total = sum(t.gpu_milli for t in tasks)
    capacity = sum(len(n.gpus) for n in nodes) * MILLI
    if total > capacity:
        problems.append(f"the job needs {total / MILLI:g} GPU in total; the cluster has {capacity // MILLI}")
    cpu, cpus = sum(t.cpu_milli for t in tasks), sum(n.cpu_milli for n in nodes)
    if cpu > cpus:
        problems.append(f"the job needs {cpu / MILLI:g} CPU in total; the cluster has {cpus / MILLI:g}")
    memory, memories = sum(t.memory_mb for t in tasks), sum(n.memory_mb for n in nodes)
    if memory > memories:
        problems.append(f"the job needs {memory} MiB of memory in total; the cluster has {memories} MiB")
    return sorted(set(problems), key=problems.index)


def _fixed_part(source: str, *, gpus: bool) -> str:
    """The top-level ``&&`` parts of an expression that read neither node labels nor names
    (what no admin's change can make true later), joined again; "" if none. Dropping parts of
    a conjunction only widens it: what the rest refuses, the whole refuses."""
    selector = compile_selector(source, gpus=gpus)
    if not (selector.uses_labels or selector.uses_name):
        return source
    return " && ".join(c.text for c in selector.clauses if not _reads_live(c.text, gpus))


def _reads_live(clause: str, gpus: bool) -> bool:
    try:
        part = compile_selector(clause, gpus=gpus)
    except SelectorError:  # a part that does not stand alone: keep out of the check
        return True
    return part.uses_labels or part.uses_name


def _whole_nodes_never_fit(nodes: list[NodeState], tasks: list[TaskRequest]) -> list[str]:
    """Whole-node roles that ask for more suitable nodes than the cluster has (the job's
    whole-node tasks of one kind need that many different nodes)."""
    wanted: dict[whole_nodes.Kind, list[TaskRequest]] = {}
    for task in tasks:
        if task.whole_node:
            wanted.setdefault(whole_nodes.kind_of(task), []).append(task)
    problems = []
    for kind, of_kind in wanted.items():
        have = len(whole_nodes.suitable(nodes, kind))
        if len(of_kind) <= have:
            continue
        roles = sorted({t.role for t in of_kind})
        what = _whole_kind(kind)
        if have == 0:
            reason = "the cluster has no GPU node" if not any(n.gpus for n in nodes) else f"no node has only {what}"
            message = f"each instance needs a whole node with {what}; {reason}"
        else:
            message = f"needs {len(of_kind)} whole nodes with {what}; the cluster has {have}"
        if len(roles) == 1:
            problems.append(f"taskRoles.{roles[0]}: {message}")
        else:
            problems.append(f"taskRoles: roles {', '.join(roles)} together: {message}")
    return problems


def _whole_kind(kind: whole_nodes.Kind) -> str:
    models, memory = kind
    what = f"{'/'.join(models)} GPUs" if models else "GPUs"
    return what + (f" of at least {memory} MiB" if memory else "")
