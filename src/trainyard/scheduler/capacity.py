"""Free capacity during one scheduling cycle, indexed for best-fit, with tentative changes.

Like Volcano's ``Statement``: every change made while trying something (a gang's tasks,
a preemption plan, a reservation probe) is recorded in a ``Tentative`` and undone as a
whole unless committed, so gangs are all-or-nothing by construction.

Free GPU on a device may go *below zero* on purpose: a reservation or a preemption plan
takes resources that are still busy, so that nothing else can take them in this cycle.
Nothing ever fits on a device whose free share is not positive.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import chain

from trainyard.core.labels import GPU_SHARES_LABEL
from trainyard.core.resources import MILLI
from trainyard.core.selectors import GpuFacts, NodeFacts, compile_selector
from trainyard.scheduler.snapshot import GpuShare, GpuSlot, NodeState, TaskPlacement, TaskRequest
from trainyard.scheduler.standing import Standing, StandingKey, Standings

Klass = tuple[tuple[str, int], ...]  # the distinct (model, memory) of a node's GPUs


# What a node's layout depends on: (index, model, memory, group) of each GPU, as listed.
LayoutKey = tuple[tuple[int, str, int, str], ...]
# See ``_layout``.
Layout = tuple[list[int], list[int], list[str], list[int], list[str], Klass, dict[int, int], str | None]

_LAYOUTS: dict[LayoutKey, Layout] = {}

# A resource expression's answer on a kind of node: (expression, whether the role has GPUs,
# what the answer depends on) -> true or false per device by position (one entry, the node,
# for a role without GPUs). Kept across cycles: an expression is evaluated once per kind of
# node (per node if it names ``node.name``), whatever the number of nodes, jobs and cycles.
Selection = tuple[bool, ...]
_SELECTIONS: dict[tuple[object, ...], Selection] = {}


def _layout(gpus: tuple[GpuSlot, ...]) -> Layout:
    """(order of ``gpus`` by index, then by position: index, model, memory, group lists,
    klass, position of each index, the only model or None), cached by what it depends on."""
    key: LayoutKey = tuple((g.index, g.model, g.memory_mb, g.group) for g in gpus)
    layout = _LAYOUTS.get(key)
    if layout is None:
        order = sorted(range(len(gpus)), key=lambda i: key[i][0])
        index = [key[i][0] for i in order]
        model = [key[i][1] for i in order]
        memory = [key[i][2] for i in order]
        group = [key[i][3] for i in order]
        klass = tuple(sorted(set(zip(model, memory, strict=True))))
        only_model = model[0] if len(set(model)) == 1 else None
        layout = (order, index, model, memory, group, klass, {x: p for p, x in enumerate(index)}, only_model)
        if len(_LAYOUTS) > 4096:  # kinds of node are few; bound it all the same
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


@dataclass
class FreeNode:
    name: str
    cpu_milli: int
    memory_mb: int
    gpu_free: list[int]  # free milli-GPU per device, by position in ``gpu_index``
    gpu_index: list[int]
    gpu_model: list[str]
    gpu_memory_mb: list[int]
    schedulable: bool
    gpu_group: list[str] = field(default_factory=list)
    rack: str = ""
    gpu_sum: int = 0  # kept equal to sum(gpu_free) by ``_apply``
    whole: int = 0  # devices with a whole free GPU, kept by ``_apply``
    cpu_total: int = -1  # the node's own CPU and memory (-1: what is free at construction)
    memory_total: int = -1
    # Whole-node tasks on it (``TaskRequest.whole_node``), kept by ``_apply`` and, for the
    # running ones, set by the ledger: while one runs, nothing else is placed here.
    sealed: int = 0
    # The node as reported (total CPU and memory, labels) for resource expressions; None
    # when built without one (then the free figures stand for the totals, without labels).
    state: NodeState | None = field(default=None, repr=False)
    # Whether a device may hold a fraction of a GPU: not where the backend says the node's
    # GPUs cannot be shared (Slurm without shard GRES: ``GPU_SHARES_LABEL`` "false").
    shares: bool = True
    _selected: dict[tuple[str, bool], Selection] | None = field(default=None, init=False, repr=False)
    # Counts the changes to its free capacity (``_apply``): what a scorer remembers of the
    # node holds while this is the same.
    version: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.cpu_total < 0:
            self.cpu_total = self.cpu_milli
        if self.memory_total < 0:
            self.memory_total = self.memory_mb
        if not self.gpu_group:
            self.gpu_group = [""] * len(self.gpu_index)
        self.gpu_sum = sum(self.gpu_free)
        self.whole = sum(1 for f in self.gpu_free if f == MILLI)
        self.klass: Klass = tuple(sorted(set(zip(self.gpu_model, self.gpu_memory_mb, strict=True))))
        self.position = {index: pos for pos, index in enumerate(self.gpu_index)}
        models = set(self.gpu_model)
        self.only_model = self.gpu_model[0] if len(models) == 1 else None  # fast path for lookups

    @classmethod
    def from_state(cls, node: NodeState, *, empty: bool = False, rack_label: str = "rack") -> FreeNode:
        """The node's free capacity now, or (``empty``) as if nothing ran and it were up.

        Built every cycle for every node, so what does not change while jobs come and go
        (device order, models, memory, groups and what follows from them) is worked out
        once per kind of node and shared, read-only, by the nodes built from it."""
        layout = _layout(node.gpus)
        order, index, model, memory, group, klass, position, only_model = layout
        gpus = node.gpus
        free = [MILLI] * len(order) if empty else [MILLI - gpus[i].used_milli for i in order]
        self = cls.__new__(cls)
        self.name = node.name
        self.cpu_milli = node.cpu_milli - (0 if empty else node.cpu_used_milli)
        self.memory_mb = node.memory_mb - (0 if empty else node.memory_used_mb)
        self.cpu_total, self.memory_total, self.sealed = node.cpu_milli, node.memory_mb, 0
        self.gpu_free = free
        self.gpu_index, self.gpu_model, self.gpu_memory_mb, self.gpu_group = index, model, memory, group
        self.schedulable = empty or node.schedulable
        self.rack = node.labels.get(rack_label, "")
        self.gpu_sum = sum(free)
        self.whole = free.count(MILLI)
        self.klass, self.position, self.only_model = klass, position, only_model
        self.state = node
        self.shares = node.labels.get(GPU_SHARES_LABEL) != "false"
        self.version = 0
        return self

    def suits(self, pos: int, task: TaskRequest) -> bool:
        return (
            (self.shares or task.gpu_milli % MILLI == 0)
            and (not task.gpu_models or self.gpu_model[pos] in task.gpu_models)
            and self.gpu_memory_mb[pos] >= task.gpu_memory_mb
            and (not task.selector or self.selected(task.selector, True)[pos])
        )

    def suits_all(self, task: TaskRequest) -> bool:
        """Whether every device suits the task (``suits``), known without asking each: a
        task that names no model, memory or expression, on a node whose devices it may share
        or that takes whole GPUs (most tasks)."""
        return (
            not task.gpu_models and not task.gpu_memory_mb and not task.selector
            and (self.shares or task.gpu_milli % MILLI == 0)
        )

    def admits(self, task: TaskRequest) -> bool:
        """Whether the node itself suits a task without GPUs (its resource expression)."""
        return not task.selector or task.gpu_milli > 0 or self.selected(task.selector, False)[0]

    def facts(self) -> NodeFacts:
        """The node as a resource expression sees it."""
        state = self.state
        if state is None:
            return NodeFacts(self.name, {}, self.cpu_milli, self.memory_mb, len(self.gpu_index))
        return NodeFacts(state.name, state.labels, state.cpu_milli, state.memory_mb, len(state.gpus))

    def gpu_facts(self, pos: int) -> GpuFacts:
        return GpuFacts(self.gpu_index[pos], self.gpu_model[pos], self.gpu_memory_mb[pos])

    def selected(self, source: str, gpus: bool) -> Selection:
        """Whether ``source`` is true on each device by position (``gpus``), or on the node
        (one entry); worked out once per kind of node and remembered (``_SELECTIONS``)."""
        memo = self._selected
        if memo is None:
            memo = self._selected = {}
        found = memo.get((source, gpus))
        if found is not None:
            return found
        selector = compile_selector(source, gpus=gpus)  # checked at submit; cached by source
        facts = self.facts()
        key = (
            source, gpus, facts.name if selector.uses_name else "", tuple(sorted(facts.labels.items())),
            facts.cpu_milli, facts.memory_mb, facts.gpus,
            tuple(zip(self.gpu_index, self.gpu_model, self.gpu_memory_mb)) if gpus else (),
        )
        found = _SELECTIONS.get(key)
        if found is None:
            if not gpus:
                found = (selector.allows(facts),)
            elif not selector.uses_gpu:  # the node decides for all its devices
                found = (selector.allows(facts),) * len(self.gpu_index)
            else:  # devices alike (model, memory; index if it is read) are asked once
                asked: dict[tuple[object, ...], bool] = {}
                answers = []
                for p in range(len(self.gpu_index)):
                    alike = (self.gpu_model[p], self.gpu_memory_mb[p], selector.uses_gpu_index and self.gpu_index[p])
                    if alike not in asked:
                        asked[alike] = selector.allows(facts, self.gpu_facts(p))
                    answers.append(asked[alike])
                found = tuple(answers)
            if len(_SELECTIONS) > 65536:  # kinds of node are few; bound it all the same
                _SELECTIONS.clear()
            _SELECTIONS[key] = found
        memo[(source, gpus)] = found
        return found

    def eligible_devices(self, task: TaskRequest) -> list[int]:
        """Positions of the devices whose model and memory suit the task."""
        return [i for i in range(len(self.gpu_free)) if self.suits(i, task)]

    def model_of(self, index: int) -> str | None:
        """The model of the device with this index; None if the node has no such device."""
        if self.only_model is not None:
            return self.only_model
        pos = self.position.get(index)
        return None if pos is None else self.gpu_model[pos]

    def whole_free_gpus(self, task: TaskRequest) -> int:
        return sum(1 for i in self.eligible_devices(task) if self.gpu_free[i] == MILLI)

    def hosts_cpu_and_memory(self, task: TaskRequest) -> bool:
        """Room for the task's CPU and memory on a node that takes work and suits it (a
        task with GPUs: its devices are checked by ``suits``)."""
        return (
            self.schedulable and not self.sealed
            and task.cpu_milli <= self.cpu_milli and task.memory_mb <= self.memory_mb
            and (not task.selector or self.admits(task))
        )

    @property
    def empty(self) -> bool:
        """Nothing holds any of it (what a whole-node task needs)."""
        return (
            not self.sealed and self.whole == len(self.gpu_free)
            and self.cpu_milli == self.cpu_total and self.memory_mb == self.memory_total
        )

    def pick_devices(self, task: TaskRequest) -> list[GpuShare] | None:
        """Choose devices for ``task`` on this node, or ``None`` if it does not fit.

        Whole GPUs take fully free devices, lowest index first (neighbours tend to share a
        PCIe switch). A fraction goes to the fullest shared device it still fits on, so
        that whole devices stay whole for whole-GPU jobs.
        """
        if not self.hosts_cpu_and_memory(task):
            return None
        if task.gpu_milli <= 0:
            return []
        devices = self.eligible_devices(task)
        if task.gpu_milli < MILLI:
            fits = [i for i in devices if self.gpu_free[i] >= task.gpu_milli]
            if not fits:
                return None
            best = min(fits, key=lambda i: (self.gpu_free[i], self.gpu_index[i]))
            return [GpuShare(self.gpu_index[best], task.gpu_milli)]
        wanted = task.gpu_milli // MILLI
        free = [i for i in devices if self.gpu_free[i] == MILLI]
        if len(free) < wanted:
            return None
        return [GpuShare(self.gpu_index[i], MILLI) for i in free[:wanted]]

    def take(self, placement: TaskPlacement) -> None:
        self._apply(placement, -1)

    def give_back(self, placement: TaskPlacement) -> None:
        self._apply(placement, +1)

    def _apply(self, placement: TaskPlacement, sign: int) -> None:
        self.version += 1
        if placement.whole_node:
            self.sealed -= sign
        self.cpu_milli += sign * placement.cpu_milli
        self.memory_mb += sign * placement.memory_mb
        for share in placement.gpus:
            pos = self.position[share.index]
            before = self.gpu_free[pos]
            after = before + sign * share.milli
            self.gpu_free[pos] = after
            self.gpu_sum += after - before
            self.whole += (after == MILLI) - (before == MILLI)


class Tentative:
    """Changes made while trying something, undone in reverse unless committed."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def record(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def discard(self) -> None:
        while self._undo:
            self._undo.pop()()

    def commit(self) -> None:
        self._undo.clear()

    def adopt(self, other: Tentative) -> None:
        """Make ``other``'s changes part of this one (undone with it)."""
        self._undo.extend(other._undo)
        other._undo = []

    def mark(self) -> int:
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        """Undo the changes made since ``mark``."""
        while len(self._undo) > mark:
            self._undo.pop()()


Entry = tuple[int, int, str]  # best-fit order: least free GPU, then least free CPU, then name
JOURNAL_KEPT = 1 << 16  # changes ``Capacity.journal`` holds at most


class Capacity:
    """Every schedulable node's free capacity, indexed by (family, GPU kind, whole free GPUs).

    The index keeps, per key, the nodes sorted in best-fit order, so that the best node for
    a task is found by looking at the head of a few lists instead of scanning every node.
    ``family_of`` sorts nodes into groups (the cell model's fresh / shared / sealed nodes)
    that callers can ask for separately.
    """

    def __init__(self, nodes: Iterable[FreeNode], family_of: Callable[[str], str] = lambda name: "",
                 journal_kept: int = JOURNAL_KEPT) -> None:
        self.nodes: dict[str, FreeNode] = {}
        self.family_of = family_of
        self._lists: dict[tuple[str, Klass, int], list[Entry]] = {}
        # (family, klass) -> the whole-free counts that have a non-empty list, kept sorted
        self._wholes: dict[tuple[str, Klass], list[int]] = {}
        self._filed: dict[str, tuple[tuple[str, Klass, int], Entry]] = {}
        self.rack_free: dict[str, int] = {}  # rack label -> free milli-GPU on its schedulable nodes
        self.mixed = False  # whether a node has GPUs of more than one model
        self._racks: dict[str, list[FreeNode]] = {}  # rack label -> its nodes (for ``candidates``)
        # Nodes changed since the index was last read, filed again only then (``_flush``).
        self._dirty: dict[str, FreeNode] = {}
        # Every node changed, once per change, in order: a scorer that keeps what it found
        # per node reads from here which nodes changed since it last looked. Positions are
        # counted from the capacity's start; the list keeps those from ``journal_start`` on.
        self.journal: list[FreeNode] = []
        self.journal_start = 0
        self.journal_kept = journal_kept  # changes it holds at most
        # (CPU, memory, expression) of a task without GPUs -> where it goes (``first_host``)
        self._hosts = Standings(Standing)
        for node in nodes:
            self.nodes[node.name] = node
            if node.rack:
                self._racks.setdefault(node.rack, []).append(node)
            self.mixed = self.mixed or (node.only_model is None and bool(node.gpu_index))
            if node.rack and node.schedulable:
                self.rack_free[node.rack] = self.rack_free.get(node.rack, 0) + node.gpu_sum
        for name in sorted(self.nodes):
            self._file(self.nodes[name])

    # --- the index ---------------------------------------------------------------------

    def _file(self, node: FreeNode) -> None:
        if not node.schedulable:
            return
        key = (self.family_of(node.name), node.klass, node.whole)
        entry = (node.gpu_sum, node.cpu_milli, node.name)
        entries = self._lists.get(key)
        if entries is None:
            entries = self._lists[key] = []
        if not entries:
            insort(self._wholes.setdefault(key[:2], []), key[2])
        insort(entries, entry)
        self._filed[node.name] = (key, entry)

    def _unfile(self, node: FreeNode) -> None:
        filed = self._filed.pop(node.name, None)
        if filed is None:
            return
        key, entry = filed
        entries = self._lists[key]
        del entries[bisect_left(entries, entry)]
        if not entries:
            wholes = self._wholes[key[:2]]
            del wholes[bisect_left(wholes, key[2])]

    def _flush(self) -> None:
        """File again the nodes changed since the index was last read (``_change``). Most
        changes are undone before then (a gang's tried tasks, a plan's probes, victims
        released and occupied again): those cost no re-sorting. The index is read only
        at the start of a query, never while a change is made, so it answers as if it
        had been kept sorted at every change."""
        dirty = self._dirty
        if not dirty:
            return
        filed_of = self._filed
        for node in dirty.values():
            filed = filed_of.get(node.name)
            if filed is None:
                continue  # not schedulable: not in the index
            key, entry = filed
            if entry[0] != node.gpu_sum or entry[1] != node.cpu_milli or key[2] != node.whole:
                self._unfile(node)
                self._file(node)
        dirty.clear()

    def refile(self, name: str) -> None:
        """Re-sort a node after something the index depends on (its family) changed."""
        node = self.nodes[name]
        self._unfile(node)
        self._file(node)

    def families(self) -> list[str]:
        self._flush()
        return sorted({family for family, _ in self._wholes})

    def free_gpu(self) -> int:
        """Free milli-GPU on schedulable nodes, all models together."""
        return sum(max(0, f) for n in self.nodes.values() if n.schedulable for f in n.gpu_free)

    def candidates(
        self,
        task: TaskRequest,
        families: Iterable[str] | None = None,
        extra: Iterable[FreeNode] = (),
        emptiest_first: bool = False,
        rack: str | None = None,
        ordered: bool = True,
    ) -> Iterator[FreeNode]:
        """Schedulable nodes that may fit ``task``'s GPUs, best fit first (lazily); without
        ``ordered``, the same nodes in the index's own order (no merge of its lists).

        ``families``: only nodes of these families (None: all); ``extra``: more nodes to
        merge in; ``emptiest_first``: the reverse order; ``rack``: only that rack's nodes
        (the same nodes in the same order as filtering all of them, found from the rack's
        own nodes: a gang tried rack by rack does not walk the whole cluster for each).
        Only GPU kinds that suit the task and nodes with enough whole free GPUs are
        visited; callers still check CPU, memory and which devices they may use.
        """
        self._flush()
        min_whole = task.gpu_milli // MILLI if task.gpu_milli >= MILLI else 0
        least_sum = task.gpu_milli if 0 < task.gpu_milli < MILLI else -(1 << 62)
        wanted = None if families is None else set(families)
        if rack is not None:
            yield from self._in_rack(task, rack, wanted, extra, emptiest_first, min_whole, least_sum)
            return
        streams: list[Iterator[Entry]] = []
        gpus = task.gpu_milli > 0
        any_gpu = gpus and not task.gpu_models and not task.gpu_memory_mb  # any node with GPUs suits
        for (family, klass), wholes in self._wholes.items():
            if wanted is not None and family not in wanted:
                continue
            if gpus and (not klass if any_gpu else not _klass_suits(klass, task)):
                continue
            for whole in wholes[bisect_left(wholes, min_whole) :]:
                entries = self._lists[(family, klass, whole)]
                start = bisect_left(entries, (least_sum,))
                if start < len(entries):
                    streams.append(_tail(entries, start, emptiest_first))
        more = sorted(
            (
                (n.gpu_sum, n.cpu_milli, n.name)
                for n in extra
                if n.schedulable and n.whole >= min_whole and n.gpu_sum >= least_sum
            ),
            reverse=emptiest_first,
        )
        if more:
            streams.append(iter(more))
        nodes = self.nodes
        if len(streams) == 1:
            merged: Iterable[Entry] = streams[0]
        elif not ordered:
            merged = chain.from_iterable(streams)
        else:
            merged = heapq.merge(*streams, reverse=emptiest_first)
        for _, _, name in merged:
            yield nodes[name]

    def offers(self, node: FreeNode, task: TaskRequest) -> bool:
        """Whether ``candidates(task)`` (every family, no rack, nothing extra) lists ``node``
        as it is now: the index's tests on one node."""
        if node.name not in self._filed:
            return False  # not schedulable
        gpu_milli = task.gpu_milli
        if gpu_milli <= 0:
            return True
        klass = node.klass
        if not task.gpu_models and not task.gpu_memory_mb:
            if not klass:
                return False
        elif not _klass_suits(klass, task):
            return False
        return node.whole >= gpu_milli // MILLI if gpu_milli >= MILLI else node.gpu_sum >= gpu_milli

    def changed_since(self, read: int) -> tuple[Iterable[FreeNode] | None, int]:
        """The nodes changed since the journal's absolute position ``read``, each once (None
        where the journal no longer reaches back there: any node may have changed), and the
        position now."""
        now = self.journal_start + len(self.journal)
        if read < self.journal_start:
            return None, now
        return {n.name: n for n in self.journal[read - self.journal_start :]}.values(), now

    def first_host(self, task: TaskRequest) -> FreeNode | None:
        """For a task without GPUs: the first node ``candidates(task)`` lists (every family,
        no rack) whose CPU and memory host it, found from the nodes changed since a task of
        its kind last asked (``Standing``) instead of walking the nodes in best-fit order."""
        standing = self._hosts.of_kind(self, (task.cpu_milli, task.memory_mb, task.selector))
        filed = self._filed

        def key_of(node: FreeNode) -> StandingKey | None:
            if node.name in filed and node.hosts_cpu_and_memory(task):
                return (node.gpu_sum, node.cpu_milli, node.name)
            return None

        best = standing.least(self, key_of)
        return None if best is None else self.nodes[best[-1]]  # type: ignore[index]

    def _in_rack(
        self, task: TaskRequest, rack: str, wanted: set[str] | None, extra: Iterable[FreeNode], backwards: bool,
        min_whole: int, least_sum: int,
    ) -> Iterator[FreeNode]:
        """``candidates`` of one rack: the index's tests on each of its nodes as filed, then
        in the order the merged lists give (entries are unique: sorting them is that order)."""
        found: list[Entry] = []
        for node in self._racks.get(rack, ()):
            filed = self._filed.get(node.name)
            if filed is None:
                continue  # not schedulable: not in the index
            (family, klass, whole), entry = filed
            if wanted is not None and family not in wanted:
                continue
            if task.gpu_milli > 0 and not _klass_suits(klass, task):
                continue
            if whole >= min_whole and entry[0] >= least_sum:
                found.append(entry)
        found.extend(
            (n.gpu_sum, n.cpu_milli, n.name)
            for n in extra
            if n.rack == rack and n.schedulable and n.whole >= min_whole and n.gpu_sum >= least_sum
        )
        found.sort(reverse=backwards)
        nodes = self.nodes
        for _, _, name in found:
            yield nodes[name]

    # --- changes -----------------------------------------------------------------------

    def take(self, placement: TaskPlacement, tentative: Tentative | None = None) -> None:
        self._change(placement, -1)
        if tentative is not None:
            tentative.record(partial(self._change, placement, +1))

    def give_back(self, placement: TaskPlacement, tentative: Tentative | None = None) -> None:
        self._change(placement, +1)
        if tentative is not None:
            tentative.record(partial(self._change, placement, -1))

    def _change(self, placement: TaskPlacement, sign: int) -> None:
        node = self.nodes.get(placement.node)
        if node is None:  # a running task on a node that has left the inventory
            return
        before = node.gpu_sum
        node._apply(placement, sign)
        if node.rack and node.schedulable:
            self.rack_free[node.rack] += node.gpu_sum - before
        self._dirty[node.name] = node  # filed again when the index is next read
        journal = self.journal
        journal.append(node)
        if len(journal) > self.journal_kept:  # a reader further behind looks at every node again
            self.journal_start += len(journal)
            journal.clear()


def _klass_suits(klass: Klass, task: TaskRequest) -> bool:
    return any(
        (not task.gpu_models or model in task.gpu_models) and memory >= task.gpu_memory_mb for model, memory in klass
    )


def _tail(entries: list[Entry], start: int, backwards: bool) -> Iterator[Entry]:
    if backwards:
        for i in range(len(entries) - 1, start - 1, -1):
            yield entries[i]
    else:
        for i in range(start, len(entries)):
            yield entries[i]
