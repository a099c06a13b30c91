"""VC quotas, borrowing and per-user quotas: how many GPUs a job's VC and user may still take.

Guaranteed jobs (ranks 0..2: prod, normal, low) count against their VC's quota for the
GPU model they run on; opportunistic jobs (rank 3) count against no VC quota. A
guaranteed job over its VC's quota may run as *borrowed* work (``Owner.borrowed``): it
counts against no quota either, but against what may be borrowed (``borrow_free``: its
VC's borrowing limit, and the other VCs' unused quota they lend). Per-user quotas (HAI
Platform) count every rank, each against the limit set for that rank. All amounts are
milli-GPU, so a 0.25-GPU task uses 250 of a quota of whole GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from trainyard.core.priorities import OPPORTUNISTIC_RANK
from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode, Tentative
from trainyard.scheduler.snapshot import PendingJob, RunningJob, Snapshot, TaskPlacement

IMPLICIT_VC = "default"


@dataclass(frozen=True)
class VcPolicy:
    name: str
    quota: Mapping[str, int] | None  # None: no limit (the implicit VC of a snapshot without ``vcs``)
    allow_priority_preemption: bool
    borrow_limit: int | None = None  # whole GPUs per model (``VirtualCluster``)
    lend_limit: int | None = None
    weight: float = 1.0

    @property
    def limited(self) -> bool:
        return self.quota is not None


@dataclass(frozen=True)
class Owner:
    """Whose quotas a placement counts against."""

    vc: str
    user: str
    rank: int
    borrowed: bool = False  # a guaranteed rank run over its VC's quota (``borrowing``)
    extra: bool = False  # an elastic job's worker beyond its minimum (``elastic``): counts against nothing

    @property
    def guaranteed(self) -> bool:
        """Within its VC's guarantee: holds quota and cells."""
        return self.rank < OPPORTUNISTIC_RANK and not self.borrowed and not self.extra


@dataclass(frozen=True)
class Refusal:
    """Why admission said no, with the numbers the message is made of."""

    # "unknown_vc" | "no_model" | "vc" | "user"; borrowing: "borrow_limit" (its VC's own
    # limit), "lend_limit" (what other VCs lend), "nothing_idle" (their quota is in use)
    kind: str
    need: int = 0
    free: int = 0
    total: int = 0
    models: tuple[str, ...] = ()


# Owners by (VC, user, rank, borrowed), shared: a cycle asks for a job's owner at every
# placement it tries, and a frozen dataclass costs more to build than a lookup.
_OWNERS: dict[tuple[str, str, int, bool, bool], Owner] = {}


def job_owner(job: PendingJob) -> Owner:
    key = (job.vc, job.user, job.priority_rank, job.borrowing, job.extra)
    owner = _OWNERS.get(key)
    if owner is None:
        if len(_OWNERS) > 65536:  # users and VCs are few; bound it all the same
            _OWNERS.clear()
        owner = _OWNERS[key] = Owner(*key)
    return owner


def running_owner(job: RunningJob) -> Owner:
    return Owner(job.vc, job.user, job.priority_rank, job.borrowed, job.extra)


def gpu_need(job: PendingJob) -> int:
    return sum(t.gpu_milli for t in job.tasks)


class Quotas:
    """What each VC (per model) and each user (per rank) may still take in this cycle."""

    def __init__(self, snapshot: Snapshot, nodes: Mapping[str, FreeNode]) -> None:
        self.nodes = nodes  # the ledger's, by name: which model each device is
        if snapshot.vcs:
            self.vcs = {
                vc.name: VcPolicy(
                    vc.name, dict(vc.quota), vc.allow_priority_preemption, vc.borrow_limit, vc.lend_limit,
                    vc.weight,
                )
                for vc in sorted(snapshot.vcs, key=lambda v: v.name)
            }
            self.implicit: VcPolicy | None = None
        else:
            # Without VCs, every job shares one pool with no limits, and within it a higher
            # priority may preempt a lower one, as in any VC by default (``VirtualCluster``;
            # ``yard vc list`` shows ``default`` so).
            self.vcs = {}
            self.implicit = VcPolicy(IMPLICIT_VC, None, True)
        self.free: dict[tuple[str, str], int] = {}
        for vc in self.vcs.values():
            for model, gpus in sorted((vc.quota or {}).items()):
                self.free[(vc.name, model)] = gpus * MILLI
        self.user_limit = dict(snapshot.user_quotas)
        self.user_used: dict[tuple[str, int], int] = defaultdict(int)
        # Borrowed work's GPUs (milli) by (VC, model), and by model over every VC.
        self.borrowed: dict[tuple[str, str], int] = defaultdict(int)
        self.borrowed_total: dict[str, int] = defaultdict(int)
        # GPUs per model that no VC guarantees (a snapshot whose VCs do not cover the
        # cluster; the live one's ``default`` VC always does): anyone may borrow them.
        self.unpromised: dict[str, int] = {}
        if self.vcs:
            capacity: dict[str, int] = defaultdict(int)
            for node in nodes.values():
                for model in node.gpu_model:
                    capacity[model] += MILLI
            for model, milli in capacity.items():
                promised = sum((vc.quota or {}).get(model, 0) for vc in self.vcs.values()) * MILLI
                self.unpromised[model] = max(0, milli - promised)
        # Without user limits or VC quotas there is nothing to count (a cluster with no
        # VCs, as most simulations are): every charge and refund is then skipped.
        self._counting = bool(self.user_limit or self.free or self.vcs)
        self.borrowing = snapshot.config.borrowing
        for job in sorted(snapshot.running, key=lambda j: j.job_id):
            owner = running_owner(job)
            for p in job.placements:
                self._apply(owner, p, -1)

    def policy(self, vc: str) -> VcPolicy | None:
        """The VC's policy; ``None`` for a VC the snapshot does not know."""
        return self.implicit if self.implicit is not None else self.vcs.get(vc)

    def quota_models(self, vc: str, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
        """Models the VC's guaranteed jobs may use, narrowed to ``allowed``; None: any."""
        policy = self.policy(vc)
        if policy is None or policy.quota is None:
            return None
        return tuple(m for m in sorted(policy.quota) if policy.quota[m] > 0 and (not allowed or m in allowed))

    def free_of(self, vc: str, model: str) -> int | None:
        """Free quota in milli-GPU; None when the VC has no limit."""
        policy = self.policy(vc)
        if policy is None or policy.quota is None:
            return None
        return self.free.get((vc, model), 0)

    def lendable(self, model: str) -> int:
        """Milli-GPU of ``model`` that borrowed work may hold in all: every VC's unused
        quota up to its lending limit, and what no VC guarantees."""
        total = self.unpromised.get(model, 0)
        for vc in self.vcs.values():
            unused = max(0, self.free.get((vc.name, model), 0))
            if vc.lend_limit is not None:
                unused = min(unused, vc.lend_limit * MILLI)
            total += unused
        return total

    def borrow_free(self, vc: str, model: str) -> int:
        """Milli-GPU of ``model`` the VC's jobs may still borrow: what is lent and not yet
        borrowed, within its own borrowing limit."""
        room = self.lendable(model) - self.borrowed_total[model]
        policy = self.vcs.get(vc)
        if policy is not None and policy.borrow_limit is not None:
            room = min(room, policy.borrow_limit * MILLI - self.borrowed[(vc, model)])
        return max(0, room)

    def borrowed_by(self, vc: str) -> int:
        """Milli-GPU the VC's borrowed work holds, every model together."""
        return sum(milli for (name, _), milli in self.borrowed.items() if name == vc)

    def may_borrow(self, job: PendingJob) -> bool:
        """Whether the job could ever be tried as borrowed work: a guaranteed rank, in a
        known VC with a quota (the implicit VC has no limit to go over), borrowing on."""
        policy = self.vcs.get(job.vc)
        return (
            self.borrowing and job.priority_rank < OPPORTUNISTIC_RANK and policy is not None
            and policy.borrow_limit != 0 and gpu_need(job) > 0
        )

    def _admit_borrowed(self, job: PendingJob, need: int) -> Refusal | None:
        models = tuple(sorted(m for m in self.unpromised if m in _models_of(job) or not _models_of(job)))
        room = sum(self.borrow_free(job.vc, m) for m in models)
        if need <= room:
            return None
        # Why not: its VC's own limit, or what the others lend (or nothing idle at all).
        lent = sum(max(0, self.lendable(m) - self.borrowed_total[m]) for m in models)
        policy = self.vcs.get(job.vc)
        if need <= lent and policy is not None and policy.borrow_limit is not None:
            return Refusal("borrow_limit", need, max(0, room), policy.borrow_limit * MILLI, models)
        unlimited = sum(
            self.unpromised.get(m, 0) + sum(max(0, self.free.get((vc, m), 0)) for vc in self.vcs)
            - self.borrowed_total[m]
            for m in models
        )
        if need <= unlimited:
            return Refusal("lend_limit", need, max(0, lent), 0, models)
        pool = sum(self.lendable(m) for m in models)  # lent in all, borrowed or not
        return Refusal("nothing_idle", need, max(0, lent), pool, models)

    def admit(self, job: PendingJob) -> Refusal | None:
        """Whether the job's VC and user have quota left for all of it; not the placement.
        A job tried as borrowed work (``PendingJob.borrowing``) needs what may be borrowed
        instead of its VC's quota."""
        policy = self.policy(job.vc)
        if policy is None:
            return Refusal("unknown_vc")
        need = gpu_need(job)
        owner = job_owner(job)
        # The user's own limit first: no preemption within the VC can lift it.
        limit = self.user_limit.get((job.user, job.priority_rank))
        if limit is not None and need > 0:
            used = self.user_used[(job.user, job.priority_rank)]
            if used + need > limit:
                return Refusal("user", need, max(0, limit - used), limit)
        if owner.borrowed:
            return self._admit_borrowed(job, need) if need > 0 else None
        if owner.guaranteed and policy.quota is not None and need > 0:
            allowed = _models_of(job)
            models = self.quota_models(job.vc, allowed)
            assert models is not None
            if not models:
                return Refusal("no_model", need, models=allowed)
            free = sum(max(0, self.free[(job.vc, m)]) for m in models)
            total = sum(policy.quota[m] * MILLI for m in models)
            if need > free:
                return Refusal("vc", need, free, total, models)
        return None

    def charge(self, owner: Owner, placement: TaskPlacement, tentative: Tentative | None = None) -> None:
        self._apply(owner, placement, -1)
        if tentative is not None and self._counting:
            tentative.record(partial(self._apply, owner, placement, +1))

    def refund(self, owner: Owner, placement: TaskPlacement, tentative: Tentative | None = None) -> None:
        self._apply(owner, placement, +1)
        if tentative is not None and self._counting:
            tentative.record(partial(self._apply, owner, placement, -1))

    def _apply(self, owner: Owner, placement: TaskPlacement, sign: int) -> None:
        # Called for every charge and refund a cycle tries (preemption plans try thousands):
        # written for speed, the arithmetic is the plain one.
        if not self._counting or not placement.gpus or owner.extra:
            return
        milli = 0
        for share in placement.gpus:
            milli += share.milli
        if not milli:
            return
        self.user_used[(owner.user, owner.rank)] -= sign * milli
        if owner.borrowed:
            for share in placement.gpus:
                model = self._model(placement.node, share.index)
                if model is not None:
                    self.borrowed[(owner.vc, model)] -= sign * share.milli
                    self.borrowed_total[model] -= sign * share.milli
            return
        if owner.rank >= OPPORTUNISTIC_RANK:  # not guaranteed: no VC quota
            return
        policy = self.implicit if self.implicit is not None else self.vcs.get(owner.vc)
        if policy is None or policy.quota is None:
            return
        node = self.nodes.get(placement.node)
        if node is None:  # a running task on a node that has left the inventory
            return
        free, vc = self.free, owner.vc
        if node.only_model is not None:  # most nodes: one model, one sum
            key = (vc, node.only_model)
            if key in free:
                free[key] += sign * milli
            return
        for share in placement.gpus:
            pos = node.position.get(share.index)
            if pos is not None and (vc, node.gpu_model[pos]) in free:
                free[(vc, node.gpu_model[pos])] += sign * share.milli


    def _model(self, node_name: str, index: int) -> str | None:
        node = self.nodes.get(node_name)
        return None if node is None else node.model_of(index)


def _models_of(job: PendingJob) -> tuple[str, ...]:
    """The GPU models a job may use: () for any, else the union of its tasks' lists."""
    gpu_tasks = [t for t in job.tasks if t.gpu_milli > 0]
    if any(not t.gpu_models for t in gpu_tasks):
        return ()
    return tuple(sorted({m for t in gpu_tasks for m in t.gpu_models}))
