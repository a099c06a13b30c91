"""Why each job keeps waiting, in words a user can act on, with queue position and ETA.

Numbers in messages describe the cluster *after* this cycle's starts (what the user will
see if they look now), not the moment the job was considered. They are computed from
per-kind aggregates (free GPUs of the models a task accepts, the most on one node, the
most CPU and memory on one node), each found once per cycle, so explaining 100,000
waiting jobs costs little more than explaining one.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from trainyard.core.priorities import Priority
from trainyard.core.resources import MILLI
from trainyard.scheduler import whole_nodes
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.cycle import Cycle, Reservation, Wait
from trainyard.scheduler.fairshare import gpu_hours
from trainyard.scheduler.outside_cells import describe
from trainyard.scheduler.quota import Refusal, gpu_need
from trainyard.scheduler.selection import unmet
from trainyard.scheduler.sharing import Sharing, closing_rule, has_unshared_room, roomy_shared
from trainyard.scheduler.snapshot import (
    KeepWaiting,
    PendingJob,
    PendingReason,
    Snapshot,
    StartJob,
    TaskRequest,
)


@dataclass(frozen=True)
class Worded:
    """A reason in a sentence (``yard job``) and in a few words (the ``yard jobs`` table)."""

    message: str
    short: str


@dataclass(frozen=True)
class Room:
    """Free capacity of one kind of GPU (models, minimum memory) on schedulable nodes."""

    gpu_total: int  # milli-GPU
    most_whole: int  # whole free GPUs on the best node
    most_cpu: int
    most_memory: int


class Rooms:
    """``Room`` per GPU kind for one state of the cluster, each computed on first use."""

    def __init__(self, nodes: Sequence[FreeNode]) -> None:
        self.nodes = [n for n in nodes if n.schedulable]
        closed = len(nodes) - len(self.nodes)
        self.aside = f"; {closed} node{'s' if closed > 1 else ''} cordoned or unhealthy" if closed else ""
        self.most_cpu = max((n.cpu_milli for n in self.nodes), default=0)
        self.most_memory = max((n.memory_mb for n in self.nodes), default=0)
        self._rooms: dict[tuple[tuple[str, ...], int, str], Room] = {}
        self._unmet: dict[tuple[str, bool], str | None] = {}
        self._empty: dict[whole_nodes.Kind, tuple[int, int, tuple[int, int]]] = {}
        self._shortfalls: dict[tuple[TaskRequest, ...], Worded | None] = {}
        held = sum(1 for n in self.nodes if n.sealed)
        if held:
            self.aside += f"; {held} node{'s are' if held > 1 else ' is'} held whole by whole-node jobs"

    def unmet(self, job: PendingJob) -> Worded | None:
        """The first of the job's resource expressions that no node meets, and why."""
        for task in job.tasks:
            if not task.selector:
                continue
            key = (task.selector, task.gpu_milli > 0)
            if key not in self._unmet:
                self._unmet[key] = unmet(self.nodes, task)
            why = self._unmet[key]
            if why is not None:
                return Worded(f"{task.role}: {why}{self.aside}", f"{task.role}: no node meets its selector")
        return None

    def of(self, task: TaskRequest) -> Room:
        key = (task.gpu_models, task.gpu_memory_mb, task.selector)
        room = self._rooms.get(key)
        if room is None:
            total = most = 0
            for node in self.nodes:
                eligible = node.eligible_devices(task)
                total += sum(max(0, node.gpu_free[i]) for i in eligible)
                most = max(most, sum(1 for i in eligible if node.gpu_free[i] == MILLI))
            room = self._rooms[key] = Room(total, most, self.most_cpu, self.most_memory)
        return room

    def shortfall(self, job: PendingJob) -> Worded | None:
        """Why the gang cannot fit by these numbers, naming the nodes that take no new work;
        None if the numbers alone allow it. Worked out once per set of tasks."""
        if job.tasks in self._shortfalls:
            return self._shortfalls[job.tasks]
        why = self._shortfall(job)
        found = self._shortfalls[job.tasks] = None if why is None else Worded(why.message + self.aside, why.short)
        return found

    def empty_for(self, task: TaskRequest) -> tuple[int, int, tuple[int, int]]:
        """``whole_nodes.empty_suitable`` for a whole-node task of this kind."""
        key = whole_nodes.kind_of(task)
        found = self._empty.get(key)
        if found is None:
            found = self._empty[key] = whole_nodes.empty_suitable(self.nodes, task)
        return found

    def _whole_shortfall(self, job: PendingJob) -> Worded | None:
        """Too few empty suitable nodes for the job's whole-node tasks of one kind."""
        wanted: dict[whole_nodes.Kind, list[TaskRequest]] = defaultdict(list)
        for task in job.tasks:
            if task.whole_node:
                wanted[whole_nodes.kind_of(task)].append(task)
        for tasks in wanted.values():
            empty, fitting, (fewest, most) = self.empty_for(tasks[0])
            if empty >= len(tasks):
                continue
            first = tasks[0]
            kind = _models(first.gpu_models) or "GPU"
            if not fitting:
                only = f"only {kind} GPUs" if first.gpu_models else "GPUs"
                if first.gpu_memory_mb:
                    only += f" of at least {first.gpu_memory_mb} MiB"
                return Worded(f"needs {len(tasks)} whole node(s) with {only}; no node that takes work has them",
                              f"no whole node with {only}")
            sizes = str(most) if fewest == most else f"{fewest}-{most}"
            of = f"{sizes} {kind}{'s' if most > 1 else ''}"
            if first.gpu_memory_mb:
                of += f" of at least {first.gpu_memory_mb} MiB"
            need = f"{len(tasks)} whole node{'s' if len(tasks) > 1 else ''} of {of}"
            return Worded(
                f"needs {need}; {empty} of the {fitting} that suit it {'is' if empty == 1 else 'are'} empty",
                f"{empty}/{len(tasks)} whole nodes empty",
            )
        return None

    def _shortfall(self, job: PendingJob) -> Worded | None:
        whole = self._whole_shortfall(job) if any(t.whole_node for t in job.tasks) else None
        if whole is not None:
            return whole
        biggest = max(job.tasks, key=lambda t: (t.gpu_milli, t.cpu_milli, t.memory_mb))
        total = gpu_need(job)
        room = self.of(biggest)
        kind = _models(biggest.gpu_models) or "GPU"
        if biggest.selector:  # only the devices its resource expression allows count
            kind = f"selected {kind}"
        if total > room.gpu_total:
            return Worded(
                f"needs {_gpus(total)} {kind} in total, {_gpus(room.gpu_total)} free",
                f"{_gpus(room.gpu_total)}/{_gpus(total)} {kind} free",
            )
        if biggest.gpu_milli >= MILLI and room.most_whole * MILLI < biggest.gpu_milli:
            return Worded(
                f"no node has {_gpus(biggest.gpu_milli)} free {kind} together for {biggest.role}; "
                f"the most on one node is {room.most_whole}",
                f"{room.most_whole}/{_gpus(biggest.gpu_milli)} {kind} on one node",
            )
        if biggest.cpu_milli > room.most_cpu:
            most = _gpus(room.most_cpu)
            return Worded(
                f"no node has {_gpus(biggest.cpu_milli)} free CPU for {biggest.role}; the most is {most}",
                f"{most}/{_gpus(biggest.cpu_milli)} CPU on one node",
            )
        if biggest.memory_mb > room.most_memory:
            return Worded(
                f"no node has {biggest.memory_mb} MiB free for {biggest.role}; the most is {room.most_memory} MiB",
                f"{room.most_memory}/{biggest.memory_mb} MiB on one node",
            )
        return None


def explain(cycle: Cycle, order: Sequence[PendingJob]) -> tuple[KeepWaiting, ...]:
    """Each waiting job's ``KeepWaiting``, in queue order; positions count per VC."""
    if not cycle.waits:  # every pending job started: nothing to explain (and no rooms to build)
        return ()
    # The rooms and ETAs are built at the first job that needs them: a cycle stopped at its
    # bound of starts leaves most jobs untried, and an untried job's message needs none.
    built: tuple[Rooms, Rooms, QuotaEtas, SharedDevices] | None = None
    positions: dict[str, int] = defaultdict(int)
    waits = []
    for job in order:
        wait = cycle.waits.get(job.job_id)
        if wait is None:
            continue
        positions[job.vc] += 1
        position = positions[job.vc]
        if wait.untried:
            reason, worded, eta = _untried(cycle, job, position)
        else:
            if built is None:
                after = Rooms(_after_starts(cycle, cycle.starts))
                built = (Rooms(_after_starts(cycle, ())), after, QuotaEtas(cycle),
                         SharedDevices(cycle.snapshot, cycle.starts, after))
            reason, worded, eta = _worded(cycle, job, wait, position, *built)
        overtaken = cycle.overtaken.get(job.job_id)
        if overtaken:
            usage = (
                cycle.snapshot.usage.get((job.vc, job.user), 0.0) if cycle.snapshot.vcs
                else sum(v for (_, user), v in cycle.snapshot.usage.items() if user == job.user)
            )
            half_life = cycle.snapshot.config.fair_share_half_life
            worded = Worded(
                f"{worded.message}; fair share: {overtaken} later job(s) of other users go first, by their "
                f"users' recent use and jobs queued ({job.user or '?'}: {gpu_hours(usage)} recently, "
                f"half-life {_duration(half_life)})",
                worded.short,
            )
        # Its own reservation's nodes (a job RESERVED behind another's holds none).
        reserved = wait.reservation
        nodes = tuple(sorted({p.node for p in reserved.placements})) \
            if reserved is not None and reserved.job.job_id == job.job_id else ()
        waits.append(KeepWaiting(job.job_id, reason, worded.message, position, eta, worded.short, nodes))
    return tuple(waits)


def _untried(cycle: Cycle, job: PendingJob, position: int) -> tuple[PendingReason, Worded, None]:
    """A job the cycle did not try: it stopped at its bound of starts first."""
    bound = cycle.snapshot.config.max_starts
    return PendingReason.BEHIND, Worded(
        f"{_ordinal(position)} in VC {job.vc}; this cycle started its most jobs ({bound}) before its turn, "
        "and the next cycle, at once, tries it",
        f"after the {bound} started",
    ), None


def _worded(
    cycle: Cycle, job: PendingJob, wait: Wait, position: int, before: Rooms, after: Rooms, quota_etas: QuotaEtas,
    shared: SharedDevices,
) -> tuple[PendingReason, Worded, float | None]:
    now = cycle.snapshot.now
    reason = wait.reason
    if reason == PendingReason.PREEMPTING:
        victims = ", ".join(str(v) for v in wait.victims)
        if wait.moving:
            return reason, Worded(
                f"waiting for job(s) {victims} to stop; they are being moved to GPUs free elsewhere to make "
                "room for it (no node had room for it together)", f"job(s) {victims} moving"
            ), wait.eta
        return reason, Worded(
            f"waiting for job(s) {victims} to stop; they are being preempted for it", f"job(s) {victims} stopping"
        ), wait.eta
    if reason == PendingReason.RESERVED:
        assert wait.reservation is not None
        head = wait.reservation.job.job_id
        if cycle.waits.get(head, wait).reason == PendingReason.PREEMPTING:
            return reason, Worded(
                f"would take what is held for job {head}, first in line, which is preempting for room",
                f"held for job {head}",
            ), None
        return reason, Worded(
            f"would delay the reservation of job {head}, first in line", f"held for job {head}"
        ), None
    if reason == PendingReason.BEHIND:  # set only when preemption planning stopped short of it
        return reason, Worded(
            f"{_ordinal(position)} in VC {job.vc}; work is being preempted for the jobs ahead of it first, "
            "and its own turn comes in a following cycle",
            "jobs ahead preempting",
        ), None
    if wait.outside_cells:
        policy = cycle.ledger.quotas.vcs.get(job.vc)
        told = describe(cycle.ledger.cells, policy.quota if policy is not None else None, job)
        if wait.borrow_tried:
            return reason, _not_borrowed(
                job, Worded(f"{told}; it can run only as borrowed work", "outside its VC's cells"), wait.borrow_refusal
            ), None
        return reason, Worded(
            f"{told}; it could run only as borrowed work, and VC {job.vc} does not borrow: ask for tasks that "
            "fit in a cell or take whole nodes, or an admin for borrowing", "never fits its VC's cells"
        ), None
    if reason in (PendingReason.QUOTA, PendingReason.USER_QUOTA, PendingReason.BORROW_LIMIT):
        assert wait.refusal is not None
        worded = _refused(job, wait.refusal, may_borrow=wait.borrow_tried)
        if wait.borrow_tried:
            worded = _not_borrowed(job, worded, wait.borrow_refusal)
        eta = quota_etas.eta(job, wait.refusal) if wait.refusal.kind == "vc" else None
        return _with_reservation(reason, worded, wait, now, eta)
    unmatched = before.unmet(job)
    if unmatched is not None:
        return _with_reservation(PendingReason.NO_FIT, unmatched, wait, now, None)
    shortfall = after.shortfall(job)
    if shortfall is None:
        shortfall = shared.closed_to(job) or Worded(
            f"the {len(job.tasks)} task(s) do not fit the free GPUs, CPUs and memory together", "no node set fits"
        )
    elif wait.reservation is None and before.shortfall(job) is None:
        return (
            PendingReason.BEHIND,
            Worded(
                f"{_ordinal(position)} in VC {job.vc}; the jobs ahead of it took what was free ({shortfall.message})",
                f"ahead took {shortfall.short}",
            ),
            None,
        )
    return _with_reservation(PendingReason.NO_FIT, shortfall, wait, now, None)


def _with_reservation(
    reason: PendingReason, worded: Worded, wait: Wait, now: float, eta: float | None
) -> tuple[PendingReason, Worded, float | None]:
    if wait.reservation is None:
        return reason, worded, eta
    start = wait.reservation.start
    message = worded.message + f"; first in line: its reservation {_when(wait.reservation, now)}"
    return reason, Worded(message, worded.short + ", reserved"), None if math.isinf(start) else start


def _refused(job: PendingJob, refusal: Refusal, *, may_borrow: bool = False) -> Worded:
    if refusal.kind == "unknown_vc":
        return Worded(f"unknown virtual cluster {job.vc!r}", f"unknown VC {job.vc}")
    if refusal.kind == "no_model":
        models = _models(refusal.models) or "any GPU model"
        return Worded(f"VC {job.vc} has no quota for {models}", f"{job.vc} has no {models}")
    free = f"{_gpus(refusal.free)}/{_gpus(refusal.total)}"
    if refusal.kind == "user":
        return Worded(
            f"user {job.user or '?'} at {Priority.of_rank(job.priority_rank)}: needs {_gpus(refusal.need)} GPU, "
            f"{_gpus(refusal.free)} of {_gpus(refusal.total)} left",
            f"{job.user or '?'} {free} left, needs {_gpus(refusal.need)}",
        )
    message = (
        f"VC {job.vc}: needs {_gpus(refusal.need)} {_models(refusal.models)}, "
        f"{_gpus(refusal.free)} of {_gpus(refusal.total)} free"
    )
    if refusal.need > refusal.total and may_borrow:
        message += "; more than the VC's whole quota: it starts as borrowed work once enough GPUs are idle"
    elif refusal.need > refusal.total:
        message += "; more than the VC's whole quota: it starts only if an admin raises the quota"
    return Worded(message, f"{job.vc} {free} free, needs {_gpus(refusal.need)}")


def _not_borrowed(job: PendingJob, worded: Worded, refusal: Refusal | None) -> Worded:
    """The quota refusal, with why borrowing other VCs' idle GPUs did not start it either."""
    if refusal is None:
        why = "the idle GPUs it may borrow do not fit it together now"
        short = "borrow: no fit"
    elif refusal.kind == "borrow_limit":
        why = (
            f"VC {job.vc} may borrow at most {_gpus(refusal.total)} GPU of each model, "
            f"{_gpus(refusal.free)} left over the models it accepts"
        )
        short = f"borrow limit {_gpus(refusal.free)}/{_gpus(refusal.total)} left"
    elif refusal.kind == "lend_limit":
        why = f"the other VCs' lending limits leave {_gpus(refusal.free)} GPU to borrow"
        short = f"lend limits: {_gpus(refusal.free)} to borrow"
    elif refusal.kind == "nothing_idle":
        if refusal.total == 0:
            why = "every VC uses its quota"
        elif refusal.free == 0:
            why = f"the {_gpus(refusal.total)} GPU the VCs' unused quota lends are borrowed already"
        else:
            why = f"{_gpus(refusal.free)} GPU of the VCs' unused quota are left to borrow"
        short = f"{_gpus(refusal.free)} to borrow"
    else:  # the user's own quota: said already
        return worded
    return Worded(
        f"{worded.message}; borrowing: needs {_gpus(refusal.need if refusal else gpu_need(job))} GPU, {why}",
        f"{worded.short}, {short}",
    )


class QuotaEtas:
    """When a VC's running guaranteed jobs will, by their expected ends, free enough quota."""

    def __init__(self, cycle: Cycle) -> None:
        self.ledger = cycle.ledger
        self.ahead: dict[str, int] = defaultdict(int)  # milli-GPU wanted by earlier QUOTA waits
        self._cumulative: dict[tuple[str, tuple[str, ...]], tuple[list[float], list[int]]] = {}
        self.ends: dict[str, list[tuple[float, int, dict[str, int]]]] = defaultdict(list)
        for job in [*cycle.ledger.running.values(), *cycle.started]:
            if not job.guaranteed or job.expected_end is None:
                continue
            per_model: dict[str, int] = defaultdict(int)
            for p in job.placements:
                for share in p.gpus:
                    model = self.ledger.model_of(p.node, share.index)
                    if model is not None:
                        per_model[model] += share.milli
            self.ends[job.vc].append((job.expected_end, job.job_id, dict(per_model)))
        for ends in self.ends.values():
            ends.sort(key=lambda e: (e[0], e[1]))

    def eta(self, job: PendingJob, refusal: Refusal) -> float | None:
        """When enough quota is freed for the job and for the jobs of its VC ahead of it
        that wait for quota too (asked in queue order; they are assumed to run on)."""
        ahead = self.ahead[job.vc]
        self.ahead[job.vc] += refusal.need
        missing = ahead + refusal.need - refusal.free
        times, freed = self._freed(job.vc, refusal.models)
        found = bisect_left(freed, missing)
        return times[found] if found < len(times) else None

    def _freed(self, vc: str, models: tuple[str, ...]) -> tuple[list[float], list[int]]:
        """End times of the VC's jobs, and the quota of ``models`` freed by each (cumulative)."""
        key = (vc, models)
        cached = self._cumulative.get(key)
        if cached is None:
            times, freed, total = [], [], 0
            for end, _, per_model in self.ends.get(vc, []):
                total += sum(per_model.get(m, 0) for m in models)
                times.append(end)
                freed.append(total)
            cached = self._cumulative[key] = (times, freed)
        return cached


class SharedDevices:
    """Whether a VC's GPU sharing rule is what keeps a job's fractional task out, after
    this cycle's starts (``sharing.closing_rule``), worked out once per kind of task and owner."""

    def __init__(self, snapshot: Snapshot, starts: Sequence[StartJob], after: Rooms) -> None:
        self.nodes = after.nodes
        self.by_name = {n.name: n for n in self.nodes}
        self.sharing = Sharing(snapshot)
        pending = {j.job_id: j for j in snapshot.pending}
        for r in sorted(snapshot.running, key=lambda r: r.job_id):
            self.sharing.add((r.user, r.vc), r.placements, +1, None)
        for start in starts:
            started = pending[start.job_id]
            self.sharing.add((started.user, started.vc), start.placements, +1, None)
        self._found: dict[tuple[object, ...], Worded | None] = {}
        self._unshared_room: dict[tuple[object, ...], bool] = {}
        self._roomy: dict[tuple[object, ...], list[tuple[str, int]]] = {}

    def closed_to(self, job: PendingJob) -> Worded | None:
        if not self.sharing.devices:
            return None
        for task in job.tasks:
            if not 0 < task.gpu_milli < MILLI:
                continue
            kind = (task.gpu_milli, task.cpu_milli, task.memory_mb, task.gpu_models, task.gpu_memory_mb)
            key = (*kind, job.user, job.vc)
            if key not in self._found:
                unshared = self._unshared_room.get(kind)
                if unshared is None:
                    unshared = self._unshared_room[kind] = has_unshared_room(self.sharing, task, self.nodes)
                roomy = None
                if not unshared:  # which devices have room: the task's expression counts too
                    roomy = self._roomy.get((*kind, task.selector))
                    if roomy is None:
                        roomy = self._roomy[(*kind, task.selector)] = roomy_shared(self.sharing, task, self.by_name)
                why = closing_rule(self.sharing, (job.user, job.vc), task, self.by_name, unshared, roomy)
                self._found[key] = None if why is None else Worded(
                    f"GPU {why.index} of node {why.node} is shared with another user's job; "
                    f"VC {why.vc} allows sharing with: {why.rule}",
                    f"GPU {why.index} of {why.node} shared with another user",
                )
            found = self._found[key]
            if found is not None:
                return found
        return None


def _after_starts(cycle: Cycle, starts: Sequence[StartJob]) -> list[FreeNode]:
    """The nodes once ``starts`` have started, with running whole-node tasks' nodes sealed."""
    nodes = {n.name: FreeNode.from_state(n) for n in cycle.snapshot.nodes}
    for running in cycle.ledger.running.values():
        for p in running.placements:
            if p.whole_node and p.node in nodes:
                nodes[p.node].sealed += 1
    for start in starts:
        for p in start.placements:
            nodes[p.node].take(p)
    return [nodes[name] for name in sorted(nodes)]


def _when(reservation: Reservation, now: float) -> str:
    """Words that stay true from cycle to cycle (the time itself is the job's ETA), so a
    waiting job's stored reason changes only when its situation does."""
    if not math.isinf(reservation.start):
        return "starts when running jobs reach their declared ends"
    if reservation.holds(now):
        return "waits for running jobs without a declared end, and holds what it needs"
    if math.isinf(reservation.drains_at):
        return "waits for running jobs without a declared end; smaller jobs may use idle GPUs meanwhile"
    job = reservation.job
    wait = reservation.drains_at - (job.submitted_at if job.waiting_since is None else job.waiting_since)
    return (
        "waits for running jobs without a declared end; smaller jobs may use idle GPUs "
        f"until it has waited {wait:g} s"
    )


def _duration(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g} d"
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds:g} s"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _models(models: Sequence[str]) -> str:
    return "/".join(models)


def _gpus(milli: int) -> str:
    return str(milli // MILLI) if milli % MILLI == 0 else f"{milli / MILLI:g}"
