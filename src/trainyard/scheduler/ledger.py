"""The cycle's mutable state (capacity, cells, quotas) and what one job may use of it.

``Ledger`` is built from the snapshot once per cycle and changed only through
``allocate`` / ``release`` / ``hold``, each recorded in a ``Tentative`` so that a gang, a
preemption plan or a reservation probe can be tried and rolled back. ``Access`` answers,
for one job, where its tasks may go: which nodes to look at and in what order (the cell
rules for guaranteed work), and which devices of a node it may take.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import Capacity, FreeNode, Tentative
from trainyard.scheduler.cells import FRESH, SHARED, Binding, Cells, cell_sizes
from trainyard.scheduler.quota import Owner, Quotas, job_owner, running_owner
from trainyard.scheduler.sharing import Sharing
from trainyard.scheduler.snapshot import (
    GpuShare,
    PendingJob,
    RunningJob,
    Snapshot,
    TaskPlacement,
    TaskRequest,
)

# A scorer's device choice on one node: positions come in preference tiers (devices in the
# VC's own cells before devices in cells it would newly bind); None if the task does not fit.
Select = Callable[[FreeNode, TaskRequest, list[list[int]]], list[GpuShare] | None]


@dataclass(frozen=True)
class Fit:
    devices: list[GpuShare]
    binding: Binding | None


class Ledger:
    def __init__(self, snapshot: Snapshot) -> None:
        self.now = snapshot.now
        nodes = sorted(snapshot.nodes, key=lambda n: n.name)
        rack = snapshot.config.rack_label
        free = [FreeNode.from_state(n, rack_label=rack) for n in nodes]
        by_name = {n.name: n for n in free}
        self.quotas = Quotas(snapshot, by_name)
        limited = {name: p.quota for name, p in self.quotas.vcs.items() if p.quota is not None}
        if limited:
            self.cells = Cells(nodes, cell_sizes(nodes, list(limited.values()), snapshot.config.cell_gpus), limited)
        else:  # no quota, so no cell is ever bound: no need to lay cells out
            self.cells = Cells((), {}, {})
        self.enforced = {name: True for name in limited}
        running = sorted(
            (_whole_nodes_marked(_on_known_devices(j, by_name), by_name) for j in snapshot.running),
            key=lambda j: j.job_id,
        )
        for job in running:  # nothing else goes where a whole-node task runs
            for p in job.placements:
                if p.whole_node and p.node in by_name:
                    by_name[p.node].sealed += 1
        self.cells.derive(running, self.enforced, lambda node: by_name[node].whole if node in by_name else 0)
        self.capacity = Capacity(free, family_of=self.cells.family)
        self.cells.on_change = self.capacity.refile
        self.running = {j.job_id: j for j in running}
        self.sharing = Sharing(snapshot)
        for job in running:
            self.sharing.add((job.user, job.vc), job.placements, +1, None)
        self.preempting = frozenset(j for j in snapshot.preempting if j in self.running)
        self._vc_use: dict[str, dict[tuple[str, int], int]] = {}  # see ``_guaranteed_use``
        self._owners: dict[int, tuple[RunningJob, Owner]] = {}  # see ``_owner``
        # What preemption could take back on each node: opportunistic and stopping work.
        self.reclaimable_cpu: dict[str, int] = defaultdict(int)
        self.reclaimable_memory: dict[str, int] = defaultdict(int)
        self.reclaimable_gpu: dict[tuple[str, int], int] = defaultdict(int)  # (node, index)
        for job in running:
            if not job.guaranteed or job.job_id in self.preempting:
                for p in job.placements:
                    self.reclaimable_cpu[p.node] += p.cpu_milli
                    self.reclaimable_memory[p.node] += p.memory_mb
                    for share in p.gpus:
                        self.reclaimable_gpu[(p.node, share.index)] += share.milli

    def close(self) -> None:
        """Stop the capacity index listening to the cells once the cycle is over. The two
        refer to each other (the index files nodes by cell family, the cells tell it of a
        change), so without this the cycle's whole state — every node, index entry and
        cell — is freed only by the next cyclic garbage collection, which after a cycle
        run without collection (``schedule._without_cyclic_gc``) walks all of it: at 1,000
        nodes some 5 % of a cycle. Reference counting frees it at once."""
        self.cells.on_change = _unheard

    def held_in(self, node: FreeNode, number: int) -> bool:
        """Whether part of a cell no VC holds is taken by something preemption cannot
        reclaim: no guaranteed job runs in an unbound cell, so that is another job's plan
        or reservation made this cycle — the job binds the cell when it starts. Others
        must treat the cell as bound: binding it too would leave one of them short."""
        of = self.cells.cell_of[node.name]
        reclaimable = self.reclaimable_gpu
        return any(
            node.gpu_free[p] + reclaimable.get((node.name, node.gpu_index[p]), 0) < MILLI
            for p in range(len(of))
            if of[p] == number
        )

    def derive_cells_again(self, running: Sequence[RunningJob], tentative: Tentative) -> None:
        """Every VC's cells as the next cycle derives them once only ``running`` runs."""
        nodes = self.capacity.nodes
        self.cells.derive_again(
            sorted(running, key=lambda j: j.job_id),
            self.enforced,
            lambda node: nodes[node].whole if node in nodes else 0,
            tentative,
        )

    def model_of(self, node: str, index: int) -> str | None:
        free = self.capacity.nodes.get(node)
        return None if free is None else free.model_of(index)

    def allocate(self, owner: Owner, placement: TaskPlacement, binding: Binding | None, tentative: Tentative) -> None:
        self.capacity.take(placement, tentative)
        self.quotas.charge(owner, placement, tentative)
        self.sharing.add((owner.user, owner.vc), (placement,), +1, tentative)
        if binding is not None:
            self.cells.bind(owner.vc, binding, tentative)

    def release(self, job: RunningJob, tentative: Tentative) -> None:
        """As if ``job`` had ended: its resources and quota come back (its cells stay bound)."""
        owner = self._owner(job)
        for p in job.placements:
            self.capacity.give_back(p, tentative)
            self.quotas.refund(owner, p, tentative)
        self.sharing.add((job.user, job.vc), job.placements, -1, tentative)

    def hold(self, owner: Owner, placements: list[TaskPlacement], tentative: Tentative) -> None:
        """Keep resources and quota from everyone else (a reservation or a plan)."""
        for p in placements:
            self.capacity.take(p, tentative)
            self.quotas.charge(owner, p, tentative)
        self.sharing.add((owner.user, owner.vc), placements, +1, tentative)

    def hold_reserved(
        self, owner: Owner, placements: list[TaskPlacement], tentative: Tentative,
        charges: list[TaskPlacement] | None = None,
    ) -> list[TaskPlacement]:
        """A reservation's hold: all its resources, but quota only for the part of its GPUs
        that its own VC's guaranteed work does not occupy now. That work gives its quota
        back when it ends, which is when the reservation can start; charging it again
        would count the VC's quota twice and keep every job behind the reservation out.

        Returns what is charged to quota, one per placement: ``charges``, given back on a
        later call, is charged as it is (running work is fixed for the cycle, so is it;
        a reservation is lifted and held again for every job that may pass it)."""
        if charges is None:
            own = self._guaranteed_use(owner.vc) if owner.guaranteed else {}
            charges = [
                replace(p, gpus=tuple(
                    GpuShare(s.index, s.milli - own.get((p.node, s.index), 0))
                    for s in p.gpus
                    if s.milli > own.get((p.node, s.index), 0)
                ))
                for p in placements
            ]
        for p, charge in zip(placements, charges, strict=True):
            self.capacity.take(p, tentative)
            self.quotas.charge(owner, charge, tentative)
        self.sharing.add((owner.user, owner.vc), placements, +1, tentative)
        return charges

    def _guaranteed_use(self, vc: str) -> dict[tuple[str, int], int]:
        """Milli-GPU per (node, device) that ``vc``'s guaranteed running work, not being
        stopped, holds. Running work is fixed for the cycle: worked out once per VC (a
        reservation is applied again every time a job passes it)."""
        use = self._vc_use.get(vc)
        if use is None:
            use = self._vc_use[vc] = defaultdict(int)
            for job in self.running.values():
                if job.vc == vc and job.guaranteed and job.job_id not in self.preempting:
                    for p in job.placements:
                        for share in p.gpus:
                            use[(p.node, share.index)] += share.milli
        return use

    def occupy(self, job: RunningJob, tentative: Tentative) -> None:
        """Undo ``release``: the job holds its resources and quota again."""
        self.hold(self._owner(job), list(job.placements), tentative)

    def _owner(self, job: RunningJob) -> Owner:
        """``running_owner``, made once per job: preemption plans release and occupy the
        same victims thousands of times a cycle."""
        known = self._owners.get(id(job))
        if known is not None and known[0] is job:
            return known[1]
        owner = running_owner(job)
        self._owners[id(job)] = (job, owner)  # the job kept with it: its id is not reused
        return owner


def _unheard(node: str) -> None:
    """``Cells.on_change`` once the ledger is closed."""


class Released:
    """A prefix of ``jobs`` released as if ended, which can grow or shrink (for probing).

    ``more`` lengthens ``jobs`` on demand (``available``), for long candidate lists of
    which only the first few are usually needed.
    """

    def __init__(self, ledger: Ledger, jobs: list[RunningJob], more: Iterator[RunningJob] = iter(())) -> None:
        self.ledger = ledger
        self.jobs = list(jobs)
        self._more = more
        self.tentative = Tentative()
        self.count = 0
        self._marks: list[int] = []

    def available(self, count: int) -> int:
        """Make ``jobs`` at least ``count`` long if there are that many; return its length."""
        while len(self.jobs) < count:
            following = next(self._more, None)
            if following is None:
                break
            self.jobs.append(following)
        return len(self.jobs)

    def set(self, count: int) -> None:
        if count < self.count:
            self.tentative.rollback(self._marks[count])
            del self._marks[count:]
            self.count = count
        while self.count < count:
            self._marks.append(self.tentative.mark())
            self.ledger.release(self.jobs[self.count], self.tentative)
            self.count += 1


def _on_known_devices(job: RunningJob, nodes: dict[str, FreeNode]) -> RunningJob:
    """The job without GPU shares on devices its node no longer reports (a GPU that left
    the inventory while a task ran on it): they cannot be given back to anyone."""
    if all(p.node not in nodes or all(g.index in nodes[p.node].position for g in p.gpus) for p in job.placements):
        return job
    placements = tuple(
        p if p.node not in nodes else replace(p, gpus=tuple(g for g in p.gpus if g.index in nodes[p.node].position))
        for p in job.placements
    )
    return replace(job, placements=placements)


def _whole_nodes_marked(job: RunningJob, nodes: dict[str, FreeNode]) -> RunningJob:
    """The job with each task that holds all of its node (every GPU, all the CPU and
    memory) marked ``whole_node``. The store keeps what a task holds, not how it asked for
    it; a task holding all of a node is whole-node work either way, and releasing it (a
    probe, a plan) must open the node again as surely as holding it seals it."""
    if all(p.whole_node or not _holds_all(p, nodes.get(p.node)) for p in job.placements):
        return job
    placements = tuple(
        replace(p, whole_node=True) if _holds_all(p, nodes.get(p.node)) else p for p in job.placements
    )
    return replace(job, placements=placements)


def _holds_all(p: TaskPlacement, node: FreeNode | None) -> bool:
    return (
        node is not None
        and bool(node.gpu_free)
        and len(p.gpus) == len(node.gpu_free)
        and all(g.milli >= MILLI for g in p.gpus)
        and p.cpu_milli >= node.cpu_total
        and p.memory_mb >= node.memory_total
    )


class Access:
    """Where one job's tasks may go under its VC's quota and cells."""

    def __init__(self, ledger: Ledger, job: PendingJob, only: Callable[[FreeNode], bool] | None = None) -> None:
        self.ledger = ledger
        self.owner = job_owner(job)
        self.sharer = (self.owner.user, self.owner.vc)
        self.only = only
        policy = ledger.quotas.policy(job.vc)
        self.limited = self.owner.guaranteed and policy is not None and policy.limited
        self.borrowing = self.owner.borrowed  # within what may be borrowed (``Quotas.borrow_free``)
        self.in_cells = self.limited and ledger.enforced.get(job.vc, False)
        self.split_fresh = True  # whether a loose cell may be the first bound on a node
        self.data_nodes = job.data_nodes

    def tiers(self, task: TaskRequest, ordered: bool = True) -> Iterator[Iterator[FreeNode]]:
        """Candidate nodes in groups to try in order, each best fit first (cells' rule order);
        without ``ordered``, each group's nodes in no particular order (for a scorer that
        rates every node and breaks ties by name: the order is then worth nothing)."""
        capacity = self.ledger.capacity
        self.split_fresh = True  # set for the fresh tier below, for the fits made in it
        rack = getattr(self.only, "rack", None)  # a filter for one rack (``topology.InRack``)
        if task.gpu_milli <= 0 or not self.in_cells:
            yield self._filtered(capacity.candidates(task, rack=rack, ordered=ordered))
            return
        cells = self.ledger.cells
        vc = self.owner.vc
        sealed_by_me = "=" + vc
        # Nodes the VC holds whole come from the index; the few it shares are merged in.
        shared = [capacity.nodes[n] for n in cells.partly_held(vc) if n in capacity.nodes]
        yield self._filtered(capacity.candidates(task, (sealed_by_me,), extra=shared, rack=rack, ordered=ordered))
        # New cells: partly held nodes before fresh ones (the cell model's packing rule),
        # and within each, the emptiest first, so that the cells bound hold as little
        # opportunistic work to reclaim as possible and the rest of a gang fits beside.
        models = self.ledger.quotas.quota_models(vc, task.gpu_models) or ()
        if any(cells.loose_left(vc, m) > 0 for m in models):
            yield self._filtered(capacity.candidates(task, (SHARED,), emptiest_first=True, rack=rack,
                                                      ordered=ordered))
        if any(cells.loose_left(vc, m) > 0 or cells.whole_left(vc, m) > 0 for m in models):
            # A loose cell goes to a fresh node only if no hole could take the task, even
            # by preempting what runs there: else loose cells would spread over nodes and
            # eat the whole nodes other VCs are promised.
            self.split_fresh = not self._reclaimable_hole(task, models)
            yield self._filtered(capacity.candidates(task, (FRESH,), emptiest_first=True, rack=rack,
                                                      ordered=ordered))

    def _reclaimable_hole(self, task: TaskRequest, models: tuple[str, ...]) -> bool:
        """Whether a free cell on a partly held node could host ``task`` once opportunistic
        and stopping work there is gone."""
        ledger = self.ledger
        cells = ledger.cells
        wanted = task.gpu_milli // MILLI if task.gpu_milli >= MILLI else 1
        for model in models:
            if wanted > cells.size.get(model, 0):
                continue  # a task larger than a cell never fits in one hole
            for node_name, number in cells.holes(model):
                node = ledger.capacity.nodes.get(node_name)
                if node is None or not node.schedulable:
                    continue
                if node.cpu_milli + ledger.reclaimable_cpu[node_name] < task.cpu_milli:
                    continue
                if node.memory_mb + ledger.reclaimable_memory[node_name] < task.memory_mb:
                    continue
                if ledger.held_in(node, number):
                    continue
                of = cells.cell_of[node_name]
                room = [
                    node.gpu_free[p] + ledger.reclaimable_gpu[(node_name, node.gpu_index[p])]
                    for p in range(len(of))
                    if of[p] == number and node.suits(p, task)
                ]
                if task.gpu_milli >= MILLI and sum(1 for r in room if r >= MILLI) >= wanted:
                    return True
                if task.gpu_milli < MILLI and any(r >= task.gpu_milli for r in room):
                    return True
        return False

    def _filtered(self, nodes: Iterator[FreeNode]) -> Iterator[FreeNode]:
        if self.only is not None:
            nodes = (n for n in nodes if self.only(n))
        return data_first(nodes, self.data_nodes) if self.data_nodes else nodes

    def fit(self, node: FreeNode, task: TaskRequest, select: Select) -> Fit | None:
        """Devices for ``task`` on ``node`` chosen by ``select`` within what the job may use."""
        if not node.hosts_cpu_and_memory(task):
            return None
        if task.gpu_milli <= 0:
            return Fit([], None)
        quotas = self.ledger.quotas
        if node.suits_all(task):
            eligible = [p for p, free in enumerate(node.gpu_free) if free > 0]
        else:
            eligible = [p for p in range(len(node.gpu_free)) if node.suits(p, task) and node.gpu_free[p] > 0]
        if task.gpu_milli < MILLI:
            closed = self.closed(node)
            if closed:
                eligible = [p for p in eligible if p not in closed]
        only = node.only_model  # one model: one question for every device
        if self.limited:
            if only is not None:
                eligible = eligible if (quotas.free_of(self.owner.vc, only) or 0) > 0 else []
            else:
                eligible = [p for p in eligible if (quotas.free_of(self.owner.vc, node.gpu_model[p]) or 0) > 0]
        elif self.borrowing:
            if only is not None:
                eligible = eligible if quotas.borrow_free(self.owner.vc, only) > 0 else []
            else:
                eligible = [p for p in eligible if quotas.borrow_free(self.owner.vc, node.gpu_model[p]) > 0]
        if not eligible:
            return None
        if not self.in_cells:
            devices = select(node, task, [eligible])
            return None if devices is None or not self._within_quota(node, devices) else Fit(devices, None)
        cells = self.ledger.cells
        vc = self.owner.vc
        of = cells.cell_of[node.name]
        owner_of = cells.owner
        planned = cells.planned
        own = [p for p in eligible if owner_of.get((node.name, of[p])) == vc and (node.name, of[p]) not in planned]
        new = [p for p in eligible if (node.name, of[p]) not in owner_of]
        if new:
            held = {n for n in {of[p] for p in new} if self.ledger.held_in(node, n)}
            new = [p for p in new if of[p] not in held]
        # Fill cell by cell; new cells emptiest first, so that a task binds as few cells as
        # it can and leaves the opportunistic work in the others alone.
        room: dict[int, int] = defaultdict(int)
        for p in new:
            room[of[p]] += node.gpu_free[p] == MILLI
        own.sort(key=lambda p: (of[p], node.gpu_group[p], node.gpu_index[p]))
        new.sort(key=lambda p: (-room[of[p]], of[p], node.gpu_group[p], node.gpu_index[p]))
        if own:
            devices = select(node, task, [own])
            if devices is not None and self._within_quota(node, devices):
                return Fit(devices, None)
        if not new:
            return None
        devices = select(node, task, [own, new])
        if devices is None or not self._within_quota(node, devices):
            return None
        touched: dict[str, set[int]] = defaultdict(set)
        for share in devices:
            pos = node.position[share.index]
            if (node.name, of[pos]) not in owner_of:
                touched[node.gpu_model[pos]].add(of[pos])
        if len(touched) > 1:
            return None  # one task binding cells of two models at once: not worth the case
        binding = None
        for model, numbers in touched.items():
            cell_ids = [(node.name, n) for n in sorted(numbers)]
            binding = cells.binding_for(vc, node.name, model, cell_ids, split_fresh=self.split_fresh)
            if binding is None or (binding.whole_node and any(self.ledger.held_in(node, n) for _, n in binding.cells)):
                return None
        return Fit(devices, binding)

    def fit_key(self, node: FreeNode, task: TaskRequest) -> tuple[object, ...] | None:
        """For a node none of whose cells a VC holds, everything ``fit``'s answer for
        ``task`` there depends on besides the job and what this cycle has taken so far: two
        such nodes with the same key get the same answer while the ledger is unchanged (the
        scorers skip the rest of a kind that did not fit: at 1,000 nodes a job its VC's
        cells cannot hold yet tried each fresh node in turn, issue 33). None for a job
        outside cells, or a node where some VC holds a cell (its owners decide)."""
        if not self.in_cells:
            return None
        cells = self.ledger.cells
        name = node.name
        if cells.bound_on.get(name, 0):  # a VC holds one of its cells (``Cells._set`` counts them)
            return None
        free = node.gpu_free
        # What ``held_in`` reads, by device: whole devices (free, or taken by what preemption may
        # reclaim) cannot be held, and most fresh nodes are wholly free.
        if min(free, default=MILLI) >= MILLI:
            short: tuple[bool, ...] | None = None
        else:
            reclaimable, index = self.ledger.reclaimable_gpu, node.gpu_index
            short = tuple(free[p] + reclaimable.get((name, index[p]), 0) < MILLI for p in range(len(free)))
        selection = (node.admits(task), tuple(node.selected(task.selector, True))) if task.selector else None
        return (
            tuple(cells.cell_of[name]), tuple(node.gpu_group), tuple(node.gpu_index), short,
            node.schedulable, node.sealed, node.shares, node.cpu_milli, node.memory_mb, tuple(free),
            tuple(node.gpu_model), tuple(node.gpu_memory_mb), selection,
            self.closed(node) if 0 < task.gpu_milli < MILLI else (),
        )

    def closed(self, node: FreeNode) -> tuple[int, ...]:
        """Positions of the node's devices this job's fractional tasks may not share
        (``sharing``: another user's share is on them and a VC's rule forbids it)."""
        return self.ledger.sharing.closed(self.sharer, node)

    def may_use(self, node: FreeNode, pos: int) -> bool:
        """Whether the cell rules let this job's GPU tasks use the device (now or once free)."""
        if not self.in_cells:
            return True
        cells = self.ledger.cells
        owner = cells.owner.get((node.name, cells.cell_of[node.name][pos]))
        return owner is None or owner == self.owner.vc

    def _within_quota(self, node: FreeNode, devices: list[GpuShare]) -> bool:
        if not self.limited and not self.borrowing:
            return True
        per_model: dict[str, int] = defaultdict(int)
        for share in devices:
            per_model[node.gpu_model[node.position[share.index]]] += share.milli
        quotas = self.ledger.quotas
        if self.borrowing:
            return all(milli <= quotas.borrow_free(self.owner.vc, m) for m, milli in per_model.items())
        return all(milli <= (quotas.free_of(self.owner.vc, m) or 0) for m, milli in per_model.items())


def data_first(nodes: Iterator[FreeNode], holding: frozenset[str]) -> Iterator[FreeNode]:
    """``nodes`` in their order, but within each run of nodes that fit alike (the same free
    GPU and CPU: best fit's own key) those in ``holding`` first (issue 35: a job's data is
    already there). A tie-break only: no node moves ahead of a better fit, and which nodes
    are offered at all (quotas, cells, health, gangs) is decided before."""
    run: list[FreeNode] = []
    for node in nodes:
        if run and (node.gpu_sum, node.cpu_milli) != (run[0].gpu_sum, run[0].cpu_milli):
            yield from sorted(run, key=lambda n: n.name not in holding)  # stable: the run's order otherwise
            run = []
        run.append(node)
    yield from sorted(run, key=lambda n: n.name not in holding)
