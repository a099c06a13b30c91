"""Which fractional GPU shares sit on each device during a cycle, and who may join them.

A device shared by two jobs lets one read the other's memory, so a fractional share goes
only to a device whose other fractional shares belong to users its VC's rule, and theirs,
allow (``core.sharing``: the stricter rule of the two VCs applies). Whole-GPU shares never
meet another share, so only fractions are tracked.

``Sharing`` is part of the cycle's ``Ledger`` and changes with it: every allocation, hold,
release and undo goes through ``add``, so a tried placement, a reservation or a preemption
plan sees the devices as they would be. Jobs of the same user always may share, whatever
the rule: the simulator's pods, which have no user, share as they always did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainyard.core.resources import MILLI
from trainyard.core.sharing import GpuSharing
from trainyard.scheduler.capacity import FreeNode, Tentative
from trainyard.scheduler.snapshot import Snapshot, TaskPlacement, TaskRequest

Sharer = tuple[str, str]  # (user, VC) of a fractional share


@dataclass(frozen=True)
class Refusal:
    """Why a device is closed to a sharer: whose share is on it and the rule that keeps them apart."""

    node: str
    index: int
    other: Sharer
    vc: str  # the VC whose rule is the stricter (the asker's own on a tie)
    rule: GpuSharing


class Sharing:
    def __init__(self, snapshot: Snapshot) -> None:
        self.rules = {vc.name: vc.gpu_sharing for vc in snapshot.vcs}
        self.unlisted = snapshot.config.gpu_sharing
        # Every rule lets anyone share: nothing to track or check (the simulator's pods).
        self.open = self.unlisted is GpuSharing.ANYONE and all(r is GpuSharing.ANYONE for r in self.rules.values())
        self.groups = snapshot.user_groups
        # node -> device index -> sharer -> fractional shares it has there
        self.devices: dict[str, dict[int, dict[Sharer, int]]] = {}
        self._allows: dict[tuple[Sharer, Sharer], bool] = {}
        self._stricter: dict[tuple[str, str], GpuSharing] = {}  # (VC, VC) -> the rule between them
        # ``closed``'s answers, asked for every candidate node of every fractional task:
        # kept with the node's change count, so that only nodes changed since are worked out.
        self._changes: dict[str, int] = {}
        self._closed: dict[tuple[Sharer, str], tuple[int, tuple[int, ...]]] = {}

    def rule(self, vc: str) -> GpuSharing:
        return self.rules.get(vc, self.unlisted)

    def allows(self, a: Sharer, b: Sharer) -> bool:
        """Whether shares of ``a`` and ``b`` may sit on one device."""
        if a[0] == b[0]:
            return True
        key = (a, b)
        allowed = self._allows.get(key)
        if allowed is None:
            vcs = (a[1], b[1])
            rule = self._stricter.get(vcs)  # VCs are few, pairs of sharers many
            if rule is None:
                rule = self._stricter[vcs] = self.rule(a[1]).stricter(self.rule(b[1]))
            if rule is GpuSharing.ANYONE:
                allowed = True
            elif rule is GpuSharing.SAME_GROUP:
                allowed = bool(self.groups.get(a[0], frozenset()) & self.groups.get(b[0], frozenset()))
            else:
                allowed = False
            self._allows[key] = allowed
        return allowed

    def add(self, sharer: Sharer, placements: Iterable[TaskPlacement], sign: int, tentative: Tentative | None) -> None:
        """Count (``sign`` +1) or uncount (-1) the placements' fractional shares as ``sharer``'s."""
        if self.open:
            return
        changed = [(p.node, s.index) for p in placements for s in p.gpus if 0 < s.milli < MILLI]
        if not changed:
            return
        for node, index in changed:
            self._change(sharer, node, index, sign)
        if tentative is not None:

            def undo() -> None:
                for node, index in changed:
                    self._change(sharer, node, index, -sign)

            tentative.record(undo)

    def _change(self, sharer: Sharer, node: str, index: int, sign: int) -> None:
        self._changes[node] = self._changes.get(node, 0) + 1
        on_node = self.devices.setdefault(node, {})
        counts = on_node.setdefault(index, {})
        count = counts.get(sharer, 0) + sign
        if count:
            counts[sharer] = count
        else:
            del counts[sharer]
            if not counts:
                del on_node[index]
                if not on_node:
                    del self.devices[node]

    def closed(self, sharer: Sharer, node: FreeNode) -> tuple[int, ...]:
        """Positions of ``node``'s devices that hold a share ``sharer`` may not sit beside."""
        on_node = self.devices.get(node.name)
        if not on_node:
            return ()
        changes = self._changes[node.name]
        known = self._closed.get((sharer, node.name))
        if known is not None and known[0] == changes:
            return known[1]
        positions = []
        for index, counts in on_node.items():
            pos = node.position.get(index)
            if pos is not None:
                for other, n in counts.items():
                    if n > 0 and not self.allows(sharer, other):
                        positions.append(pos)
                        break
        positions.sort()
        closed = tuple(positions)
        self._closed[(sharer, node.name)] = (changes, closed)
        return closed

    def refusal(self, sharer: Sharer, node: str, index: int) -> Refusal | None:
        """Why ``sharer`` may not join the shares on the device, or None if it may."""
        counts = self.devices.get(node, {}).get(index, {})
        others = sorted(o for o, n in counts.items() if n > 0 and not self.allows(sharer, o))
        if not others:
            return None
        other = others[0]
        mine, theirs = self.rule(sharer[1]), self.rule(other[1])
        vc, rule = (sharer[1], mine) if mine.stricter(theirs) is mine else (other[1], theirs)
        return Refusal(node, index, other, vc, rule)


def closing_rule(
    sharing: Sharing, sharer: Sharer, task: TaskRequest, nodes: Mapping[str, FreeNode], unshared_room: bool,
    roomy: Sequence[tuple[str, int]] | None = None,
) -> Refusal | None:
    """Why a fractional ``task`` of ``sharer`` has nowhere to go when the only devices with
    room for it hold shares a VC's rule keeps it from; None if that is not what stops it.
    ``unshared_room``: whether a device without fractional shares has room for it
    (``has_unshared_room``, the same for every sharer); ``nodes`` by name; ``roomy``: the
    shared devices with room for it (``roomy_shared``, the same for every sharer), if known.
    Devices with shares are few: only they are looked at here."""
    if unshared_room:
        return None
    first: tuple[str, int] | None = None
    for name, index in roomy_shared(sharing, task, nodes) if roomy is None else roomy:
        counts = sharing.devices[name][index]
        if all(n <= 0 or sharing.allows(sharer, other) for other, n in counts.items()):
            return None  # a shared device it may join has room
        if first is None:
            first = (name, index)
    return None if first is None else sharing.refusal(sharer, *first)


def roomy_shared(sharing: Sharing, task: TaskRequest, nodes: Mapping[str, FreeNode]) -> list[tuple[str, int]]:
    """(node, device index) of the devices with fractional shares and room for ``task``, in
    that order: where ``closing_rule`` looks for one a sharer may join."""
    found = []
    for name in sorted(sharing.devices):
        node = nodes.get(name)
        if node is None or not node.schedulable or not node.hosts_cpu_and_memory(task):
            continue
        for index in sorted(sharing.devices[name]):
            pos = node.position.get(index)
            if pos is None or not node.suits(pos, task) or node.gpu_free[pos] < task.gpu_milli:
                continue
            found.append((name, index))
    return found


def has_unshared_room(sharing: Sharing, task: TaskRequest, nodes: Sequence[FreeNode]) -> bool:
    """Whether some device without fractional shares has room for ``task`` (which no
    sharing rule can close)."""
    for node in nodes:
        if not node.schedulable or not node.hosts_cpu_and_memory(task) or node.gpu_sum < task.gpu_milli:
            continue
        shared = sharing.devices.get(node.name, {})
        if any(
            node.gpu_free[p] >= task.gpu_milli and node.gpu_index[p] not in shared and node.suits(p, task)
            for p in range(len(node.gpu_free))
        ):
            return True
    return False
