"""FGD that also counts the GPUs a node strands for want of CPU, topology-aware: the default.

``fgd-cpu`` is Trainyard's one default placement (``snapshot.DEFAULT_SCORER``): the live
controller's ``scheduler_scorer`` and the simulator's ``--policy default`` both run it. It
was FGD's cost made better on the openb trace; it became the one default once it was fast
enough for the controller's cycle and kept ``topology``'s rules, so that no cluster has to
choose between packing and topology:

* **gangs** (two or more tasks) are placed exactly as ``Topology`` places them: on nodes the
  gang already uses, else on one that can hold the rest of it, a multi-node gang first
  inside one rack. Fragmentation is measured per task and cannot see what keeps a gang's
  collectives fast;
* **a multi-GPU task** takes its GPUs from one topology group when a node can give that:
  nodes are ranked by the fewest groups the task would span, then by cost (on a node of
  one GPU kind, which whole devices a task takes does not change the fragmentation).

Replaying the Alibaba openb trace (``yard sim placement``) showed where FGD loses GPUs once
a cluster fills: on nodes whose CPUs are gone while GPUs are still free, in whole GPUs taken
by shared tasks that whole-GPU tasks then miss, and — where the workload asks more CPU than
the cluster has — in CPU left in pieces no task can use. Three changes to FGD's cost
address them; everything else (the fragmentation measure, device choice, scan) is FGD's:

* **CPU stranding**: with the GPU tasks' CPU per GPU ``r``, a node left with free CPU below
  ``r`` × its free GPU strands the difference (FGD sees CPU only as a yes/no per task
  kind). The cost adds the *change* in the node's stranded milli-GPUs plus twice what it
  leaves stranded: the change rewards putting a task that needs little CPU on a node short
  of CPU, the level keeps nodes from being drained of CPU (the change alone lost on
  ``cpu300``, the level alone on ``gpushare40/60``). Where tasks limited to GPU models are
  a real share of the GPU tasks (``LIMITED_SHARE``), only the level counts, one for one
  (the change hurt ``gpuspec10/20/25``; on ``gpuspec05``, 5 % limited, it wins);
* the target workload weighs each GPU kind by its count × √(its GPU request), so the
  whole-GPU kinds, which fail first when the cluster fills, count more when judging which
  free GPUs are fragments. Where model-limited tasks are a real share, FGD's weighting by
  count is what keeps scarce models for the tasks that need them, and reweighting
  measurably hurt (the ``gpuspec`` pod lists), so it is kept there;
* **CPU fragments, where CPU runs out first**: when the workload, CPU-only tasks included,
  asks clearly more CPU per GPU than the cluster has (``cpu_bound``), every pod is placed
  until CPU is gone, and what is left then decides the allocation: CPU in pieces no task
  can use is lost GPU work. ``CpuFragments`` is FGD's measure turned to CPU — the free CPU
  of a node each kind of task (CPU-only ones too) could not use — and its growth, counted
  at the cluster's CPU per GPU, is added to the cost (``cpu300``: +0.6 pp over FGD). Where
  GPUs run out as soon as CPUs (``cpu235``) it is not costed: there it lost 1.1 pp.

CPU-only tasks go first fit (fewest free GPUs, then least CPU), as in FGD; every other
place tried for them on ``cpu300`` (least stranding, least CPU fragments) lost.

Speed comes from ``Fgd``'s search (answers cached by node state; under quota or cell rules
those answers bound the exact ones, so few nodes are fitted exactly — with CPU fragments
costed the bound is approximate: they depend on which device a shared task takes, and a
rule may take the device the answer without rules chose). Measured on openb's
pod lists and on ``bench_scheduler.py``: docs/benchmarks.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter
from trainyard.scheduler.scorers.fgd import Answer, Fgd, Fixed, FragmentKey, Rank, pending_mix
from trainyard.scheduler.scorers.topology import Topology, select_grouped
from trainyard.scheduler.snapshot import GpuShare, PendingJob, Snapshot, TaskRequest, WorkloadClass

STRANDED_WEIGHT = 1.0  # cost per milli-GPU stranded for want of CPU (kinds limited to models)
STRANDED_LEVEL_WEIGHT = 2.0  # without model limits: cost per milli-GPU stranded after, besides the change
# GPU tasks limited to GPU models below this share of the GPU tasks: costed as if unlimited.
# Measured between openb's gpuspec05 (5.2 %: the unlimited cost wins by 0.35 pp) and
# gpuspec10 (10.4 %: it loses by 0.6 pp).
LIMITED_SHARE = 0.075
# When CPU runs out first: cost per milli-GPU's worth of CPU (at the cluster's CPU per GPU)
# that the placement adds to the node's CPU fragments.
CPU_FRAGMENT_WEIGHT = 4.0
# CPU runs out first when the workload asks this much more CPU per GPU than the cluster has.
# openb's cpu300 asks 1.14 times the cluster's (CPU fragments costed: +0.6 pp); cpu235 asks
# 0.998 times, and costing CPU fragments there loses 1.1 pp: GPUs run out as soon as CPUs.
CPU_BOUND_MARGIN = 1.05


def demand_weighted(workload: Sequence[WorkloadClass], limited: bool) -> tuple[WorkloadClass, ...]:
    """The GPU kinds, each weighed by its count × √(its GPU request in GPUs) unless
    ``limited`` (then by count alone: FGD's weights)."""
    gpu_kinds = tuple(w for w in workload if w.gpu_milli > 0 and w.weight > 0)
    if limited:
        return gpu_kinds
    return tuple(
        WorkloadClass(w.gpu_milli, w.weight * math.sqrt(w.gpu_milli / 1000), w.cpu_milli, w.memory_mb, w.gpu_models)
        for w in gpu_kinds
    )


def model_limited(workload: Sequence[WorkloadClass]) -> bool:
    """Whether GPU tasks limited to GPU models are at least ``LIMITED_SHARE`` of the GPU tasks."""
    gpu = sum(w.weight for w in workload if w.gpu_milli > 0 and w.weight > 0)
    limited = sum(w.weight for w in workload if w.gpu_milli > 0 and w.weight > 0 and w.gpu_models)
    return gpu > 0 and limited >= LIMITED_SHARE * gpu


def cpu_per_gpu(kinds: Iterable[tuple[float, int, int]]) -> float:
    """Milli-CPU per milli-GPU asked by ``(count, gpu_milli, cpu_milli)`` kinds, CPU-only ones
    included (0 if no GPU is asked)."""
    gpu = cpu = 0.0
    for count, gpu_milli, cpu_milli in kinds:
        gpu += count * gpu_milli
        cpu += count * cpu_milli
    return cpu / gpu if gpu > 0 else 0.0


def cpu_bound(demand_cpu_per_gpu: float, cluster_cpu_per_gpu: float) -> bool:
    """Whether the work asks clearly more CPU per GPU than the cluster has: then CPU, not
    GPU, is what runs out first."""
    return cluster_cpu_per_gpu > 0 and demand_cpu_per_gpu > CPU_BOUND_MARGIN * cluster_cpu_per_gpu


class FgdCpu(Fgd):
    def __init__(
        self,
        workload: Sequence[WorkloadClass],
        cluster_cpu_per_gpu: float = 0.0,
        demand_cpu_per_gpu: float | None = None,
    ) -> None:
        """``cluster_cpu_per_gpu``: the milli-CPU per milli-GPU of the nodes that take work
        (0: unknown, CPU fragments are then not costed); ``demand_cpu_per_gpu``: what the
        work asks, if known more exactly than from ``workload``."""
        self.limited = model_limited(workload)
        super().__init__(demand_weighted(workload, self.limited))
        gpu = sum(w.gpu_milli * p for w, p in self.classes)
        cpu = sum(w.cpu_milli * p for w, p in self.classes)
        self.cpu_per_gpu = cpu / gpu if gpu else 0.0  # milli-CPU per milli-GPU, GPU tasks
        self.topology = Topology()
        self.cluster_cpu_per_gpu = cluster_cpu_per_gpu
        if demand_cpu_per_gpu is None:
            demand_cpu_per_gpu = cpu_per_gpu((w.weight, w.gpu_milli, w.cpu_milli) for w in workload if w.weight > 0)
        bound = cpu_bound(demand_cpu_per_gpu, cluster_cpu_per_gpu)
        self.cpu_fragments = CpuFragments(workload) if bound and self.classes else None

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot) -> FgdCpu:
        taking = [n for n in snapshot.nodes if n.schedulable]
        gpus = sum(len(n.gpus) for n in taking)
        cluster = sum(n.cpu_milli for n in taking) / (gpus * MILLI) if gpus else 0.0
        if snapshot.config.workload:
            return cls(snapshot.config.workload, cluster)
        # The pending mix keeps each GPU kind's least CPU and the commonest kinds only: what
        # the pending tasks ask in all is worked out from the tasks themselves.
        demand = cpu_per_gpu((1, t.gpu_milli, t.cpu_milli) for job in snapshot.pending for t in job.tasks)
        return cls(pending_mix(snapshot.pending), cluster, demand)

    # --- topology: gangs as ``Topology`` places them, a task's GPUs in one group ---------

    def attempts(self, job: PendingJob, ledger: Ledger) -> Sequence[NodeFilter | None]:
        return self.topology.attempts(job, ledger)

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        if len(gang.job.tasks) > 1:
            return self.topology.choose(task, access, gang)
        return super().choose(task, access, gang)

    def select_whole(self, node: FreeNode, task: TaskRequest, tiers: list[list[int]]) -> list[GpuShare] | None:
        return select_grouped(node, task, tiers)

    def rank(self, node: FreeNode, task: TaskRequest, answer: Answer) -> Rank:
        shares = answer[1]
        groups = len({node.gpu_group[p] for p, _ in shares}) if len(shares) > 1 else 1
        return (groups, answer[0])

    def _fixed(self, node: FreeNode, task: TaskRequest) -> Fixed:
        fixed = super()._fixed(node, task)  # a multi-GPU task's answer depends on the groups too
        return (fixed, tuple(node.gpu_group)) if task.gpu_milli >= 2 * MILLI else fixed

    def _fixed_for(self, task: TaskRequest) -> object:
        return task.gpu_milli >= 2 * MILLI

    def penalty(self, node: FreeNode, task: TaskRequest, devices: list[GpuShare]) -> float:
        cost = 0.0
        if self.cpu_per_gpu > 0:
            taken = sum(d.milli for d in devices)
            after = self.stranded(max(0, node.gpu_sum) - taken, node.cpu_milli - task.cpu_milli)
            if self.limited:
                cost = STRANDED_WEIGHT * after
            else:
                cost = after - self.stranded(max(0, node.gpu_sum), node.cpu_milli) + STRANDED_LEVEL_WEIGHT * after
        if self.cpu_fragments is not None:
            free = list(node.gpu_free)
            for d in devices:
                free[node.position[d.index]] -= d.milli
            grown = self.cpu_fragments.of(node, free, node.cpu_milli - task.cpu_milli, node.memory_mb - task.memory_mb)
            grown -= self.cpu_fragments.of(node, node.gpu_free, node.cpu_milli, node.memory_mb)
            cost += CPU_FRAGMENT_WEIGHT * grown / self.cluster_cpu_per_gpu
        return cost

    def stranded(self, gpu_free: int, cpu_free: int) -> float:
        """Milli-GPUs that ``cpu_free`` milli-CPUs cannot serve at the workload's CPU per GPU."""
        return max(0.0, self.cpu_per_gpu * gpu_free - cpu_free) / self.cpu_per_gpu


class CpuFragments:
    """FGD's measure turned to CPU: the free CPU of a node that a kind of task could not use
    (all of it, if the kind does not fit there: too little CPU or memory, no GPU for it),
    expected over the target workload's kinds — CPU-only tasks included, by count."""

    def __init__(self, workload: Sequence[WorkloadClass]) -> None:
        kinds = [w for w in workload if w.weight > 0]
        total = sum(w.weight for w in kinds)
        grouped: dict[tuple[int, tuple[str, ...]], list[tuple[int, int, float]]] = {}
        for w in kinds:
            grouped.setdefault((w.gpu_milli, w.gpu_models), []).append((w.cpu_milli, w.memory_mb, w.weight / total))
        self._groups = [(gpu, models, tuple(members)) for (gpu, models), members in grouped.items()]
        self._cache: dict[FragmentKey, float] = {}

    def of(self, node: FreeNode, free: Sequence[int], cpu: int, memory: int) -> float:
        """Expected milli-CPU of ``node`` left unusable, with these free shares, CPU and memory."""
        key: FragmentKey = (node.klass if len(node.klass) == 1 else tuple(node.gpu_model), tuple(free), cpu, memory)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._expected(node, free, cpu, memory)
        return cached

    def _expected(self, node: FreeNode, free: Sequence[int], cpu: int, memory: int) -> float:
        if cpu <= 0:
            return 0.0
        idle = [f if f > 0 else 0 for f in free]
        unusable = 0.0
        for gpu_milli, models, members in self._groups:
            if gpu_milli > 0:
                usable = [f for i, f in enumerate(idle) if not models or node.gpu_model[i] in models]
                if gpu_milli >= MILLI:
                    gpu_fits = usable.count(MILLI) >= gpu_milli // MILLI
                else:
                    gpu_fits = any(f >= gpu_milli for f in usable)
                if not gpu_fits:
                    unusable += sum(p for _, _, p in members) * cpu
                    continue
            unusable += sum(p for c, m, p in members if c > cpu or m > memory) * cpu
        return unusable
