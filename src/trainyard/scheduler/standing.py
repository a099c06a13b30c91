"""What a scorer keeps per kind of task from one task to the next: every node's key or
rating, worked out again only for the nodes changed since (``Capacity.changed_since``, from
the capacity's journal of changes). A cycle, or a simulator's run, asks the same few kinds
of task again and again while each placement changes one node: what a walk over every
node would find is then found from the few nodes changed since the kind was last asked.
Each answers exactly as that walk does, over the nodes ``Capacity.candidates`` lists
(tests/scheduler/test_capacity_index.py compares them)."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from trainyard.scheduler.capacity import Capacity, FreeNode

Kept = TypeVar("Kept")
# Node keys a ``Standings`` keeps at most (one per node and kind: a kind asked again after
# it was forgotten costs a walk over every node). openb's pod lists ask for 126-366 kinds of
# task; on its 1,213 nodes this keeps the 216 latest, which take 94-99 % of the pods.
KEPT_KEYS = 1 << 18
LEAST_KINDS = 16
Entry = tuple[int, int, str]  # best-fit order (``Capacity``'s): least free GPU, then least free CPU, then name


StandingKey = tuple[object, ...]  # a node's place in a ``Standing``: least first, its name last


class Standing:
    """Every node's key for one question (a kind of task under one scorer): the node that
    answers it best is the one of least key, and a node's key depends on its free capacity
    alone. Kept from the capacity's journal: a question asked again works out the keys of
    the nodes changed since it was last asked, not of every node; the least key is the top
    of a heap whose entries a node has since left are dropped as they come up."""

    __slots__ = ("read", "keys", "heap", "kept")

    def __init__(self) -> None:
        self.read = -1  # the absolute position in the capacity's journal read up to
        self.keys: dict[str, StandingKey] = {}  # node name -> its key now (absent: it does not answer)
        self.heap: list[StandingKey] = []
        self.kept: dict[str, Any] = {}  # node name -> what the asker keeps with its key

    def least(self, capacity: Capacity, key_of: Callable[[FreeNode], StandingKey | None]) -> StandingKey | None:
        """The least key of ``capacity``'s nodes now (None: no node answers), ``key_of``
        giving a node's key (None: it does not answer). Every call must pass the same
        capacity and the same ``key_of``."""
        keys, heap = self.keys, self.heap
        changed, self.read = capacity.changed_since(self.read)
        fresh = changed is None
        if changed is None:  # first asked, or further behind than the journal keeps
            keys.clear()
            heap.clear()
            changed = capacity.nodes.values()
        for node in changed:
            key = key_of(node)
            name = node.name
            if key != keys.get(name):
                if key is None:
                    del keys[name]
                else:
                    keys[name] = key
                    if fresh:
                        heap.append(key)
                    else:
                        heapq.heappush(heap, key)
        if not fresh and len(heap) > 2 * len(keys) + 64:  # mostly left behind: made again
            heap[:] = keys.values()
            fresh = True
        if fresh:
            heapq.heapify(heap)
        while heap:
            top = heap[0]
            if keys.get(top[-1]) == top:  # type: ignore[call-overload]
                return top
            heapq.heappop(heap)
        return None


class Standings(Generic[Kept]):
    """What is kept (a ``Standing``, ``Bands``) of the kinds asked most recently, for one
    capacity at a time (asked of another, it forgets them): as many kinds as ``KEPT_KEYS``
    keys of its nodes allow, at least ``LEAST_KINDS``."""

    def __init__(self, make: Callable[[], Kept]) -> None:
        self.make = make
        self._of: Capacity | None = None
        self._kinds: dict[tuple[object, ...], Kept] = {}  # least recently asked first

    def of_kind(self, capacity: Capacity, kind: tuple[object, ...]) -> Kept:
        kinds = self._kinds
        if self._of is not capacity:
            kinds.clear()
            self._of = capacity
        standing = kinds.pop(kind, None)
        if standing is None:
            standing = self.make()
            if len(kinds) >= max(LEAST_KINDS, KEPT_KEYS // max(1, len(capacity.nodes))):
                del kinds[next(iter(kinds))]
        kinds[kind] = standing
        return standing


class Bands:
    """Every node's rating for one kind of task (a function of its free capacity), and per
    rating the nodes in best-fit order: what a draw among the best rated reads."""

    __slots__ = ("read", "rated", "bands")

    def __init__(self) -> None:
        self.read = -1  # the absolute position in the capacity's journal read up to
        self.rated: dict[str, tuple[float, Entry]] = {}  # node name -> its rating and place now
        self.bands: dict[float, list[Entry]] = {}  # rating -> its nodes, best fit first

    def best(self, capacity: Capacity, rate: Callable[[FreeNode], float | None]) -> list[Entry] | None:
        """The nodes of the highest rating now, best fit first (None: no node is rated);
        ``rate`` giving a node's rating (None: not rated). Every call must pass the same
        capacity and the same ``rate``."""
        rated, bands = self.rated, self.bands
        changed, self.read = capacity.changed_since(self.read)
        if changed is None:
            rated.clear()
            bands.clear()
            changed = capacity.nodes.values()
        for node in changed:
            name = node.name
            rating = rate(node)
            now = None if rating is None else (rating, (node.gpu_sum, node.cpu_milli, name))
            before = rated.get(name)
            if now == before:
                continue
            if before is not None:
                band = bands[before[0]]
                del band[bisect_left(band, before[1])]
                if not band:
                    del bands[before[0]]
            if now is None:
                del rated[name]
            else:
                rated[name] = now
                insort(bands.setdefault(now[0], []), now[1])
        return bands[max(bands)] if bands else None
