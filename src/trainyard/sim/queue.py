"""The queueing track's event loop: jobs arrive, wait, run, are preempted, finish.

Every decision is ``scheduler.schedule(snapshot)``'s — the function the controller calls —
on a snapshot built the way the controller builds one (nodes with their usage, running and
pending jobs, VCs, the time). The loop only applies what it decided: starts become running
jobs that end after their remaining duration; a preempted job stops after its grace period
and is requeued with the service it attained. Each job's state moves through
``core.transitions``, as a live job's does (``sim/lifecycle.py``). A cycle runs after every batch of events at
one instant (arrivals, ends, stops, Tiresias demotions), and is skipped only when it cannot
change anything: no GPU is free and nothing could be preempted (Tiresias's levels,
time-sharing's turns, reclaiming borrowed work).

Queue policies are scheduler configurations plus the queue key the scheduler sorts by
(``PendingJob.submitted_at`` within a priority):

* ``fifo``: submit order, no reservations (a job that does not fit lets later ones start);
* ``sjf``: the same, keyed by the job's true duration (an oracle);
* ``tiresias``: two-dimensional least-attained-service (Gu et al., NSDI'19): a job's
  priority is the level of the GPU-seconds it has attained (thresholds ``LAS_LEVELS``);
  higher levels preempt lower ones through the scheduler's priority preemption, which
  needs a VC with a quota: without ``--vc-quotas`` one VC holds the whole cluster;
* ``default``: Trainyard as configured out of the box (EASY backfill, its default scorer,
  time-sharing: suspendable jobs of one priority take turns, least attained service first,
  a time slice apart, by the rules of ``scheduler.turns`` — ``SchedulerConfig.timeshare``);
* ``easy``: the default without time-sharing (what it was before issue 16).

Suspension (a preemption of a suspendable job, ``Preempt.suspend``) costs the job
``suspend_cost`` seconds of its GPUs when it resumes (saving and restoring its checkpoint):
its run grows by that much, counted as lost GPU time. Which jobs are suspendable is
``suspendable``: all, half (even job ids) or none. A job stopped and requeued keeps its
progress at no cost, as before (Tiresias's own assumption).

Borrowing and fair share (``scheduler.borrowing``, ``scheduler.fairshare``) are the
policy's ``SchedulerConfig.borrowing`` and ``fair_share_half_life``, on by default as in
the controller (``policy_named`` turns them off: ``--borrowing off --fair-share-half-life 0``
replays the scheduler as it was before them). A start the scheduler marks borrowed
(``StartJob.borrowed``) runs as borrowed work; each run is added to a
``fairshare.UsageTally`` when it stops (end, preemption, suspension), and every snapshot
carries ``usage`` and ``borrowed_usage`` from ``fairshare.current_usage``, as the
controller's do. VC weights and borrowing and lending limits are the ``VirtualCluster``'s
(``vc_settings``).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from trainyard.core.priorities import DEFAULT_PRIORITY, OPPORTUNISTIC_RANK
from trainyard.scheduler import fairshare
from trainyard.scheduler.schedule import ordered, schedule
from trainyard.scheduler.snapshot import (
    GpuSlot,
    NodeState,
    PendingJob,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TaskPlacement,
    TaskRequest,
    VirtualCluster,
)
from trainyard.scheduler.turns import turn_over_for
from trainyard.sim import elastic as elastic_jobs
from trainyard.sim import lifecycle
from trainyard.sim.datasets import DataCaches, DataTally, queue_positions
from trainyard.sim.defaults import RESIZE_COST, SUSPEND_COST, SUSPENDABLE
from trainyard.sim.jobs import TraceJob, gang_tasks
from trainyard.sim.lifecycle import SimJob

# Tiresias's levels: below 1 GPU-hour attained, below 10, and beyond (priority ranks 0, 1, 2).
LAS_LEVELS = (3_600.0, 36_000.0)
CYCLES_PER_INSTANT = 4  # a preemption with no grace frees GPUs for another cycle at once


@dataclass(frozen=True)
class QueuePolicy:
    name: str
    config: SchedulerConfig
    key: str = "submit"  # what the scheduler's queue order sees as submit time: submit | duration
    las: bool = False  # priority from attained service (Tiresias)


POLICIES = {
    "fifo": QueuePolicy("fifo", SchedulerConfig(backfill=False, timeshare=False)),
    "sjf": QueuePolicy("sjf", SchedulerConfig(backfill=False, timeshare=False), key="duration"),
    "tiresias": QueuePolicy("tiresias", SchedulerConfig(backfill=False, timeshare=False), las=True),
    "default": QueuePolicy("default", SchedulerConfig()),
    "easy": QueuePolicy("easy", SchedulerConfig(timeshare=False)),
}


def policy_named(name: str, time_slice: float | None = None, borrowing: bool | None = None,
                 fair_share_half_life: float | None = None, max_starts: int | None = None,
                 moves_per_hour: int | None = None) -> QueuePolicy:
    """The policy; ``time_slice`` (seconds) replaces the scheduler's default slice, and
    ``borrowing`` and ``fair_share_half_life`` (seconds, 0: off) its defaults (both on);
    ``max_starts`` bounds the jobs a cycle starts (``SchedulerConfig.max_starts``; none by default);
    ``moves_per_hour`` turns consolidation on with that budget (``SchedulerConfig.moves_per_hour``).
    ``borrowing=False, fair_share_half_life=0`` is the scheduler as it was before them."""
    if name not in POLICIES:
        raise ValueError(f"unknown queue policy {name!r}; choose one of: {', '.join(POLICIES)}")
    policy = POLICIES[name]
    if time_slice is not None:
        if not time_slice >= 0:  # also NaN
            raise ValueError(f"--time-slice must be >= 0 seconds; got {time_slice}")
        policy = replace(policy, config=replace(policy.config, time_slice=time_slice))
    if borrowing is not None:
        policy = replace(policy, config=replace(policy.config, borrowing=borrowing))
    if fair_share_half_life is not None:
        if not 0 <= fair_share_half_life < math.inf:  # also NaN
            raise ValueError(f"--fair-share-half-life must be >= 0 seconds (0: off); got {fair_share_half_life}")
        policy = replace(policy, config=replace(policy.config, fair_share_half_life=fair_share_half_life))
    if moves_per_hour is not None:
        if moves_per_hour < 0:
            raise ValueError(f"--moves-per-hour must be >= 0 (0: no consolidation); got {moves_per_hour}")
        policy = replace(policy, config=replace(policy.config, moves_per_hour=moves_per_hour))
    if max_starts is not None:  # a cycle stopped at the bound is followed by the next at the same instant
        if max_starts < 0:
            raise ValueError(f"--max-starts must be >= 0 (0: no bound); got {max_starts}")
        policy = replace(policy, config=replace(policy.config, max_starts=max_starts))
    return policy


def vc_settings(vcs: Sequence[VirtualCluster], weights: Mapping[str, float] | None = None,
                borrow_limits: Mapping[str, int] | None = None, lend_limits: Mapping[str, int] | None = None,
                ) -> tuple[VirtualCluster, ...]:
    """``vcs`` with the weights and the borrowing and lending limits (whole GPUs) named per
    VC; ValueError for a VC not among ``vcs`` or a value out of range."""
    known = {v.name for v in vcs}
    for option, values in (("--vc-weights", weights), ("--borrow-limit", borrow_limits),
                           ("--lend-limit", lend_limits)):
        for vc, value in (values or {}).items():
            if vc not in known:
                raise ValueError(f"{option}: no VC {vc!r} has a quota; the VCs are: {', '.join(sorted(known))}")
            if option == "--vc-weights" and not 0 < value < math.inf:
                raise ValueError(f"{option}: {vc}'s weight must be a number > 0; got {value}")
            if option != "--vc-weights" and value < 0:
                raise ValueError(f"{option}: {vc}'s limit must be a whole number of GPUs >= 0; got {value}")
    return tuple(
        replace(v, weight=(weights or {}).get(v.name, v.weight),
                borrow_limit=(borrow_limits or {}).get(v.name, v.borrow_limit),
                lend_limit=(lend_limits or {}).get(v.name, v.lend_limit))
        for v in vcs
    )


@dataclass
class Outcome:
    job: TraceJob
    first_start: float | None = None
    end: float | None = None
    preemptions: int = 0
    suspensions: int = 0  # of its preemptions, those that suspended it
    borrowed_starts: int = 0  # its starts as borrowed work (``StartJob.borrowed``)
    reclaims: int = 0  # of its preemptions, those of it running as borrowed work
    ran: float = 0.0  # seconds it held workers (an elastic job's run is not its traced duration)
    resizes: int = 0  # an elastic job's grows and shrinks
    moves: int = 0  # of its suspensions, those consolidation made to resume it elsewhere

    @property
    def jct(self) -> float:
        assert self.end is not None
        return self.end - self.job.submit

    @property
    def queueing(self) -> float:
        """Time in the system not spent running (a fixed job runs its traced duration, and
        its checkpoints' restores count as waiting, as before elastic jobs)."""
        return self.jct - (self.ran if self.job.elastic is not None else self.job.duration)


@dataclass
class QueueResult:
    policy: str
    gpus: int
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    rejected: list[TraceJob] = field(default_factory=list)  # larger than the cluster or its VC's quota
    never_started: list[TraceJob] = field(default_factory=list)  # waiting when everything else ended
    preemptions: int = 0
    suspensions: int = 0  # preemptions of suspendable jobs (each costs ``suspend_cost``)
    lost_gpu_seconds: float = 0.0  # GPU time spent saving and restoring checkpoints
    moves: int = 0  # consolidation's moves (``Preempt.move``): suspensions to resume elsewhere
    move_lost_gpu_seconds: float = 0.0  # of ``lost_gpu_seconds``, what moves cost
    move_times: list[float] = field(default_factory=list)  # when each move was made
    cycles: int = 0
    first_submit: float = 0.0
    last_end: float = 0.0
    job_seconds: float = 0.0  # integral of the number of jobs in the system over time
    busy_gpu_seconds: float = 0.0  # integral of GPUs allocated over time
    peak_gpus_busy: int = 0  # never above ``gpus``
    peak_device_milli: int = 0  # never above 1000
    borrowed_starts: int = 0  # starts as borrowed work
    reclaims: int = 0  # preemptions of borrowed work (by a lender, or for fair share)
    reclaim_suspensions: int = 0  # of those, suspensions (the rest are requeues)
    grows: int = 0  # elastic jobs grown (each a restart costing ``resize_cost``)
    shrinks: int = 0
    # GPU-seconds per VC of the trace: all its work's, and its borrowed work's
    vc_gpu_seconds: dict[str, float] = field(default_factory=dict)
    vc_borrowed_gpu_seconds: dict[str, float] = field(default_factory=dict)
    data: DataTally | None = None  # the nodes' dataset caches (``sim.datasets``), where modelled


def level(attained: float) -> int:
    return sum(1 for threshold in LAS_LEVELS if attained >= threshold)


def is_suspendable(which: str, job_id: int) -> bool:
    """Whether a job is suspendable when ``which`` of them are (``SUSPENDABLE``)."""
    if which not in SUSPENDABLE:
        raise ValueError(f"unknown --suspendable {which!r}; choose one of: {', '.join(SUSPENDABLE)}")
    return which == "all" or (which == "half" and job_id % 2 == 0)


class QueueSim:
    def __init__(self, nodes: Sequence[NodeState], jobs: Sequence[TraceJob], policy: QueuePolicy,
                 vcs: Sequence[VirtualCluster] = (), grace: float = 0.0, tick: float = 0.0,
                 suspendable: str = "all", suspend_cost: float = SUSPEND_COST,
                 resize_cost: float = RESIZE_COST, data: DataCaches | None = None) -> None:
        if not suspend_cost >= 0:  # also NaN
            raise ValueError(f"--suspend-cost must be >= 0 seconds; got {suspend_cost}")
        if not resize_cost >= 0:
            raise ValueError(f"--resize-cost must be >= 0 seconds; got {resize_cost}")
        self.resize_cost = resize_cost
        self.held: dict[int, int] = {}  # GPUs each running job holds (an elastic job's change)
        self.policy = policy
        self.suspend_cost = suspend_cost
        self.grace = grace
        self.tick = tick  # seconds between scheduling cycles; 0: a cycle at every event
        self.nodes = {n.name: n for n in nodes}
        self.used = {n.name: [0] * len(n.gpus) for n in nodes}
        self.gpus = sum(len(n.gpus) for n in nodes)
        self.largest = max((len(n.gpus) for n in nodes), default=0)
        self.vcs = tuple(vcs)
        if policy.las and not self.vcs:  # priority preemption needs a quota to preempt within
            self.vcs = (VirtualCluster("all", {"gpu": self.gpus}),)
        self.vc_names = {v.name for v in self.vcs}
        self.quota = {v.name: sum(v.quota.values()) for v in self.vcs}
        self.vc_weight = {v.name: v.weight if v.weight > 0 else 1.0 for v in self.vcs}
        self.may_borrow = {v.name for v in self.vcs if v.borrow_limit != 0}
        self.in_quota: dict[str, int] = defaultdict(int)  # GPUs each VC's guaranteed work holds
        self.borrowed: dict[int, RunningJob] = {}  # running borrowed work
        self.tally = fairshare.UsageTally(policy.config.fair_share_half_life)
        self.jobs = sorted(jobs, key=lambda j: (j.submit, j.job_id))
        # Usage orders users (one principal per user without VCs) and borrowing VCs: with one
        # user and no VCs (Philly without quotas) the scheduler has nothing to use it for.
        self.usage_matters = bool(self.vcs) or len({j.user for j in self.jobs}) > 1
        self.result = QueueResult(policy.name, self.gpus, data=None if data is None else data.tally)
        # The nodes' dataset caches (``sim.datasets``): a start waits for its data where they
        # lack it; the waiting jobs next in line prefer the nodes that hold it (``data_nodes``).
        self.data = data
        self.positions: dict[int, int] = {}  # each waiting job's place in its VC, as the last cycle decided
        self.data_nodes: dict[int, frozenset[str]] = {}  # what the last snapshot's jobs had to prefer
        self.fetch_debt: dict[int, float] = {}  # of ``debt``, the wait for data
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.segment_start: dict[int, float] = {}
        self.end_at: dict[int, float] = {}
        self.stopping: dict[int, float] = {}
        self.attained: dict[int, float] = {}  # GPU-seconds run so far
        self.done: dict[int, float] = {}  # seconds of the job's duration already run
        self.debt: dict[int, float] = {}  # seconds of checkpoint restore still to run before progress
        self.move_debt: dict[int, float] = {}  # of ``debt``, what a move (consolidation) added
        self.moved_at: list[float] = []  # when consolidation's moves were made (the budget's hour)
        self.suspendable = {j.job_id for j in self.jobs if is_suspendable(suspendable, j.job_id)}
        self.events: list[tuple[float, int, int]] = []  # (time, kind, job id)
        self.by_id = {j.job_id: j for j in self.jobs}
        self.records: dict[int, SimJob] = {}  # each job's state, attempts and history
        self.now = 0.0
        self.busy = 0
        self.ended = 0  # jobs that finished (for progress)

    # --- the loop ------------------------------------------------------------------------

    def run(self, on_fraction: Callable[[float], None] | None = None) -> QueueResult:
        """Replay every job; ``on_fraction`` hears as it goes how much is done (0 to 1): each
        job counts half when it arrives and half when it ends."""
        result = self.result
        limit = {v.name: sum(v.quota.values()) for v in self.vcs}

        def fits(j: TraceJob) -> bool:
            return j.gpus <= min(self.gpus, limit.get(self._vc_of(j), 0 if self.vcs else self.gpus))

        arrivals = [j for j in self.jobs if fits(j)]
        result.rejected = [j for j in self.jobs if not fits(j)]
        if not arrivals:
            return result
        result.first_submit = self.now = arrivals[0].submit
        nxt = 0
        while nxt < len(arrivals) or self.events:
            upcoming = arrivals[nxt].submit if nxt < len(arrivals) else float("inf")
            t = min(upcoming, self.events[0][0] if self.events else float("inf"))
            if self.tick > 0:  # the controller's tick: what happened since the last one, at once
                t = math.ceil(t / self.tick) * self.tick
            changed = False
            while True:  # every event and arrival up to t, each at its own time
                at_event = self.events[0][0] if self.events else float("inf")
                at_arrival = arrivals[nxt].submit if nxt < len(arrivals) else float("inf")
                if min(at_event, at_arrival) > t:
                    break
                if at_event <= at_arrival:
                    self._advance(at_event)
                    _, kind, job_id = heapq.heappop(self.events)
                    changed |= self._event(kind, job_id)
                else:
                    self._advance(at_arrival)
                    job = arrivals[nxt]
                    result.outcomes[job.job_id] = Outcome(job)
                    self.attained[job.job_id] = self.done[job.job_id] = self.debt[job.job_id] = 0.0
                    self.records[job.job_id] = lifecycle.submitted(job.job_id, self.now, self.grace)
                    self._enqueue(job)
                    nxt += 1
                    changed = True
            self._advance(t)
            if changed:
                self._cycles()
            if on_fraction is not None:
                on_fraction((nxt + self.ended) / (2 * len(arrivals)))
        # Left waiting with nothing more to happen: gangs no node shape (or cell) can hold.
        result.never_started = [self.by_id[j] for j in sorted(self.pending)]
        for job in result.never_started:
            del result.outcomes[job.job_id]
        # The last job's end (later events were a resized job's earlier, superseded ends).
        result.last_end = max((o.end for o in result.outcomes.values() if o.end is not None), default=self.now)
        if on_fraction is not None:
            on_fraction(1.0)
        return result

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt > 0:
            in_system = len(self.pending) + len(self.running)
            self.result.job_seconds += in_system * dt
            self.result.busy_gpu_seconds += self.busy * dt
            self.now = t

    def _event(self, kind: int, job_id: int) -> bool:
        if kind == 0:  # ends
            if job_id in self.running and self.end_at.get(job_id) == self.now and job_id not in self.stopping:
                self._release(job_id)
                lifecycle.ended(self.records[job_id], self.now)
                outcome = self.result.outcomes[job_id]
                outcome.end = self.now
                self.ended += 1
                return True
            return False
        if kind == 1:  # a preempted job has stopped
            if self.stopping.get(job_id) == self.now and job_id in self.running:
                del self.stopping[job_id]
                self._release(job_id)
                if self.done[job_id] >= self.by_id[job_id].duration - 1e-9:
                    lifecycle.ended(self.records[job_id], self.now)
                    self.result.outcomes[job_id].end = self.now  # it finished within its grace
                    self.ended += 1
                else:
                    lifecycle.requeued(self.records[job_id], self.now)
                    self._enqueue(self.by_id[job_id])
                return True
            return False
        if kind == 3:  # a running job's slice is over, or it passed the floor: a turn may be possible
            running = self.running.get(job_id)
            least = self._least_waiting_service()
            # Only if the job that has waited with least service could take it (else the
            # cycle would decide what the last one did; and the cluster is often full).
            return (running is not None and least is not None and job_id not in self.stopping
                    and turn_over_for(self.policy.config, least, running, self.now + 1e-6))
        if kind == 4:  # borrowed work has run a slice: another VC's borrowing job may reclaim it
            return job_id in self.borrowed and job_id not in self.stopping and self._fair_reclaim_possible()
        # kind 2: a running job's attained service crossed a Tiresias level
        running = self.running.get(job_id)
        if running is None or job_id in self.stopping:
            return False
        attained = self.attained[job_id] + self.by_id[job_id].gpus * (self.now - self.segment_start[job_id])
        rank = level(attained + 1e-6)
        if rank != running.priority_rank:
            self.running[job_id] = replace(running, priority_rank=rank)
            self._schedule_demotion(job_id, attained)
            return bool(self.pending)
        return False

    def _cycles(self) -> None:
        rounds = 0
        while rounds < CYCLES_PER_INSTANT:
            if not self.pending and not self._growable():
                return
            # Nothing can start on fewer free GPUs than the smallest waiting job needs, and
            # only Tiresias's levels, turns over, reclaiming borrowed work and shrinking
            # elastic jobs preempt: then a cycle would decide nothing (but growing).
            if (self.pending and not self.policy.las
                    and self.gpus - self.busy < min(self._least_gpus(j) for j in self.pending)
                    and not self._turn_possible() and not self._reclaim_possible() and not self._shrinkable()
                    and not self._move_possible()
                    and not self._growable()):
                if self.data is not None and self.data.by_position and any(j not in self.positions
                                                                           for j in self.pending):
                    # The controller's cycle would run and place a job that arrived in its queue.
                    self.positions = queue_positions(ordered(self._snapshot())[0])
                return
            decisions = schedule(self._snapshot())
            self.result.cycles += 1
            if self.data is not None and self.data.by_position:
                self.positions = {w.job_id: w.position for w in decisions.waits}
            rounds += not decisions.more  # a cycle stopped at its bound of starts started some: it goes on
            for start in decisions.starts:
                self._start(start.job_id, start.placements, start.borrowed)
            for grow in decisions.grows:
                self._resize(grow.job_id, added=grow.placements)
            for shrink in decisions.shrinks:  # at once: its workers free their GPUs now
                self._resize(shrink.job_id, removed=shrink.tasks)
            stopped_now = False
            for preempt in decisions.preemptions:
                job_id = preempt.job_id
                self.result.preemptions += 1
                self.result.outcomes[job_id].preemptions += 1
                if job_id in self.borrowed:
                    self.result.reclaims += 1
                    self.result.outcomes[job_id].reclaims += 1
                    self.result.reclaim_suspensions += preempt.suspend
                if preempt.suspend:
                    self.result.suspensions += 1
                    self.result.outcomes[job_id].suspensions += 1
                    self.debt[job_id] += self.suspend_cost
                if preempt.move:
                    self.result.moves += 1
                    self.result.outcomes[job_id].moves += 1
                    self.move_debt[job_id] = self.move_debt.get(job_id, 0.0) + self.suspend_cost
                    self.moved_at.append(self.now)
                    self.result.move_times.append(self.now)
                lifecycle.preempted(self.records[job_id], preempt.reason, self.now)
                self.stopping[job_id] = self.now + preempt.grace_seconds
                self.running[job_id] = replace(self.running[job_id], stops_by=self.stopping[job_id])
                if job_id in self.borrowed:
                    self.borrowed[job_id] = self.running[job_id]
                heapq.heappush(self.events, (self.stopping[job_id], 1, job_id))
                stopped_now |= preempt.grace_seconds <= 0
            if not stopped_now and not decisions.shrinks and not decisions.more:
                return
            while self.events and self.events[0][0] <= self.now:  # the stops due now
                _, kind, job_id = heapq.heappop(self.events)
                self._event(kind, job_id)

    # --- changes ---------------------------------------------------------------------------

    def _enqueue(self, job: TraceJob) -> None:
        key = job.duration if self.policy.key == "duration" else job.submit
        rank = level(self.attained[job.job_id]) if self.policy.las else DEFAULT_PRIORITY.rank
        vc = self._vc_of(job)
        grow: tuple[TaskRequest, ...] = ()
        if job.elastic is not None:
            tasks = elastic_jobs.workers(0, job.elastic.low)
            grow = elastic_jobs.workers(job.elastic.low, job.elastic.high - job.elastic.low)
        else:
            tasks = tuple(
                TaskRequest("worker", i, milli, 0, 0) for i, milli in enumerate(gang_tasks(job.gpus, self.largest))
            )
        self.pending[job.job_id] = PendingJob(
            job.job_id, rank, key, tasks, job.user, vc, suspendable=job.job_id in self.suspendable,
            attained_service=self.attained[job.job_id], grow=grow,
            speedup=job.elastic.curve if job.elastic is not None else (),
        )

    def _least_gpus(self, job_id: int) -> int:
        """The fewest GPUs the waiting job starts on."""
        job = self.by_id[job_id]
        return job.elastic.low if job.elastic is not None else job.gpus

    def _vc_of(self, job: TraceJob) -> str:
        return job.vc if job.vc in self.vc_names else ("all" if "all" in self.vc_names else job.vc)

    def _start(self, job_id: int, placements: Sequence[TaskPlacement], borrowed: bool = False) -> None:
        job = self.pending.pop(job_id)
        lifecycle.started(self.records[job_id], ", ".join(f"{p.role}/{p.index} on {p.node}" for p in placements),
                          self.now)
        self._take(placements)
        if self.data is not None:  # its nodes fetch its data first: its GPUs are held meanwhile
            wait = self.data.start(job_id, (p.node for p in placements), job_id in self.data_nodes)
            self.debt[job_id] += wait
            self.fetch_debt[job_id] = wait
        held = sum(share.milli for p in placements for share in p.gpus) // 1000
        self.held[job_id] = held
        self.busy += held
        self.result.peak_gpus_busy = max(self.result.peak_gpus_busy, self.busy)
        self.running[job_id] = self._elastic_view(RunningJob(
            job_id, job.vc, job.user, job.priority_rank, tuple(placements), self.now, None, self.grace,
            suspendable=job.suspendable, attained_service=self.attained[job_id], borrowed=borrowed,
        ))
        self.segment_start[job_id] = self.now
        outcome = self.result.outcomes[job_id]
        if borrowed:
            self.borrowed[job_id] = self.running[job_id]
            outcome.borrowed_starts += 1
            self.result.borrowed_starts += 1
            # Another VC's borrowing job may reclaim it for fair share once it has run a slice.
            heapq.heappush(self.events, (self.now + self.policy.config.time_slice, 4, job_id))
        elif job.priority_rank < OPPORTUNISTIC_RANK:
            self.in_quota[job.vc] += held
        if outcome.first_start is None:
            outcome.first_start = self.now
        self._schedule_end(job_id)
        if self.policy.config.timeshare and job.suspendable:
            self._schedule_turns(job_id)
        if self.policy.las:
            self._schedule_demotion(job_id, self.attained[job_id])

    def _schedule_turns(self, job_id: int) -> None:
        """Wake the loop when a waiting job may take its turn from ``job_id`` (``turns``):
        once its slice is over, and once it has received more than ``turn_floor`` if that
        comes later (a waiting job's ratio is met by whatever event comes: it was not met
        when the waiting job stopped, and depends on who waits)."""
        config = self.policy.config
        slice_ends = self.now + config.time_slice
        heapq.heappush(self.events, (slice_ends, 3, job_id))
        floor_at = self.now + (config.turn_floor - self.attained[job_id]) / self.by_id[job_id].gpus
        if slice_ends < floor_at < self.end_at[job_id]:
            heapq.heappush(self.events, (floor_at + 1e-6, 3, job_id))

    def _schedule_demotion(self, job_id: int, attained: float) -> None:
        nxt = next((t for t in LAS_LEVELS if t > attained + 1e-6), None)
        if nxt is not None:
            gpus = self.by_id[job_id].gpus
            heapq.heappush(self.events, (self.now + (nxt - attained) / gpus, 2, job_id))

    def _release(self, job_id: int) -> None:
        self._account(job_id)
        running = self.running.pop(job_id)
        del self.segment_start[job_id]
        held = self.held.pop(job_id)
        fairshare.record_end(self.tally, running, self.now)
        if self.borrowed.pop(job_id, None) is None and running.priority_rank < OPPORTUNISTIC_RANK:
            self.in_quota[running.vc] -= held
        self.end_at.pop(job_id, None)
        self._free(running.placements)
        self.busy -= held
        if self.data is not None:  # a wait for data cut short is not carried to its next start
            self.debt[job_id] -= self.fetch_debt.pop(job_id, 0.0)
            self.data.end(job_id)

    def _account(self, job_id: int) -> None:
        """What the job did since its run's last change (start, resize): its GPU time, its
        progress (after any checkpoint to restore), its service."""
        trace = self.by_id[job_id]
        held = self.held[job_id]
        ran = self.now - self.segment_start[job_id]
        self.segment_start[job_id] = self.now
        vc_seconds = self.result.vc_gpu_seconds
        vc_seconds[trace.vc] = vc_seconds.get(trace.vc, 0.0) + held * ran
        if job_id in self.borrowed:
            lent = self.result.vc_borrowed_gpu_seconds
            lent[trace.vc] = lent.get(trace.vc, 0.0) + held * ran
        restoring = min(ran, self.debt[job_id])  # the data's fetch and checkpoint's restore, before any progress
        self.debt[job_id] -= restoring
        fetching = min(restoring, self.fetch_debt.get(job_id, 0.0))
        if fetching > 0:
            self.fetch_debt[job_id] -= fetching
            assert self.result.data is not None
            self.result.data.fetch_gpu_seconds += held * fetching
            restoring -= fetching
        self.result.lost_gpu_seconds += held * restoring
        moving = min(restoring, self.move_debt.get(job_id, 0.0))
        if moving > 0:
            self.move_debt[job_id] -= moving
            self.result.move_lost_gpu_seconds += held * moving
        self.done[job_id] += (ran - restoring) * self._speed(job_id)
        self.attained[job_id] += held * ran
        self.result.outcomes[job_id].ran += ran

    def _speed(self, job_id: int) -> float:
        trace = self.by_id[job_id]
        if trace.elastic is None:
            return 1.0
        return trace.elastic.speed(len(self.running[job_id].placements), trace.gpus)

    def _schedule_end(self, job_id: int) -> None:
        remaining = max(0.0, self.by_id[job_id].duration - self.done[job_id])
        end = self.now + self.debt[job_id] + remaining / self._speed(job_id)
        self.end_at[job_id] = end
        heapq.heappush(self.events, (end, 0, job_id))

    def _take(self, placements: Sequence[TaskPlacement]) -> None:
        for p in placements:
            used = self.used[p.node]
            for share in p.gpus:
                used[share.index] += share.milli
                self.result.peak_device_milli = max(self.result.peak_device_milli, used[share.index])
            self._refresh(p.node)

    def _free(self, placements: Sequence[TaskPlacement]) -> None:
        for p in placements:
            used = self.used[p.node]
            for share in p.gpus:
                used[share.index] -= share.milli
            self._refresh(p.node)

    def _resize(self, job_id: int, added: Sequence[TaskPlacement] = (),
                removed: Sequence[tuple[str, int]] = ()) -> None:
        """An elastic job grows (``added``) or shrinks (``removed``, at once: the simulator's
        workers stop without a grace period); either way it restarts from its checkpoint,
        ``resize_cost`` seconds without progress."""
        running = self.running.get(job_id)
        if running is None or job_id in self.stopping:
            return
        self._account(job_id)
        gone = set(removed)
        kept = tuple(p for p in running.placements if (p.role, p.index) not in gone)
        self._free([p for p in running.placements if (p.role, p.index) in gone])
        self._take(added)
        placements = (*kept, *added)
        held = sum(share.milli for p in placements for share in p.gpus) // 1000
        self.busy += held - self.held[job_id]
        self.result.peak_gpus_busy = max(self.result.peak_gpus_busy, self.busy)
        self.held[job_id] = held
        self.running[job_id] = self._elastic_view(replace(running, placements=placements))
        if job_id in self.borrowed:
            self.borrowed[job_id] = self.running[job_id]
        self.debt[job_id] += self.resize_cost
        outcome = self.result.outcomes[job_id]
        outcome.resizes += 1
        if added:
            self.result.grows += 1
        if removed:
            self.result.shrinks += 1
        self._schedule_end(job_id)

    def _elastic_view(self, running: RunningJob) -> RunningJob:
        """An elastic job as the scheduler sees it: the workers it may add, and those beyond
        its minimum it may lose (the last added first)."""
        model = self.by_id[running.job_id].elastic
        if model is None:
            return running
        have = {p.index for p in running.placements}
        missing = [i for i in range(model.high) if i not in have]
        return replace(
            running,
            speedup=model.curve,
            grow=tuple(t for i in missing for t in elastic_jobs.workers(i, 1)),
            shrink=tuple(("worker", i) for i in sorted(have, reverse=True) if i >= model.low),
        )

    def _move_possible(self) -> bool:
        """Whether consolidation might move a job (a cheap test, as ``_turn_possible``): it is
        on with budget left, a GPU is free for a moved job to go to, and a suspendable job
        has run long enough to be moved."""
        config = self.policy.config
        if config.moves_per_hour <= 0 or self.busy >= self.gpus or self._recent_moves() >= config.moves_per_hour:
            return False
        return any(job_id not in self.stopping and r.suspendable and self.now - r.started_at >= config.move_after
                   for job_id, r in self.running.items())

    def _growable(self) -> bool:
        """Whether a running elastic job could grow: one below its maximum, and a GPU free."""
        return self.busy < self.gpus and any(r.grow and j not in self.stopping for j, r in self.running.items())

    def _shrinkable(self) -> bool:
        """Whether a waiting job might shrink an elastic job (one runs beyond its minimum)."""
        return any(r.shrink and j not in self.stopping for j, r in self.running.items())

    def _turn_possible(self) -> bool:
        """Whether a waiting job might take its turn from a running one (a cheap test, so
        that cycles on a full cluster run only when time-sharing could decide something)."""
        config = self.policy.config
        least = self._least_waiting_service() if config.timeshare else None
        if least is None:
            return False
        return any(
            job_id not in self.stopping and turn_over_for(config, least, r, self.now)
            for job_id, r in self.running.items()
        )

    def _reclaim_possible(self) -> bool:
        """Whether a waiting job might preempt borrowed work (a cheap test, as ``_turn_possible``):
        one that fits its VC's free quota reclaims it (``borrowing``), and one over its quota
        may take another VC's for fair share (``_fair_reclaim_possible``)."""
        if not any(job_id not in self.stopping for job_id in self.borrowed):
            return False
        for p in self.pending.values():
            if p.priority_rank < OPPORTUNISTIC_RANK and (
                    self.by_id[p.job_id].gpus <= self.quota.get(p.vc, 0) - self.in_quota[p.vc]):
                return True
        return self._fair_reclaim_possible()

    def _fair_reclaim_possible(self) -> bool:
        """Whether a job waiting over its VC's quota might reclaim another VC's borrowed work
        for fair share (``preemption.fair_victim``): work that has run a whole slice, of a VC
        whose weighted borrowed share is above what the waiting job's VC's would be with it."""
        config = self.policy.config
        share: dict[str, float] = defaultdict(float)
        ripe: set[str] = set()
        for job_id, r in self.borrowed.items():
            share[r.vc] += r.gpus / self.vc_weight.get(r.vc, 1.0)
            if job_id not in self.stopping and self.now - r.started_at >= config.time_slice:
                ripe.add(r.vc)
        if not ripe:
            return False
        wants = {(p.vc, self.by_id[p.job_id].gpus) for p in self.pending.values()
                 if p.vc in self.may_borrow and p.priority_rank < OPPORTUNISTIC_RANK}
        return any(
            share[other] > share[vc] + gpus / self.vc_weight.get(vc, 1.0)
            for vc, gpus in wants for other in ripe if other != vc
        )

    def _least_waiting_service(self) -> float | None:
        """The least service a waiting guaranteed job has received (it may take turns from
        the most running jobs); None when none waits."""
        return min((p.attained_service for p in self.pending.values() if p.priority_rank < OPPORTUNISTIC_RANK),
                   default=None)

    def _refresh(self, name: str) -> None:
        node = self.nodes[name]
        used = self.used[name]
        self.nodes[name] = replace(node, gpus=tuple(
            GpuSlot(g.index, g.model, g.memory_mb, used[g.index], g.group) for g in node.gpus))

    def _snapshot(self) -> Snapshot:
        usage: Mapping[tuple[str, str], float] = {}
        borrowed_usage: Mapping[str, float] = {}
        if self.tally.half_life > 0 and self.usage_matters:
            usage, borrowed_usage = fairshare.current_usage(self.tally, self.running.values(), self.now)
        pending = tuple(self.pending.values())
        if self.data is not None:
            self.data_nodes = self.data.preferred(list(self.pending), self.positions)
            pending = tuple(replace(p, data_nodes=self.data_nodes[p.job_id]) if p.job_id in self.data_nodes else p
                            for p in pending)
        return Snapshot(
            nodes=tuple(self.nodes.values()),
            pending=pending,
            now=self.now,
            vcs=self.vcs,
            running=tuple(self.running.values()),
            preempting=frozenset(self.stopping),
            usage=usage,
            borrowed_usage=borrowed_usage,
            config=self.policy.config,
            recent_moves=self._recent_moves(),
        )

    def _recent_moves(self) -> int:
        """Moves made in the hour before now (``Snapshot.recent_moves``)."""
        hour_ago = self.now - 3600.0
        while self.moved_at and self.moved_at[0] <= hour_ago:
            self.moved_at.pop(0)
        return len(self.moved_at)


def vc_quotas(jobs: Sequence[TraceJob], gpus: int, shares: Mapping[str, float] | None = None
              ) -> tuple[VirtualCluster, ...]:
    """A quota per VC in whole GPUs (at least one), in proportion to ``shares`` (e.g. Philly's
    nodes per VC) scaled to the cluster, or else to each VC's GPU-seconds of demand. VCs of
    ``jobs`` missing from ``shares`` get no quota (their jobs are refused, as the scheduler
    refuses an unknown VC)."""
    if shares is None:
        shares = {}
        for j in jobs:
            shares[j.vc] = shares.get(j.vc, 0.0) + j.gpus * j.duration
    total = sum(shares.values()) or 1.0
    quota = {vc: max(1, int(gpus * share / total)) for vc, share in shares.items() if share > 0}
    while sum(quota.values()) > gpus:  # rounding up the smallest may overshoot: trim the largest
        largest = max(quota, key=lambda v: (quota[v], v))
        quota[largest] -= 1
    return tuple(VirtualCluster(vc, {"gpu": n}) for vc, n in sorted(quota.items()))
