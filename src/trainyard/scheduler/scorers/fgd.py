"""FGD: place each task where it grows the cluster's expected GPU fragmentation least.

Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation", USENIX ATC'23).
Given a target workload — task kinds ``m`` with popularity ``p_m`` — the fragmentation of
node ``n`` measured by ``m``, ``F_n(m)``, is the free GPU capacity ``m`` could not use:

* if ``m`` cannot run on ``n`` at all (not enough CPU or memory, no device of its model,
  not enough whole free GPUs, no device with enough free share), every free GPU of ``n``;
* otherwise, the free share of each device that has less free than ``min(d_m, 1)`` GPU,
  ``d_m`` being ``m``'s GPU request (a device that cannot host ``m``'s share is stranded).

The node's expected fragmentation is ``F_n = sum_m p_m F_n(m)`` and the cluster's is the sum
over nodes. A task goes to the node and device(s) whose ``F_n`` increases least (the
steepest descent); ties go to best fit. Only GPU tasks count (the paper's default: kinds
without GPUs in the target workload are ignored), and the target workload defaults to the
mix of the pending jobs' tasks.

Cost: ``F_n`` is cached by node state, and so is each node's answer for a kind of task as if
no quota or cell rule applied. Without rules that answer is exact and every fitting node is
compared (up to ``SCAN``, in best-fit order), as the paper's FGD does — comparing only the
fullest nodes cost up to 4 points of allocation on openb's pod lists with GPU-model limits.
The comparison is kept per kind of task from one task to the next (``standing.Standing``):
each node's rank and best-fit place, worked out again only for the nodes changed since the
kind was last asked, the best at the top of a heap — what the walk over every node in
best-fit order finds, at the cost of the few nodes the tasks before it changed.
Under rules the answer without them is a lower bound (rules only take devices away), so of
a window of ``RESTRICTED_SCAN`` nodes that fit without rules, the exact fit (``Access.fit``,
the expensive part) is worked out in bound order only until no bound left can beat the best
found: usually for one node. A window with no exact fit moves on to the next nodes.

This class is the exact-cost engine under ``fgd-cpu``. The registered ``fgd`` baseline is
``rated.FgdRated``: the same measure, scored and tie-broken as the authors' simulator does
(integer scores, the name among equals, CPU-only tasks scored too).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import Capacity, FreeNode
from trainyard.scheduler.ledger import Access, Fit, Ledger, Select
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter, first_fit, select_bestfit
from trainyard.scheduler.snapshot import GpuShare, PendingJob, Snapshot, TaskRequest, WorkloadClass
from trainyard.scheduler.standing import Standing, StandingKey, Standings

# A node's answer for a task: (cost, [(position, milli)]), or False where it does not fit.
Shares = list[tuple[int, int]]
Answer = tuple[float, Shares]
# What a node's answer depends on besides its free capacity (``Fgd._fixed``).
Fixed = tuple[object, ...]
# A node's state as far as an answer goes: (fixed, free milli-GPU per device, CPU, memory,
# positions of the devices the task may not share: ``Access.closed``).
NodeKey = tuple[Fixed, tuple[int, ...], int, int, tuple[int, ...]]
# ``F_n``'s cache key: (the node's kind, free milli-GPU per device, CPU, memory).
FragmentKey = tuple[tuple[object, ...], tuple[int, ...], int, int]
Rank = tuple[float, ...]  # lowest best
Ranked = tuple[Answer, Rank] | Literal[False]  # an answer with its rank, or False where it does not fit

SCAN = 1 << 16  # fitting node states compared per task: in practice all
# Under quota or cell rules answers depend on the node, not only its state: fewer nodes are
# compared, the fullest first, to bound a cycle's cost.
RESTRICTED_SCAN = 64
CLASSES = 16  # the most popular task kinds kept from the pending mix
VISITED_KINDS = 16  # task kinds whose visits to nodes ``Fgd.choose`` remembers (the latest)


class WeightsByRoom:
    """Per group of task kinds ``(CPU, memory, weight)``, the weight of the kinds a node's
    free CPU and memory host (or, ``refused``, turn away), summed in the group's order.
    Which kinds those are changes only where CPU or memory reaches some kind's request: the
    sums are worked out once per such step (the same floats) and remembered by (CPU, memory)."""

    def __init__(self, groups: Sequence[Sequence[tuple[int, int, float]]], *, refused: bool = False) -> None:
        self._groups = groups
        self._refused = refused
        self._cpus = sorted({c for members in groups for c, _, _ in members})
        self._memories = sorted({m for members in groups for _, m, _ in members})
        self._by_room: dict[tuple[int, int], tuple[float, ...]] = {}
        self._by_step: dict[tuple[int, int], tuple[float, ...]] = {}

    def of(self, cpu: int, memory: int) -> tuple[float, ...]:
        found = self._by_room.get((cpu, memory))
        if found is None:
            step = (bisect_right(self._cpus, cpu), bisect_right(self._memories, memory))
            found = self._by_step.get(step)
            if found is None:
                if self._refused:
                    found = tuple(sum(p for c, m, p in members if c > cpu or m > memory) for members in self._groups)
                else:
                    found = tuple(sum(p for c, m, p in members if c <= cpu and m <= memory) for members in self._groups)
                self._by_step[step] = found
            self._by_room[(cpu, memory)] = found
        return found


def latest_kind(memo: dict[tuple[object, ...], dict[Any, Any]], kind: tuple[object, ...]) -> dict[Any, Any]:
    """``memo``'s entry for a task kind, made if missing: the kinds asked for most recently
    keep theirs (``VISITED_KINDS``: a simulator's run may ask for thousands of kinds, each
    over every node), least recently asked first."""
    found = memo.pop(kind, None)
    if found is None:
        found = {}
        if len(memo) >= VISITED_KINDS:
            del memo[next(iter(memo))]
    memo[kind] = found
    return found


def pending_mix(pending: Sequence[PendingJob]) -> tuple[WorkloadClass, ...]:
    """The target workload implied by the pending tasks: GPU tasks by kind (share and
    models), each kind with the smallest CPU and memory its tasks ask for (what a node must
    keep free for the kind to fit at all); then CPU-only tasks by their CPU and memory (FGD
    ignores them; ``fgd-cpu`` measures CPU fragments against them)."""
    counts: Counter[tuple[int, tuple[str, ...]]] = Counter()
    least: dict[tuple[int, tuple[str, ...]], tuple[int, int]] = {}
    cpu_only: Counter[tuple[int, int]] = Counter()
    for job in pending:
        for task in job.tasks:
            if task.gpu_milli > 0:
                kind = (task.gpu_milli, task.gpu_models)
                counts[kind] += 1
                cpu, memory = least.get(kind, (task.cpu_milli, task.memory_mb))
                least[kind] = (min(cpu, task.cpu_milli), min(memory, task.memory_mb))
            else:
                cpu_only[(task.cpu_milli, task.memory_mb)] += 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:CLASSES]
    gpu_kinds = tuple(
        WorkloadClass(gpu_milli=g, weight=float(n), cpu_milli=least[(g, models)][0],
                      memory_mb=least[(g, models)][1], gpu_models=models)
        for (g, models), n in top
    )
    top_cpu = sorted(cpu_only.items(), key=lambda kv: (-kv[1], kv[0]))[:CLASSES]
    return gpu_kinds + tuple(
        WorkloadClass(gpu_milli=0, weight=float(n), cpu_milli=c, memory_mb=m) for (c, m), n in top_cpu
    )


class Fgd:
    scan = SCAN  # fitting nodes compared per task

    def __init__(self, workload: Sequence[WorkloadClass]) -> None:
        kinds = [w for w in workload if w.weight > 0 and w.gpu_milli > 0]  # the paper's: GPU tasks only
        total = sum(w.weight for w in kinds)
        self.classes = [(w, w.weight / total) for w in kinds] if total else []
        self._cache: dict[FragmentKey, float] = {}
        # ``_expected``'s halves: per (device models, free shares) what each group leaves
        # stranded, and per (CPU, memory) how much of each group's weight the node hosts
        self._stranded: dict[tuple[tuple[str, ...], tuple[int, ...]], tuple[int | None, ...]] = {}
        self._usable: dict[tuple[str, ...], list[tuple[Sequence[int], frozenset[int] | None] | None]] = {}
        # task kind -> node state -> answer
        self._answers: dict[tuple[object, ...], dict[NodeKey, tuple[Answer, Rank] | Literal[False]]] = {}
        # task kind -> id(node) -> (node, its ``version``, closed devices, its state, the
        # answer for that state): a node is visited by many tasks in a row, mostly unchanged,
        # and building and hashing its state cost more than the rest of a visit. Least
        # recently asked kind first.
        self._visits: dict[tuple[object, ...], dict[int, tuple[FreeNode, int, tuple[int, ...], NodeKey, Ranked]]] = {}
        self._statics: dict[object, dict[str, Fixed]] = {}
        # task kind -> every node's key and devices kept up to date (``_standing_best``)
        self._standings = Standings(Standing)
        # Kinds that differ only in CPU and memory share the GPU half of ``F_n(m)``: grouped
        # by (share, models), it is worked out once per group instead of once per kind.
        grouped: dict[tuple[int, tuple[str, ...]], list[tuple[int, int, float]]] = {}
        for w, p in self.classes:
            grouped.setdefault((w.gpu_milli, w.gpu_models), []).append((w.cpu_milli, w.memory_mb, p))
        self._groups = [
            (gpu, models, tuple(members), sum(p for _, _, p in members))
            for (gpu, models), members in grouped.items()
        ]
        self._hosted = WeightsByRoom([members for _, _, members, _ in self._groups])

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot) -> Fgd:
        return cls(snapshot.config.workload or pending_mix(snapshot.pending))

    def attempts(self, job: PendingJob, ledger: Ledger) -> Sequence[NodeFilter | None]:
        return (None,)

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        if not self.classes or task.gpu_milli <= 0:
            return first_fit(task, access)
        # Without quota or cell rules a node's answer depends on its free capacity alone, so
        # it is remembered by node state: most nodes keep their state across many tasks.
        by_state = not access.limited and not access.borrowing and not access.in_cells and access.only is None
        limit = self.scan if by_state else min(self.scan, RESTRICTED_SCAN)
        kind = (task.gpu_milli, task.cpu_milli, task.memory_mb, task.gpu_models, task.gpu_memory_mb, task.selector)
        # node state -> ``_evaluate_free``'s answer and its ``rank`` (a function of the state)
        answers = self._answers.setdefault(kind, {})
        # node name -> ``_fixed``, and which devices the task's resource expression allows
        statics = self._statics.setdefault((self._fixed_for(task), task.selector), {})
        # A fraction may not join other users' shares a VC's rule keeps it from: which
        # devices those are is part of the node's state for it (usually none).
        sharing, sharer = access.ledger.sharing, access.sharer
        shared = sharing.devices  # only the nodes in it have devices closed to anyone
        closed_to = sharing.closed if 0 < task.gpu_milli < MILLI and shared else None
        capacity = access.ledger.capacity
        if by_state and closed_to is None and not access.data_nodes and len(capacity.nodes) <= limit:
            # Every fitting node is compared, and each one's answer depends on its state alone:
            # kept per node from the changes since the kind was last asked (``Standing``).
            return self._standing_best(task, kind, capacity, answers, statics)
        visits = latest_kind(self._visits, kind)
        unbounded: Rank = (-math.inf,)
        # Under rules: the fresh nodes' keys (``Access.fit_key``) on which the task did not fit.
        refused: set[tuple[object, ...]] = set()
        for tier in access.tiers(task):
            nodes = iter(tier)
            seen = 0  # fitting nodes compared: nodes that cannot take the task do not count
            while True:
                # Each node's answer as if no quota or cell rule applied, remembered by node
                # state: exact without rules, and a lower bound of the answer under them.
                window: list[tuple[Rank, FreeNode, Answer]] = []
                compared: set[NodeKey] = set()
                for node in nodes:
                    name = node.name
                    closed = () if closed_to is None or name not in shared else closed_to(sharer, node)
                    visit = visits.get(id(node))
                    if visit is not None and visit[0] is node and visit[1] == node.version and visit[2] == closed:
                        state, ranked = visit[3], visit[4]  # as below, found again
                    else:
                        state, ranked = self._ranked(node, task, closed, answers, statics)
                        visits[id(node)] = (node, node.version, closed, state, ranked)
                    if by_state:
                        if state in compared:
                            continue  # the same as a node before it in best-fit order, which wins ties
                        compared.add(state)
                    if ranked is False:
                        continue
                    answer, rank = ranked
                    # On a node with GPUs of more than one kind the device choice changes the
                    # cost in ways the answer without rules does not bound: evaluated first.
                    bound: Rank = rank if by_state or len(node.klass) == 1 else unbounded
                    window.append(((*bound, seen), node, answer))
                    seen += 1
                    if len(window) >= limit:
                        break
                if not window:
                    break
                if by_state:
                    _, node, (_, shares) = min(window, key=lambda w: w[0])
                    return node, Fit([GpuShare(node.gpu_index[p], milli) for p, milli in shares], None)
                # Under rules: the exact answer of the nodes in bound order, until no bound
                # left can beat the best exact answer found (usually the first node's).
                window.sort(key=lambda w: w[0])
                best: tuple[Rank, FreeNode, Fit] | None = None
                for bound, node, _ in window:
                    if best is not None and best[0] <= bound:
                        break
                    shape = access.fit_key(node, task)
                    if shape is not None and shape in refused:
                        continue
                    evaluated = self._evaluate(node, task, access)
                    if evaluated is False:
                        if shape is not None:
                            refused.add(shape)
                        continue
                    key = (*self.rank(node, task, evaluated[:2]), bound[-1])
                    if best is None or key < best[0]:
                        best = (key, node, evaluated[2])
                if best is not None:
                    return best[1], best[2]
                if len(window) < limit:
                    break  # the tier is exhausted
        return None

    def _ranked(self, node: FreeNode, task: TaskRequest, closed: tuple[int, ...], answers: dict[NodeKey, Ranked],
                statics: dict[str, Fixed]) -> tuple[NodeKey, Ranked]:
        """The node's state for ``task`` and its answer with rank (False: it does not fit),
        remembered by state in ``answers``."""
        name = node.name
        fixed = statics.get(name)
        if fixed is None:
            fixed = self._fixed(node, task)
            if task.selector:
                fixed = (fixed, node.selected(task.selector, True))
            statics[name] = fixed
        state = (fixed, tuple(node.gpu_free), node.cpu_milli, node.memory_mb, closed)
        found = answers.get(state)
        if found is None:
            answer = self._evaluate_free(node, task, closed)
            found = answers[state] = False if answer is False else (answer, self.rank(node, task, answer))
        return state, found

    def _standing_best(self, task: TaskRequest, kind: tuple[object, ...], capacity: Capacity,
                       answers: dict[NodeKey, Ranked], statics: dict[str, Fixed]) -> Choice | None:
        """``choose`` without rules, where every fitting node is compared: the node of least
        (rank, best-fit order) among those ``capacity.candidates`` lists, which is the one
        the scan in best-fit order finds. Each node's key is kept in the kind's ``Standing``
        and worked out again only for the nodes changed since the kind was last asked (the
        capacity's journal): a task then costs the few nodes the tasks before it changed,
        not a walk over every node."""
        standing = self._standings.of_kind(capacity, kind)
        shares: dict[str, Shares] = standing.kept

        def key_of(node: FreeNode) -> StandingKey | None:
            if not capacity.offers(node, task):
                return None
            ranked = self._ranked(node, task, (), answers, statics)[1]
            if ranked is False:
                return None
            shares[node.name] = ranked[0][1]
            return (*ranked[1], node.gpu_sum, node.cpu_milli, node.name)

        best = standing.least(capacity, key_of)
        if best is None:
            return None
        node = capacity.nodes[best[-1]]  # type: ignore[index]
        return node, Fit([GpuShare(node.gpu_index[p], milli) for p, milli in shares[node.name]], None)

    def rank(self, node: FreeNode, task: TaskRequest, answer: Answer) -> Rank:
        """How good an answer ``(cost, [(position, milli)], ...)`` is, lowest best; ties go
        to best-fit order. A function of the node's state as ``choose`` keys it (``_fixed``
        and the free capacity): it is remembered with the answer."""
        return (answer[0],)

    def _fixed(self, node: FreeNode, task: TaskRequest) -> Fixed:
        """What the answer for ``task`` on ``node`` depends on besides its free capacity."""
        return node.klass if len(node.klass) == 1 else tuple(zip(node.gpu_model, node.gpu_memory_mb))

    def _fixed_for(self, task: TaskRequest) -> object:
        """Tasks for which ``_fixed`` is the same function of the node."""
        return None

    def _evaluate_free(
        self, node: FreeNode, task: TaskRequest, closed: tuple[int, ...] = ()
    ) -> Answer | Literal[False]:
        """False if the task does not fit the node, else (cost, [(position, milli)]), with
        no quota or cell rule (what ``Access.fit`` does for a job without them); ``closed``:
        devices the task may not share."""
        if not node.hosts_cpu_and_memory(task):
            return False
        if node.suits_all(task):
            eligible = [p for p, free in enumerate(node.gpu_free) if free > 0 and p not in closed]
        else:
            eligible = [
                p for p in range(len(node.gpu_free)) if node.suits(p, task) and node.gpu_free[p] > 0 and p not in closed
            ]
        if not eligible:
            return False
        before = self.fragmentation(node, node.gpu_free, 0, 0)
        devices = self._selector(before)(node, task, [eligible])
        if devices is None:
            return False
        cost = self._after(node, task, devices) - before + self.penalty(node, task, devices)
        return cost, [(node.position[d.index], d.milli) for d in devices]

    def _evaluate(
        self, node: FreeNode, task: TaskRequest, access: Access
    ) -> tuple[float, Shares, Fit] | Literal[False]:
        """False if the task does not fit the node, else (cost, [(position, milli)], fit)."""
        before = self.fragmentation(node, node.gpu_free, 0, 0)
        fit = access.fit(node, task, self._selector(before))
        if fit is None:
            return False
        cost = self._after(node, task, fit.devices) - before + self.penalty(node, task, fit.devices)
        return cost, [(node.position[d.index], d.milli) for d in fit.devices], fit

    def penalty(self, node: FreeNode, task: TaskRequest, devices: list[GpuShare]) -> float:
        """What else placing ``task`` on ``node`` costs, in milli-GPU (none for FGD itself)."""
        return 0.0

    def select_whole(self, node: FreeNode, task: TaskRequest, tiers: list[list[int]]) -> list[GpuShare] | None:
        """Whole devices for a whole-GPU task: on a node of one GPU kind any choice costs the
        same, so best-fit's (lowest indices in preference order)."""
        return select_bestfit(node, task, tiers)

    def _selector(self, before: float) -> Select:
        def select(node: FreeNode, task: TaskRequest, tiers: list[list[int]]) -> list[GpuShare] | None:
            if task.gpu_milli >= MILLI:  # whole devices are interchangeable for fragmentation
                return self.select_whole(node, task, tiers)
            best: tuple[tuple[int, float, int, int], int] | None = None
            for rank, positions in enumerate(tiers):
                for p in positions:
                    if node.gpu_free[p] >= task.gpu_milli:
                        delta = self._after(node, task, [GpuShare(node.gpu_index[p], task.gpu_milli)]) - before
                        key = (rank, delta, node.gpu_free[p], node.gpu_index[p])
                        if best is None or key < best[0]:
                            best = (key, p)
            return None if best is None else [GpuShare(node.gpu_index[best[1]], task.gpu_milli)]

        return select

    def _after(self, node: FreeNode, task: TaskRequest, devices: list[GpuShare]) -> float:
        free = list(node.gpu_free)
        for share in devices:
            free[node.position[share.index]] -= share.milli
        return self.fragmentation(node, free, task.cpu_milli, task.memory_mb)

    def fragmentation(self, node: FreeNode, free: list[int], cpu_used: int, memory_used: int) -> float:
        """``F_n``: the node's expected fragmentation with these free shares (milli-GPU)."""
        cpu = node.cpu_milli - cpu_used
        memory = node.memory_mb - memory_used
        key: FragmentKey = (node.klass if len(node.klass) == 1 else tuple(node.gpu_model), tuple(free), cpu, memory)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._expected(node, free, cpu, memory)
        return cached

    def _expected(self, node: FreeNode, free: list[int], cpu: int, memory: int) -> float:
        """``sum_m p_m F_n(m)``, the same as summing ``_measured_by`` over the classes.

        Per group, what its GPUs leave stranded depends on the devices alone, and how much
        of its weight the node's CPU and memory host on those two alone: each is worked out
        once per devices (``_stranded``) and once per CPU and memory (``_hosted``), and
        summed here in the same order, with the same operations, as worked out afresh."""
        idle = tuple(f if f > 0 else 0 for f in free)
        total = sum(idle)
        if total == 0:
            return 0.0
        devices = (tuple(node.gpu_model), idle)
        stranded = self._stranded.get(devices)
        if stranded is None:
            stranded = self._stranded[devices] = self._stranded_by_group(node.gpu_model, idle, total)
        hosted = self._hosted.of(cpu, memory)
        expected = 0.0
        for (_, _, _, weight), left, host in zip(self._groups, stranded, hosted, strict=True):
            if left is None:  # no device of the group's models
                expected += weight * total
            else:
                expected += (weight - host) * total + host * left
        return expected

    def _stranded_by_group(self, models_of: Sequence[str], idle: tuple[int, ...], total: int
                           ) -> tuple[int | None, ...]:
        """Per group: the free milli-GPU its tasks could not use on these devices (all of it
        where none fits), or None where no device is of its models."""
        found: list[int | None] = []
        for (gpu_milli, _, _, _), usable in zip(self._groups, self._usable_by_group(models_of), strict=True):
            if usable is None:
                found.append(None)
                continue
            positions, only = usable
            if gpu_milli >= MILLI:
                fits = sum(1 for i in positions if idle[i] == MILLI) >= gpu_milli // MILLI
            else:
                fits = any(idle[i] >= gpu_milli for i in positions)
            if fits:
                need = min(gpu_milli, MILLI)
                if only is not None:
                    found.append(sum(f for i, f in enumerate(idle) if i not in only or f < need))
                else:
                    found.append(sum(f for f in idle if f < need))
            else:
                found.append(total)
        return tuple(found)

    def _usable_by_group(self, models_of: Sequence[str]) -> list[tuple[Sequence[int], frozenset[int] | None] | None]:
        """Per group, the positions of the devices of its models and, where that is not every
        device, the same as a set (None: no device of its models), per layout of models."""
        key = tuple(models_of)
        found = self._usable.get(key)
        if found is None:
            every = range(len(models_of))
            found = []
            for _, models, _, _ in self._groups:
                usable = [i for i in every if models_of[i] in models] if models else every
                if not usable:
                    found.append(None)
                elif len(usable) == len(every):
                    found.append((every, None))
                else:
                    found.append((usable, frozenset(usable)))
            self._usable[key] = found
        return found

    @staticmethod
    def _measured_by(node: FreeNode, free: list[int], cpu: int, memory: int, kind: WorkloadClass) -> int:
        """``F_n(m)``: free GPU capacity of the node that tasks of ``kind`` could not use."""
        idle = [max(0, f) for f in free]
        total = sum(idle)
        if total == 0:
            return 0
        usable = [
            i for i in range(len(idle)) if not kind.gpu_models or node.gpu_model[i] in kind.gpu_models
        ]
        if cpu < kind.cpu_milli or memory < kind.memory_mb or not usable:
            return total
        if kind.gpu_milli >= MILLI:
            fits = sum(1 for i in usable if idle[i] == MILLI) >= kind.gpu_milli // MILLI
        else:
            fits = any(idle[i] >= kind.gpu_milli for i in usable)
        if not fits:
            return total
        need = min(kind.gpu_milli, MILLI)
        usable_set = set(usable)
        return sum(f for i, f in enumerate(idle) if i not in usable_set or f < need)
