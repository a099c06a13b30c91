"""HiveD-style cells: each VC's guaranteed GPUs are packed into whole cells bound to it.

Why. Quotas alone let one VC's small guaranteed jobs land on every node, one GPU here and
one there, until no node has 8 free GPUs together although every VC is within quota; the
VC that then asks for its full-quota gang of 8-GPU tasks waits forever. HiveD (OSDI'20)
prevents this "sharing anomaly" by giving each VC *cells* and packing its jobs into them.

The cell model, in short:

* A **cell** is ``c`` GPUs of one model on one node, taken in (topology group, index)
  order, so that cells follow PCIe/NUMA groups when those are known. ``c`` (per model) is
  ``SchedulerConfig.cell_gpus[model]`` or else the greatest common divisor of every
  node's number of GPUs of that model and every VC's quota for it: quotas are then whole
  cells, and cells tile nodes exactly. ``m`` is the most cells one node holds.
* A VC with quota ``Q`` for a model may hold ``K = ceil(Q / c)`` cells of it: ``W = K // m``
  **whole nodes** and ``r = K - W * m`` **loose cells**. (HiveD's virtual cells: its quota
  split into node-level cells and smaller ones.)
* A guaranteed GPU task of the VC goes, in this order, (1) into cells the VC already holds;
  (2) into free cells ("holes") of nodes where cells are bound already, as loose cells
  while it has loose cells left, so that partly used nodes fill up first; (3) onto a node
  no VC holds a cell of, as loose cells while it has enough left — but only when no hole
  could take the task even once its opportunistic work is preempted, or when those cells
  are all of that node's (a node smaller than the rest, which they do not split) — else
  binding the whole node while it has whole nodes left. Nothing else: a VC never holds
  more than ``K`` cells. Within a node, a task fills the VC's cells first, then the
  emptiest new cells.
* **Loose cells before whole nodes** (HiveD's buddy allocation splits the lowest level
  first). A small job that bound a fresh node whole while its VC still had loose cells
  would take one of the whole nodes the VC's wide jobs need — which, alone on a cluster
  of its quota's size, they would find (the quota's remainder is a smaller node there, and
  small jobs fill it). That made VCs whose quota is not a multiple of the node size wait
  longer shared than alone (the sharing anomaly, ``docs/benchmarks.md``). A node where
  only one VC's cells are bound becomes its whole node once its loose cells are spent.
* Binding is lazy and is not stored: every cycle derives it again by replaying the running
  guaranteed jobs, in the order they were placed, through the same rule. So a cycle sees
  the bindings the cycles before it made, a whole node stays whole while any of it is
  used (a replayed job finds it alone), and a cell with no guaranteed work is released.
* Opportunistic work may use any idle GPU, in any cell; reclaiming it is preemption's job.

Why this holds the guarantee: loose cells only ever go to partly used nodes before a fresh
node is split (where nodes of a model have one size, a VC has fewer loose cells than a node
has cells, so they never fill a fresh node whole), so all loose cells together touch at
most ``ceil(sum r / m)`` nodes, and whole nodes are taken one per ``m`` cells of quota.
When the quotas of a model add up to no more than the cluster's cells, a VC with no
guaranteed work running therefore always finds ``W`` untouched nodes and ``r`` cells for
its full-quota gang (opportunistic work on them is preempted). The promise is HiveD's, and
has HiveD's conditions: nodes of one model have the same number of GPUs, and the gang's
tasks each fit in a cell or take whole nodes. Clusters outside that (mixed node sizes, a
3-GPU task on 4-GPU cells) still get the packing, without the proof. """

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from math import gcd

from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.snapshot import NodeState, RunningJob, TaskPlacement

# Node families, the capacity index's first key: no cell bound; some; all, by several VCs.
# A node all of whose cells one VC holds is in the family "=" + that VC's name.
FRESH, SHARED, SEALED = "", "~shared", "~sealed"
CellId = tuple[str, int]  # (node name, cell number on that node)
VcModel = tuple[str, str]  # (VC name, GPU model): what a VC's budget and counts are per


@dataclass(frozen=True)
class Budget:
    whole: int  # nodes the VC may bind whole
    loose: int  # cells the VC may bind one by one


@dataclass(frozen=True)
class Binding:
    """Cells a placement binds to its VC: ``cells`` loose, or the rest of a whole node.

    A whole-node binding absorbs the VC's loose cells already on that node, which then
    count as part of the whole node instead (as the next cycle's derivation sees them).
    """

    model: str
    cells: tuple[CellId, ...]
    whole_node: bool
    absorbed: int = 0


def cell_sizes(
    nodes: Sequence[NodeState], quotas: Sequence[Mapping[str, int]], fixed: Mapping[str, int]
) -> dict[str, int]:
    """GPUs per cell, by model (see the module docstring)."""
    counts: dict[str, list[int]] = defaultdict(list)
    for node in nodes:
        per_model: dict[str, int] = defaultdict(int)
        for gpu in node.gpus:
            per_model[gpu.model] += 1
        for model, count in per_model.items():
            counts[model].append(count)
    sizes = {}
    for model in sorted(counts):
        if fixed.get(model, 0) > 0:
            sizes[model] = fixed[model]
            continue
        size = 0
        for count in counts[model]:
            size = gcd(size, count)
        for quota in quotas:
            size = gcd(size, quota.get(model, 0))
        sizes[model] = max(size, 1)
    return sizes


@dataclass(frozen=True)
class _Bindings:
    """``Cells``' bindings and the indexes derived from them, set aside whole (``derive_again``)."""

    owner: dict[CellId, str]
    bound_on: dict[str, int]
    held: dict[str, dict[str, int]]
    family: dict[str, str]
    partly: dict[str, set[str]]
    shared: set[str]
    whole: dict[VcModel, list[str]]
    loose: dict[VcModel, int]


def _placement_order(p: TaskPlacement) -> tuple[int, int, int, str, int]:
    return (-sum(s.milli for s in p.gpus), -p.cpu_milli, -p.memory_mb, p.role, p.index)


def _no_refile(node: str) -> None:
    """``Cells.on_change`` before a capacity index listens (while deriving)."""


class Cells:
    """Which cells are bound to which VC during one cycle; changes go through ``Tentative``."""

    def __init__(
        self, nodes: Sequence[NodeState], sizes: Mapping[str, int], quotas: Mapping[str, Mapping[str, int]]
    ) -> None:
        self.size = dict(sizes)
        self.cell_of: dict[str, list[int]] = {}  # node -> cell number per device position
        self.cell_model: dict[CellId, str] = {}
        self.node_cells: dict[tuple[str, str], tuple[CellId, ...]] = {}  # (node, model) -> cells
        self.cells_on: dict[str, int] = {}
        per_node: dict[str, int] = defaultdict(int)
        self._positions: dict[tuple[str, int], int] = {}
        for node in nodes:
            gpus = sorted(node.gpus, key=lambda g: g.index)
            position = {g.index: p for p, g in enumerate(gpus)}
            self._positions.update(((node.name, i), p) for i, p in position.items())
            of = [-1] * len(gpus)
            number = 0
            for model in sorted({g.model for g in gpus}):
                mine = sorted((g for g in gpus if g.model == model), key=lambda g: (g.group, g.index))
                size = self.size[model]
                ids = []
                for start in range(0, len(mine), size):
                    cell = (node.name, number)
                    self.cell_model[cell] = model
                    ids.append(cell)
                    for g in mine[start : start + size]:
                        of[position[g.index]] = number
                    number += 1
                self.node_cells[(node.name, model)] = tuple(ids)
                per_node[model] = max(per_node[model], len(ids))
            self.cell_of[node.name] = of
            self.cells_on[node.name] = number
        self.per_node = dict(per_node)  # m: the most cells of a model on one node
        self.budget: dict[VcModel, Budget] = {}
        for vc, quota in quotas.items():
            for model, quota_gpus in quota.items():
                if model not in self.size or quota_gpus <= 0:
                    continue
                cells = -(-quota_gpus // self.size[model])
                m = self.per_node[model]
                self.budget[(vc, model)] = Budget(whole=cells // m, loose=cells - (cells // m) * m)
        # Whether work stopping can change how the next cycle derives the cells still in use:
        # only where a VC may hold a whole node of several cells, which its cells there
        # become once no other VC holds one of that node. Elsewhere stopping work only frees.
        self.rederivable = any(b.whole > 0 and self.per_node[m] > 1 for (_, m), b in self.budget.items())
        # Which VC holds each bound cell, and what follows from it for the lookups below.
        # Written only by ``_set`` and ``_unset``: the indexes after ``owner`` are derived
        # from it there, one cell at a time, and nowhere else (``derive_again`` sets them
        # all aside together, and puts them back together).
        self.owner: dict[CellId, str] = {}
        self.bound_on: dict[str, int] = defaultdict(int)  # node -> cells bound
        self.held: dict[str, dict[str, int]] = defaultdict(dict)  # vc -> node -> cells it holds there
        self._family: dict[str, str] = {}  # node -> family
        # vc -> nodes where it holds cells but not all of them (shared or sealed with others)
        self.partly: dict[str, set[str]] = defaultdict(set)
        self.shared: set[str] = set()  # nodes with some cells bound and some free (holes)
        # How each VC's bound cells count against its budget: the nodes it holds whole and
        # the number of loose cells. Not derivable from ``owner`` (the same cells may count
        # either way), so written only by the counting methods below, each of which
        # records its own undo.
        self.whole: dict[VcModel, list[str]] = defaultdict(list)  # (vc, model) -> nodes
        self.loose: dict[VcModel, int] = defaultdict(int)  # (vc, model) -> cells
        self.on_change: Callable[[str], None] = _no_refile  # the capacity index re-files the node
        # Loose cells a preemption plan of this cycle bound for the job it is for: no other
        # job may share them. The next cycle derives cells from running work only, and
        # would see another job alone in such a cell — and might bind its node whole,
        # taking the whole node the plan counts on. (Cells of a node a plan binds whole
        # derive the same way whoever runs in them: those are shared as usual.)
        self.planned: set[CellId] = set()
        self.binding_log: list[CellId] | None = None  # loose cells ``bind`` binds, while not None

    # --- derivation from running work ----------------------------------------------------

    def derive(self, running: Sequence[RunningJob], enforced: Mapping[str, bool], room: Callable[[str], int]) -> None:
        """Bind the cells the running guaranteed jobs use (see the module docstring).

        First every cell a job uses goes to its VC. Then each VC's jobs are replayed in the
        order they were placed (start time, priority, id; a job's tasks largest first)
        through the rule placement binds by: new cells count as loose while the VC has
        loose cells enough; else a node no other VC uses becomes one of its whole nodes
        while it has whole nodes left, and other cells count as loose. So the next cycle
        sees the bindings this one made. If jobs that shaped them have ended, the
        replay may leave a VC over budget although an assignment within it exists: then a
        VC's whole nodes are those it uses most (the fewest cells in all).
        """
        jobs = [j for j in running if j.guaranteed and enforced.get(j.vc, False)]
        jobs.sort(key=lambda j: (j.started_at, j.priority_rank, j.job_id))
        for job in jobs:  # a cell two VCs use (legacy placements) stays with the first
            for p in job.placements:
                for _, cells in self._unbound_cells(p):
                    for cell in cells:
                        self._set(cell, job.vc)
        by_vc: dict[str, list[RunningJob]] = defaultdict(list)
        for job in jobs:
            by_vc[job.vc].append(job)
        for vc in sorted(by_vc):
            replay = Tentative()
            self._replay(vc, by_vc[vc], replay)
            if all(self.loose_left(vc, model) >= 0 for v, model in list(self.loose) if v == vc):
                replay.commit()
            else:
                replay.discard()
                self._fewest_cells(vc, by_vc[vc], room)

    def derive_again(
        self,
        running: Sequence[RunningJob],
        enforced: Mapping[str, bool],
        room: Callable[[str], int],
        tentative: Tentative,
    ) -> None:
        """Derive every VC's cells again from ``running`` alone, as the next cycle will once
        the rest has stopped; ``tentative`` puts back the cells as they were.

        Every VC, not only those that lose work: whether a node is one VC's whole node
        depends on whether another VC holds a cell of it, so work stopping in one VC can
        turn another VC's loose cell into its whole node — and take the hole a plan
        counted on. Plans made this cycle bind nothing here, as the next cycle knows
        nothing of them (their held resources still keep others out: ``Ledger.held_in``).
        """
        saved = self._take_bindings()
        refile, self.on_change = self.on_change, _no_refile
        try:
            self.derive(running, enforced, room)
        finally:
            self.on_change = refile
        self._refile_changed(saved.family)
        tentative.record(partial(self._put_back, saved))

    def _take_bindings(self) -> _Bindings:
        """The bindings and their indexes as they are, leaving none bound."""
        saved = _Bindings(
            self.owner, self.bound_on, self.held, self._family, self.partly, self.shared, self.whole, self.loose
        )
        self.owner, self.bound_on, self.held, self._family = {}, defaultdict(int), defaultdict(dict), {}
        self.partly, self.shared, self.whole, self.loose = defaultdict(set), set(), defaultdict(list), defaultdict(int)
        return saved

    def _put_back(self, saved: _Bindings) -> None:
        family = self._family
        self.owner, self.bound_on, self.held, self._family = saved.owner, saved.bound_on, saved.held, saved.family
        self.partly, self.shared, self.whole, self.loose = saved.partly, saved.shared, saved.whole, saved.loose
        self._refile_changed(family)

    def _refile_changed(self, other: Mapping[str, str]) -> None:
        """Tell the capacity index about each node whose family differs from ``other``'s."""
        for node in sorted(set(other) | set(self._family)):
            if other.get(node, FRESH) != self._family.get(node, FRESH):
                self.on_change(node)

    def rebind(self, vc: str, jobs: Sequence[RunningJob], tentative: Tentative) -> None:
        """Derive ``vc``'s cells again from ``jobs`` alone (as the next cycle will once some
        of its jobs have stopped), other VCs' cells staying as they are."""
        for cell in sorted(c for c, owner in self.owner.items() if owner == vc):
            self._unset_and_refile(cell, vc)
            tentative.record(partial(self._set_and_refile, cell, vc))
        for key in sorted(k for k in set(self.whole) | set(self.loose) if k[0] == vc):
            self._reset_counts(key, tentative)
        jobs = sorted(jobs, key=lambda j: (j.started_at, j.priority_rank, j.job_id))
        for job in jobs:
            for p in job.placements:
                for _, cells in self._unbound_cells(p):
                    for cell in cells:
                        self._set_and_refile(cell, vc)
                        tentative.record(partial(self._unset_and_refile, cell, vc))
        self._replay(vc, jobs, tentative)

    def _replay(self, vc: str, jobs: Sequence[RunningJob], tentative: Tentative) -> None:
        """Whole or loose, for the cells ``vc`` already owns, in the order ``jobs`` were placed."""
        counted: set[CellId] = set()
        for job in jobs:
            for p in sorted(job.placements, key=_placement_order):
                of = self.cell_of.get(p.node)
                if of is None:
                    continue
                mine: dict[str, set[CellId]] = defaultdict(set)
                for share in p.gpus:
                    pos = self._position(p.node, share.index)
                    if pos is not None and of[pos] >= 0 and self.owner.get((p.node, of[pos])) == vc:
                        cell = (p.node, of[pos])
                        if cell not in counted:
                            mine[self.cell_model[cell]].add(cell)
                for model in sorted(mine):
                    new = sorted(mine[model])
                    counted.update(new)
                    node_cells = self.node_cells[(p.node, model)]
                    if (len(new) > self.loose_left(vc, model) and self.whole_left(vc, model) > 0
                            and all(self.owner.get(c, vc) == vc for c in node_cells)):
                        absorbed = sum(1 for c in node_cells if c in counted and c not in new)
                        free = tuple(c for c in node_cells if c not in self.owner)
                        self.bind(vc, Binding(model, free, True, absorbed=absorbed), tentative)
                        if not free:  # ``bind`` records nothing for no cells: count the node here
                            self._count_whole((vc, model), p.node, absorbed, tentative)
                        counted.update(node_cells)
                    else:
                        self._count_loose((vc, model), len(new), tentative)

    def _fewest_cells(self, vc: str, jobs: Sequence[RunningJob], room: Callable[[str], int]) -> None:
        used: dict[tuple[str, str], int] = defaultdict(int)  # (model, node) -> cells it owns there
        for cell, owner in self.owner.items():
            if owner == vc:
                used[(self.cell_model[cell], cell[0])] += 1
        for model in sorted({m for m, _ in used}):
            key = (vc, model)
            nodes = sorted((n for m, n in used if m == model), key=lambda n: (-used[(model, n)], -room(n), n))
            for node in nodes:
                cells = self.node_cells[(node, model)]
                if self.whole_left(vc, model) > 0 and all(self.owner.get(c, vc) == vc for c in cells):
                    self._count_whole(key, node, 0, None)
                    for cell in cells:
                        if cell not in self.owner:
                            self._set(cell, vc)
                else:  # over budget (a quota lowered since), its cells stay bound all the same
                    self._count_loose(key, used[(model, node)], None)

    def _unbound_cells(self, p: TaskPlacement) -> list[tuple[str, list[CellId]]]:
        """The cells a placement uses that no VC holds yet, by model. A cell another VC
        holds too (legacy placements) stays with the VC that holds it."""
        of = self.cell_of.get(p.node)
        if of is None:
            return []
        new: dict[str, set[int]] = defaultdict(set)
        for share in p.gpus:
            pos = self._position(p.node, share.index)
            if pos is not None and of[pos] >= 0 and (p.node, of[pos]) not in self.owner:
                new[self.cell_model[(p.node, of[pos])]].add(of[pos])
        return [(model, [(p.node, n) for n in sorted(new[model])]) for model in sorted(new)]

    def _position(self, node: str, index: int) -> int | None:
        return self._positions.get((node, index))

    # --- queries -------------------------------------------------------------------------

    def family(self, node: str) -> str:
        return self._family.get(node, FRESH)

    def _refamily(self, node: str) -> None:
        holders = sorted(vc for vc, nodes in self.held.items() if nodes.get(node))
        bound = self.bound_on.get(node, 0)
        if bound == 0:
            family = FRESH
        elif bound < self.cells_on.get(node, 0):
            family = SHARED
        else:
            family = "=" + holders[0] if len(holders) == 1 else SEALED
        self._family[node] = family
        if family == SHARED:
            self.shared.add(node)
        else:
            self.shared.discard(node)
        for vc, nodes in self.held.items():
            if nodes.get(node) and family != "=" + vc:
                self.partly[vc].add(node)
            else:
                self.partly[vc].discard(node)

    def holes(self, model: str) -> list[CellId]:
        """Free cells of ``model`` on nodes where other cells are bound, in node order."""
        found: list[CellId] = []
        for node in sorted(self.shared):
            found.extend(c for c in self.node_cells.get((node, model), ()) if c not in self.owner)
        return found

    def loose_left(self, vc: str, model: str) -> int:
        return self.budget.get((vc, model), Budget(0, 0)).loose - self.loose[(vc, model)]

    def whole_left(self, vc: str, model: str) -> int:
        return self.budget.get((vc, model), Budget(0, 0)).whole - len(self.whole[(vc, model)])

    def partly_held(self, vc: str) -> list[str]:
        """Nodes where ``vc`` holds some cells but others hold the rest, sorted by name."""
        return sorted(self.partly.get(vc, ()))

    def binding_for(
        self, vc: str, node: str, model: str, new_cells: Sequence[CellId], *, split_fresh: bool = True
    ) -> Binding | None:
        """How ``vc`` may bind ``new_cells`` (free cells of ``model`` on ``node``), if at all.

        The rule the derivation follows too, so that the next cycle sees what this one
        bound: the cells are loose while the VC has loose cells enough — but, with
        ``split_fresh=False`` (a hole elsewhere could take the task), not as the first
        cells bound on a node unless they are all of its cells (a small node they fill is
        not split); else a node no other VC holds a cell of becomes one of the VC's whole
        nodes while it has whole nodes left (its loose cells there are absorbed).
        """
        if not new_cells:
            return Binding(model, (), False)
        cells = self.node_cells[(node, model)]
        if len(new_cells) <= self.loose_left(vc, model) and (
                split_fresh or self.bound_on.get(node, 0) > 0 or len(new_cells) == len(cells)):
            return Binding(model, tuple(new_cells), False)
        if self.whole_left(vc, model) > 0 and all(self.owner.get(c, vc) == vc for c in cells):
            free = tuple(c for c in cells if c not in self.owner)
            return Binding(model, free, True, absorbed=len(cells) - len(free))
        return None

    # --- changes -------------------------------------------------------------------------

    def bind(self, vc: str, binding: Binding, tentative: Tentative) -> None:
        if not binding.cells:
            return
        node = binding.cells[0][0]
        for cell in binding.cells:
            self._set(cell, vc)
        if self.binding_log is not None and not binding.whole_node:
            self.binding_log.extend(binding.cells)
        key = (vc, binding.model)
        if binding.whole_node:
            self._count_whole(key, node, binding.absorbed, None)
        else:
            self._count_loose(key, len(binding.cells), None)
        self.on_change(node)
        tentative.record(partial(self._unbind, vc, binding))

    def _unbind(self, vc: str, binding: Binding) -> None:
        """``bind``'s undo, in the reverse order."""
        node = binding.cells[0][0]
        for cell in binding.cells:
            self._unset(cell, vc)
        key = (vc, binding.model)
        if binding.whole_node:
            self._uncount_whole(key, node, binding.absorbed)
        else:
            self._count_loose(key, -len(binding.cells), None)
        self.on_change(node)

    # The budget counts: the only writers of ``whole`` and ``loose``. With a ``tentative``,
    # each records the change that undoes it.

    def _count_whole(self, key: VcModel, node: str, absorbed: int, tentative: Tentative | None) -> None:
        """``node`` becomes one of the VC's whole nodes; ``absorbed`` of its loose cells were
        on it and now count as part of it instead."""
        self.whole[key].append(node)
        self.loose[key] -= absorbed
        if tentative is not None:
            tentative.record(partial(self._uncount_whole, key, node, absorbed))

    def _uncount_whole(self, key: VcModel, node: str, absorbed: int) -> None:
        self.whole[key].remove(node)
        self.loose[key] += absorbed

    def _count_loose(self, key: VcModel, cells: int, tentative: Tentative | None) -> None:
        self.loose[key] += cells
        if tentative is not None:
            tentative.record(partial(self._count_loose, key, -cells, None))

    def _reset_counts(self, key: VcModel, tentative: Tentative) -> None:
        """The VC counts nothing for the model, until ``tentative`` is discarded."""
        whole, loose = list(self.whole[key]), self.loose[key]
        self.whole[key], self.loose[key] = [], 0
        tentative.record(partial(self._restore_counts, key, whole, loose))

    def _restore_counts(self, key: VcModel, whole: list[str], loose: int) -> None:
        self.whole[key], self.loose[key] = whole, loose

    # The cells' owners: the only writers of ``owner`` and the indexes derived from it.

    def _set_and_refile(self, cell: CellId, vc: str) -> None:
        self._set(cell, vc)
        self.on_change(cell[0])

    def _unset_and_refile(self, cell: CellId, vc: str) -> None:
        self._unset(cell, vc)
        self.on_change(cell[0])

    def _set(self, cell: CellId, vc: str) -> None:
        self.owner[cell] = vc
        self.bound_on[cell[0]] += 1
        held = self.held[vc]
        held[cell[0]] = held.get(cell[0], 0) + 1
        self._refamily(cell[0])

    def _unset(self, cell: CellId, vc: str) -> None:
        del self.owner[cell]
        self.bound_on[cell[0]] -= 1
        self.held[vc][cell[0]] -= 1
        self._refamily(cell[0])
