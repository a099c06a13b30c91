"""Builders for scheduler tests, and ``World``: a tiny simulator that applies decisions.

``World`` keeps nodes, running and pending jobs and a clock; ``cycle()`` builds the
snapshot the controller would, calls ``schedule`` and applies what it decided: starts
become running jobs (ending after their true duration), preempted jobs stop after their
grace period and are requeued with their original submit time (and the service they have
attained, for time-sharing). Each job's state moves
through ``core.transitions`` as a live job's does (the simulator's ``sim/lifecycle.py``
records), so a decision the lifecycle does not allow fails the test.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from trainyard.core.sharing import GpuSharing
from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import (
    Decisions,
    GpuShare,
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
from trainyard.sim import lifecycle
from trainyard.sim.lifecycle import SimJob


def node(
    name: str,
    gpus: int = 8,
    *,
    model: str = "A100",
    used: Mapping[int, int] | None = None,
    groups: int = 0,
    rack: str | None = None,
    cpu: int = 64_000,
    memory: int = 512_000,
    schedulable: bool = True,
) -> NodeState:
    """A node; ``groups`` > 0 splits its GPUs into that many PCIe groups of equal size."""
    used = used or {}
    size = gpus // groups if groups else 0
    return NodeState(
        name,
        cpu,
        memory,
        tuple(GpuSlot(i, model, 81_920, used.get(i, 0), str(i // size) if size else "") for i in range(gpus)),
        schedulable=schedulable,
        labels={"rack": rack} if rack else {},
    )


def job(
    job_id: int,
    *gpu_milli: int,
    rank: int = 1,
    vc: str = "default",
    user: str = "",
    at: float | None = None,
    models: tuple[str, ...] = (),
    max_runtime: float | None = None,
    cpu: int = 1000,
    memory: int = 1024,
    suspendable: bool = False,
    attained: float = 0.0,
) -> PendingJob:
    tasks = tuple(TaskRequest("w", i, g, cpu, memory, models) for i, g in enumerate(gpu_milli))
    return PendingJob(job_id, rank, float(job_id) if at is None else at, tasks, user, vc, max_runtime,
                      suspendable=suspendable, attained_service=attained)


def on(node_name: str, *indices: int, milli: int = 1000, cpu: int = 1000, memory: int = 1024) -> TaskPlacement:
    return TaskPlacement("w", 0, node_name, tuple(GpuShare(i, milli) for i in indices), cpu, memory)


def running(
    job_id: int,
    *placements: TaskPlacement,
    rank: int = 1,
    vc: str = "default",
    user: str = "",
    started: float = 0.0,
    end: float | None = None,
    grace: float = 30.0,
    suspendable: bool = False,
    attained: float = 0.0,
    borrowed: bool = False,
) -> RunningJob:
    fixed = tuple(replace(p, index=i) for i, p in enumerate(placements))
    return RunningJob(job_id, vc, user, rank, fixed, started, end, grace, suspendable=suspendable,
                      attained_service=attained, borrowed=borrowed)


def with_usage(nodes: Iterable[NodeState], work: Iterable[RunningJob]) -> tuple[NodeState, ...]:
    """The nodes with what ``work`` holds added to their usage (as the controller fills it)."""
    gpu: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[str, int] = defaultdict(int)
    memory: dict[str, int] = defaultdict(int)
    for w in work:
        for p in w.placements:
            cpu[p.node] += p.cpu_milli
            memory[p.node] += p.memory_mb
            for share in p.gpus:
                gpu[(p.node, share.index)] += share.milli
    return tuple(
        replace(
            n,
            gpus=tuple(replace(g, used_milli=g.used_milli + gpu[(n.name, g.index)]) for g in n.gpus),
            cpu_used_milli=n.cpu_used_milli + cpu[n.name],
            memory_used_mb=n.memory_used_mb + memory[n.name],
        )
        for n in nodes
    )


def snapshot(
    nodes: Iterable[NodeState], pending: Iterable[PendingJob], work: Iterable[RunningJob] = (), **kw
) -> Snapshot:
    work = tuple(work)
    return Snapshot(with_usage(nodes, work), tuple(pending), running=work, **kw)


@dataclass
class World:
    nodes: tuple[NodeState, ...]
    vcs: tuple[VirtualCluster, ...] = ()
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    user_quotas: Mapping[tuple[str, int], int] = field(default_factory=dict)
    user_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    now: float = 0.0
    pending: dict[int, PendingJob] = field(default_factory=dict)
    running: dict[int, RunningJob] = field(default_factory=dict)
    ends: dict[int, float] = field(default_factory=dict)  # true end of each running job
    durations: dict[int, float] = field(default_factory=dict)
    stopping: dict[int, float] = field(default_factory=dict)  # preempted job -> when it stops
    # Elastic jobs' workers told to leave (``Shrink``): job -> (role, index) -> when they have exited.
    leaving: dict[int, dict[tuple[str, int], float]] = field(default_factory=dict)
    started_at: dict[int, float] = field(default_factory=dict)  # first start of each job
    history: list[Decisions] = field(default_factory=list)
    submitted: dict[int, PendingJob] = field(default_factory=dict)
    records: dict[int, SimJob] = field(default_factory=dict)  # each job's state, attempts, history

    def submit(self, job: PendingJob, duration: float = float("inf")) -> None:
        self.pending[job.job_id] = self.submitted[job.job_id] = job
        self.durations[job.job_id] = duration
        self.records[job.job_id] = lifecycle.submitted(job.job_id, self.now)

    def record(self, job_id: int) -> SimJob:
        """The job's record; a job a test put straight into ``running`` (and ``stopping``)
        counts as placed (and preempted) now."""
        if job_id not in self.records:
            self.records[job_id] = lifecycle.submitted(job_id, self.now, self.running[job_id].grace_seconds)
            lifecycle.started(self.records[job_id], "placed by the test", self.now)
            if job_id in self.stopping:
                lifecycle.preempted(self.records[job_id], "preempted by the test", self.now)
        return self.records[job_id]

    def snapshot(self) -> Snapshot:
        work = tuple(self.running[j] for j in sorted(self.running))
        return Snapshot(
            with_usage(self.nodes, work),
            tuple(self.pending[j] for j in sorted(self.pending)),
            now=self.now,
            vcs=self.vcs,
            user_quotas=self.user_quotas,
            running=work,
            preempting=frozenset(self.stopping),
            user_groups=self.user_groups,
            config=self.config,
        )

    def cycle(self) -> Decisions:
        decisions = schedule(self.snapshot())
        self.history.append(decisions)
        for start in decisions.starts:
            job = self.pending.pop(start.job_id)
            end = None if job.max_runtime is None else self.now + job.max_runtime
            self.running[job.job_id] = self.elastic(RunningJob(
                job.job_id, job.vc, job.user, job.priority_rank, start.placements, self.now, end,
                suspendable=job.suspendable, attained_service=job.attained_service, borrowed=start.borrowed,
            ))
            self.ends[job.job_id] = self.now + self.durations[job.job_id]
            self.started_at.setdefault(job.job_id, self.now)
            waiting = self.records.setdefault(job.job_id, lifecycle.submitted(job.job_id, self.now))
            lifecycle.started(waiting, f"{len(start.placements)} task(s)", self.now)
        for grow in decisions.grows:
            running = self.running[grow.job_id]
            assert grow.job_id not in self.stopping and not self.leaving.get(grow.job_id)
            self.running[grow.job_id] = self.elastic(replace(running, placements=(*running.placements,
                                                                                   *grow.placements)))
        for shrink in decisions.shrinks:
            assert shrink.job_id in self.running and shrink.job_id not in self.stopping
            assert set(shrink.tasks) <= set(self.running[shrink.job_id].shrink)  # never below its minimum
            for task in shrink.tasks:
                self.leaving.setdefault(shrink.job_id, {})[task] = self.now + shrink.grace_seconds
            self.running[shrink.job_id] = self.elastic(self.running[shrink.job_id])
        for preempt in decisions.preemptions:
            assert preempt.job_id in self.running and preempt.job_id not in self.stopping
            lifecycle.preempted(self.record(preempt.job_id), preempt.reason, self.now)
            self.stopping[preempt.job_id] = self.now + preempt.grace_seconds
            self.running[preempt.job_id] = replace(self.running[preempt.job_id], stops_by=self.stopping[preempt.job_id])
        return decisions

    def elastic(self, running: RunningJob) -> RunningJob:
        """An elastic job as the controller describes it: the workers it may still add, those
        beyond its minimum it may lose (the last first), and those leaving."""
        job = self.submitted.get(running.job_id)
        if job is None or not job.grow:
            return running
        leaving = self.leaving.get(running.job_id, {})
        have = {(p.role, p.index) for p in running.placements}
        minimum = {(t.role, t.index) for t in job.tasks}
        return replace(
            running,
            grow=tuple(t for t in job.grow if (t.role, t.index) not in have) if not leaving else (),
            shrink=tuple(sorted((k for k in have - minimum if k not in leaving), key=lambda k: -k[1])),
            leaving=tuple(sorted(leaving)),
        )

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for job_id, workers in list(self.leaving.items()):
            gone = {k for k, when in workers.items() if when <= self.now}
            if gone and job_id in self.running:
                running = self.running[job_id]
                kept = tuple(p for p in running.placements if (p.role, p.index) not in gone)
                self.running[job_id] = replace(running, placements=kept)
            for k in gone:
                del workers[k]
            if not workers:
                del self.leaving[job_id]
            if job_id in self.running:
                self.running[job_id] = self.elastic(self.running[job_id])
        for job_id in sorted(self.running):
            stop = self.stopping.get(job_id)
            record = self.record(job_id)
            if stop is not None and stop <= self.now:
                done = self.running.pop(job_id)
                del self.stopping[job_id]
                self.leaving.pop(job_id, None)
                # requeued (or suspended), keeping its place and the service it received
                self.pending[job_id] = replace(self.submitted[done.job_id], attained_service=done.attained_at(stop))
                lifecycle.requeued(record, self.now)
            elif self.ends[job_id] <= self.now:
                del self.running[job_id]
                self.stopping.pop(job_id, None)
                self.leaving.pop(job_id, None)
                lifecycle.ended(record, self.now)


def describe(world: World) -> str:
    """The world in a few lines (for assertion messages): who holds which GPU of each node."""
    lines = [f"t={world.now:g} vcs={[(v.name, dict(v.quota)) for v in world.vcs]}"]
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    for r in world.running.values():
        stop = ("!" if r.job_id in world.stopping else "") + ("b" if r.borrowed else "")
        for p in r.placements:
            for share in p.gpus:
                holders[(p.node, share.index)].append(f"{r.job_id}{stop}:{r.vc}/{r.priority_rank}/{share.milli}")
    for n in world.nodes:
        lines.append(f"  {n.name}: " + " | ".join(",".join(holders[(n.name, g.index)]) or "-" for g in n.gpus))
    for j in sorted(world.pending):
        job = world.pending[j]
        lines.append(f"  waiting {j}: {job.vc}/{job.priority_rank} {[t.gpu_milli for t in job.tasks]}")
    if world.history:
        for w in world.history[-1].waits:
            lines.append(f"  {w.job_id}: {w.reason} {w.message}")
    return "\n".join(lines)


def check_capacity(s: Snapshot, d: Decisions) -> None:
    by_name = {n.name: n for n in s.nodes}
    gpu: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[str, int] = defaultdict(int)
    mem: dict[str, int] = defaultdict(int)
    for start in d.starts:
        for p in start.placements:
            assert by_name[p.node].schedulable
            cpu[p.node] += p.cpu_milli
            mem[p.node] += p.memory_mb
            for share in p.gpus:
                gpu[(p.node, share.index)] += share.milli
    for n in s.nodes:
        assert n.cpu_used_milli + cpu[n.name] <= n.cpu_milli
        assert n.memory_used_mb + mem[n.name] <= n.memory_mb
        for g in n.gpus:
            assert g.used_milli + gpu[(n.name, g.index)] <= 1000


def sharing_allowed(s: Snapshot, a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Whether fractional shares of (user, VC) ``a`` and ``b`` may sit on one device, by
    the rule as docs/scheduling.md words it (written apart from ``scheduler.sharing``)."""
    if a[0] == b[0]:
        return True
    rules = {v.name: v.gpu_sharing for v in s.vcs}
    order = [GpuSharing.SAME_USER, GpuSharing.SAME_GROUP, GpuSharing.ANYONE]
    rule = order[min(order.index(rules.get(vc, s.config.gpu_sharing)) for vc in (a[1], b[1]))]
    if rule == GpuSharing.ANYONE:
        return True
    groups = s.user_groups
    return rule == GpuSharing.SAME_GROUP and bool(groups.get(a[0], frozenset()) & groups.get(b[0], frozenset()))


def check_sharing(s: Snapshot, d: Decisions) -> None:
    """No device holds fractional shares of two users whose VCs' rules keep them apart,
    counting what runs (the scheduler placed it in an earlier cycle) and what starts."""
    pending = {j.job_id: j for j in s.pending}
    work = [((r.user, r.vc), r.placements) for r in s.running]
    work += [((pending[x.job_id].user, pending[x.job_id].vc), x.placements) for x in d.starts]
    on: dict[tuple[str, int], set[tuple[str, str]]] = defaultdict(set)
    for sharer, placements in work:
        for p in placements:
            for share in p.gpus:
                if share.milli < 1000:
                    on[(p.node, share.index)].add(sharer)
    for device, sharers in on.items():
        for a in sharers:
            for b in sharers:
                assert sharing_allowed(s, a, b), f"{device} holds shares of {a} and {b}"


def check_gangs(s: Snapshot, d: Decisions) -> None:
    requested = {j.job_id: j for j in s.pending}
    models = {(n.name, g.index): g.model for n in s.nodes for g in n.gpus}
    for start in d.starts:
        job = requested[start.job_id]
        assert sorted((p.role, p.index) for p in start.placements) == sorted((t.role, t.index) for t in job.tasks)
        for p in start.placements:
            task = next(t for t in job.tasks if (t.role, t.index) == (p.role, p.index))
            assert sum(share.milli for share in p.gpus) == task.gpu_milli
            assert len({share.index for share in p.gpus}) == len(p.gpus)
            assert all(not task.gpu_models or models[(p.node, share.index)] in task.gpu_models for share in p.gpus)
    decided = [x.job_id for x in d.starts] + [w.job_id for w in d.waits]
    assert sorted(decided) == sorted(requested)
    for wait in d.waits:
        assert wait.message and wait.position >= 1
