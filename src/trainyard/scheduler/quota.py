"""VC quotas and per-user quotas: how many GPUs a job's VC and user may still take.

Guaranteed jobs (ranks 0..2: prod, normal, low) count against their VC's quota for the
GPU model they run on; opportunistic jobs (rank 3) count against no VC quota. Per-user
quotas (HAI Platform) count every rank, each against the limit set for that rank. All
amounts are milli-GPU, so a 0.25-GPU task uses 250 of a quota of whole GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from trainyard.core.priorities import OPPORTUNISTIC_RANK
from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode, Tentative
from trainyard.scheduler.snapshot import PendingJob, Snapshot, TaskPlacement

IMPLICIT_VC = "default"


@dataclass(frozen=True)
class VcPolicy:
    name: str
    quota: Mapping[str, int] | None  # None: no limit (the implicit VC of a snapshot without ``vcs``)
    allow_priority_preemption: bool

    @property
    def limited(self) -> bool:
        return self.quota is not None


@dataclass(frozen=True)
class Owner:
    """Whose quotas a placement counts against."""

    vc: str
    user: str
    rank: int

    @property
    def guaranteed(self) -> bool:
        return self.rank < OPPORTUNISTIC_RANK


@dataclass(frozen=True)
class Refusal:
    """Why admission said no, with the numbers the message is made of."""

    kind: str  # "unknown_vc" | "no_model" | "vc" | "user"
    need: int = 0
    free: int = 0
    total: int = 0
    models: tuple[str, ...] = ()


def job_owner(job: PendingJob) -> Owner:
    return Owner(job.vc, job.user, job.priority_rank)


def gpu_need(job: PendingJob) -> int:
    return sum(t.gpu_milli for t in job.tasks)


class Quotas:
    """What each VC (per model) and each user (per rank) may still take in this cycle."""

    def __init__(self, snapshot: Snapshot, nodes: Mapping[str, FreeNode]) -> None:
        self.nodes = nodes  # the ledger's, by name: which model each device is
        if snapshot.vcs:
            self.vcs = {
                vc.name: VcPolicy(vc.name, dict(vc.quota), vc.allow_priority_preemption)
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
        # Without user limits or VC quotas there is nothing to count (a cluster with no
        # VCs, as most simulations are): every charge and refund is then skipped.
        self._counting = bool(self.user_limit or self.free)
        for job in sorted(snapshot.running, key=lambda j: j.job_id):
            owner = Owner(job.vc, job.user, job.priority_rank)
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

    def admit(self, job: PendingJob) -> Refusal | None:
        """Whether the job's VC and user have quota left for all of it; not the placement."""
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
            tentative.record(lambda: self._apply(owner, placement, +1))

    def refund(self, owner: Owner, placement: TaskPlacement, tentative: Tentative | None = None) -> None:
        self._apply(owner, placement, +1)
        if tentative is not None and self._counting:
            tentative.record(lambda: self._apply(owner, placement, -1))

    def _apply(self, owner: Owner, placement: TaskPlacement, sign: int) -> None:
        # Called for every charge and refund a cycle tries (preemption plans try thousands):
        # written for speed, the arithmetic is the plain one.
        if not self._counting or not placement.gpus:
            return
        milli = 0
        for share in placement.gpus:
            milli += share.milli
        if not milli:
            return
        self.user_used[(owner.user, owner.rank)] -= sign * milli
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


def _models_of(job: PendingJob) -> tuple[str, ...]:
    """The GPU models a job may use: () for any, else the union of its tasks' lists."""
    gpu_tasks = [t for t in job.tasks if t.gpu_milli > 0]
    if any(not t.gpu_models for t in gpu_tasks):
        return ()
    return tuple(sorted({m for t in gpu_tasks for m in t.gpu_models}))
