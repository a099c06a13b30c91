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
  ``cpu300``, the level alone on ``gpushare40/60``);
* the target workload weighs each GPU kind by its count × √(its GPU request), so the
  whole-GPU kinds, which fail first when the cluster fills, count more when judging which
  free GPUs are fragments;
* **CPU fragments, as far as CPU runs out first**: where the workload, CPU-only tasks
  included, asks more CPU per GPU than the cluster has, every pod is placed until CPU is
  gone, and what is left then decides the allocation: CPU in pieces no task can use is lost
  GPU work. ``CpuFragments`` is FGD's measure turned to CPU — the free CPU of a node each
  kind of task (CPU-only ones too) could not use — and its growth, counted at the cluster's
  CPU per GPU, is added to the cost, weighed in proportion to the share of the GPU work the
  cluster's CPU cannot back (``cpu_fragment_weight``: none where GPUs run out as soon as
  CPUs, as on ``cpu235``, where costing them lost 1.1 pp; ``cpu300``: +1.4 pp over FGD).

Where a GPU model is scarce — the tasks limited to models ask a large share of its GPUs
(``model_pressures``) — the first two changes give that model away to tasks that could run
anywhere (``gpuspec10/20/25``), and FGD's own weights (count alone) with the stranded level
alone keep it. How far the cost moves from the model-blind one to that is
``workload_scarcity``, a linear blend of both, driven by the measured pressure and weighed by
how many GPUs the scarce model has; no share of limited tasks switches it at once.

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
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter
from trainyard.scheduler.scorers.fgd import Answer, Fgd, Fixed, FragmentKey, Rank, WeightsByRoom, pending_mix
from trainyard.scheduler.scorers.topology import Topology, select_grouped
from trainyard.scheduler.snapshot import GpuShare, PendingJob, Snapshot, TaskRequest, WorkloadClass

# Cost per milli-GPU stranded for want of CPU: the change a placement makes, plus this many
# times what it leaves stranded (both where no GPU model is scarce; see ``scarcity``).
STRANDED_LEVEL_WEIGHT = 2.0
# How scarce a GPU model is: the share of its GPUs that tasks limited to models ask (of all
# the GPU work, relative to the model's share of the cluster's GPUs). Below SCARCE_FROM the
# model-blind cost is kept; from SCARCE_AT on, FGD's weights and the stranded level alone;
# in between, the two blend linearly. Measured on openb: at 0.20 (gpuspec05's T4s) the
# model-blind cost wins by 0.4 pp, at 0.35 (gpuspec10) it loses by 0.6 pp.
SCARCE_FROM = 0.22
SCARCE_AT = 0.33
# A model with this share of the cluster's GPUs or more counts in full (openb's T4s hold 13.6 %);
# a rarer one in proportion to its share.
FULL_SHARE = 0.1
# Where CPU runs out first, the cost per milli-GPU's worth of CPU (at the cluster's CPU per
# GPU) that a placement adds to the node's CPU fragments is this × the share of the GPU work
# that the cluster's CPU cannot back, 1 − 1/ρ, ρ being the CPU per GPU asked ÷ the cluster's:
# 0 where GPUs run out as soon as CPUs (openb's cpu235, ρ = 0.998: costing them there lost
# 1.1 pp), 3.9 on cpu300 (ρ = 1.14: +1.4 pp over FGD), growing as CPU gets shorter.
CPU_FRAGMENT_SCALE = 32.0


def demand_weighted(workload: Sequence[WorkloadClass], scarce: float) -> tuple[WorkloadClass, ...]:
    """The GPU kinds, each weighed by its count × (its GPU request in GPUs) ** ((1 − ``scarce``) / 2):
    by count × √request where no model is scarce, by count alone (FGD's weights) where one is."""
    gpu_kinds = tuple(w for w in workload if w.gpu_milli > 0 and w.weight > 0)
    if scarce >= 1.0:
        return gpu_kinds
    power = (1.0 - scarce) / 2
    return tuple(
        WorkloadClass(w.gpu_milli, w.weight * _root(w.gpu_milli / 1000, power), w.cpu_milli, w.memory_mb, w.gpu_models)
        for w in gpu_kinds
    )


def _root(x: float, power: float) -> float:
    return math.sqrt(x) if power == 0.5 else x**power


def model_pressures(workload: Sequence[WorkloadClass], capacity: Mapping[str, int] | None = None) -> dict[str, float]:
    """Per GPU model, the share of its GPUs that the tasks limited to models ask: each limited
    kind's GPU work, as a share of all the GPU work, spread over its models by their GPUs,
    divided by the model's share of the cluster's GPUs (``capacity``: GPUs per model;
    unknown: the limited work's share of all, under the model name "")."""
    kinds = [w for w in workload if w.gpu_milli > 0 and w.weight > 0]
    total = sum(w.weight * w.gpu_milli for w in kinds)
    limited = [w for w in kinds if w.gpu_models]
    if not total or not limited:
        return {}
    if not capacity:
        return {"": sum(w.weight * w.gpu_milli for w in limited) / total}
    cluster = sum(capacity.values())
    asked: dict[str, float] = {}
    for w in limited:
        models = sorted({m for m in w.gpu_models if capacity.get(m, 0) > 0})  # a model named twice counts once
        suits = sum(capacity[m] for m in models)
        for m in models:
            asked[m] = asked.get(m, 0.0) + w.weight * w.gpu_milli / total * capacity[m] / suits
    return {m: a / (capacity[m] / cluster) for m, a in asked.items()}


def model_pressure(workload: Sequence[WorkloadClass], capacity: Mapping[str, int] | None = None) -> float:
    """The largest of ``model_pressures`` (0 without tasks limited to models)."""
    return max(model_pressures(workload, capacity).values(), default=0.0)


def workload_scarcity(workload: Sequence[WorkloadClass], capacity: Mapping[str, int] | None = None) -> float:
    """How far the cost moves towards FGD's weights: the largest ``scarcity`` of a model's
    pressure, counted in full for a model with at least ``FULL_SHARE`` of the cluster's GPUs
    and in proportion to its share below (how many GPUs giving it away can cost: a handful of
    GPUs of a rare model does not move the whole cluster's cost)."""
    pressures = model_pressures(workload, capacity)
    if not capacity:
        return max((scarcity(p) for p in pressures.values()), default=0.0)
    cluster = sum(capacity.values())
    return max(
        (scarcity(p) * min(1.0, capacity[m] / cluster / FULL_SHARE) for m, p in pressures.items()), default=0.0
    )


def scarcity(pressure: float) -> float:
    """0 (no GPU model is scarce) to 1, rising linearly from ``SCARCE_FROM`` to ``SCARCE_AT``."""
    return min(1.0, max(0.0, (pressure - SCARCE_FROM) / (SCARCE_AT - SCARCE_FROM)))


def cpu_per_gpu(kinds: Iterable[tuple[float, int, int]]) -> float:
    """Milli-CPU per milli-GPU asked by ``(count, gpu_milli, cpu_milli)`` kinds, CPU-only ones
    included (0 if no GPU is asked)."""
    gpu = cpu = 0.0
    for count, gpu_milli, cpu_milli in kinds:
        gpu += count * gpu_milli
        cpu += count * cpu_milli
    return cpu / gpu if gpu > 0 else 0.0


def cpu_fragment_weight(demand_cpu_per_gpu: float, cluster_cpu_per_gpu: float) -> float:
    """What a milli-GPU's worth of CPU fragments costs: ``CPU_FRAGMENT_SCALE`` × the share of
    the GPU work that the cluster's CPU cannot back (0 where GPUs run out first, or the cluster
    is unknown)."""
    if cluster_cpu_per_gpu <= 0 or demand_cpu_per_gpu <= cluster_cpu_per_gpu:
        return 0.0
    return CPU_FRAGMENT_SCALE * (1.0 - cluster_cpu_per_gpu / demand_cpu_per_gpu)


class FgdCpu(Fgd):
    def __init__(
        self,
        workload: Sequence[WorkloadClass],
        cluster_cpu_per_gpu: float = 0.0,
        demand_cpu_per_gpu: float | None = None,
        capacity: Mapping[str, int] | None = None,
    ) -> None:
        """``cluster_cpu_per_gpu``: the milli-CPU per milli-GPU of the nodes that take work
        (0: unknown, CPU fragments are then not costed); ``demand_cpu_per_gpu``: what the
        work asks, if known more exactly than from ``workload``; ``capacity``: the GPUs of
        each model on those nodes (for how scarce a model is)."""
        self.scarce = workload_scarcity(workload, capacity)
        super().__init__(demand_weighted(workload, self.scarce))
        gpu = sum(w.gpu_milli * p for w, p in self.classes)
        cpu = sum(w.cpu_milli * p for w, p in self.classes)
        self.cpu_per_gpu = cpu / gpu if gpu else 0.0  # milli-CPU per milli-GPU, GPU tasks
        self.topology = Topology()
        self.cluster_cpu_per_gpu = cluster_cpu_per_gpu
        if demand_cpu_per_gpu is None:
            demand_cpu_per_gpu = cpu_per_gpu((w.weight, w.gpu_milli, w.cpu_milli) for w in workload if w.weight > 0)
        self.cpu_fragment_weight = cpu_fragment_weight(demand_cpu_per_gpu, cluster_cpu_per_gpu)
        self.cpu_fragments = CpuFragments(workload) if self.cpu_fragment_weight > 0 and self.classes else None

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot) -> FgdCpu:
        taking = [n for n in snapshot.nodes if n.schedulable]
        gpus = sum(len(n.gpus) for n in taking)
        cluster = sum(n.cpu_milli for n in taking) / (gpus * MILLI) if gpus else 0.0
        capacity = Counter(g.model for n in taking for g in n.gpus)
        if snapshot.config.workload:
            return cls(snapshot.config.workload, cluster, capacity=capacity)
        # The pending mix keeps each GPU kind's least CPU and the commonest kinds only: what
        # the pending tasks ask in all is worked out from the tasks themselves.
        demand = cpu_per_gpu((1, t.gpu_milli, t.cpu_milli) for job in snapshot.pending for t in job.tasks)
        return cls(pending_mix(snapshot.pending), cluster, demand, capacity)

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
            # Model-blind: the change plus twice the level; a model scarce: the level alone.
            cost = self.scarce * after
            if self.scarce < 1.0:
                change = after - self.stranded(max(0, node.gpu_sum), node.cpu_milli)
                cost += (1.0 - self.scarce) * (change + STRANDED_LEVEL_WEIGHT * after)
        if self.cpu_fragments is not None:
            free = list(node.gpu_free)
            for d in devices:
                free[node.position[d.index]] -= d.milli
            grown = self.cpu_fragments.of(node, free, node.cpu_milli - task.cpu_milli, node.memory_mb - task.memory_mb)
            grown -= self.cpu_fragments.of(node, node.gpu_free, node.cpu_milli, node.memory_mb)
            cost += self.cpu_fragment_weight * grown / self.cluster_cpu_per_gpu
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
        self._everything = tuple(sum(p for _, _, p in members) for _, _, members in self._groups)
        self._cache: dict[FragmentKey, float] = {}
        # ``_expected``'s halves: per (device models, free shares) whether each group's GPUs
        # fit, and per (CPU, memory) the weight of each group's kinds turned away
        self._fits: dict[tuple[tuple[str, ...], tuple[int, ...]], tuple[bool, ...]] = {}
        self._refused = WeightsByRoom([members for _, _, members in self._groups], refused=True)

    def of(self, node: FreeNode, free: Sequence[int], cpu: int, memory: int) -> float:
        """Expected milli-CPU of ``node`` left unusable, with these free shares, CPU and memory."""
        key: FragmentKey = (node.klass if len(node.klass) == 1 else tuple(node.gpu_model), tuple(free), cpu, memory)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._expected(node, free, cpu, memory)
        return cached

    def _expected(self, node: FreeNode, free: Sequence[int], cpu: int, memory: int) -> float:
        """Whether each group's GPUs fit depends on the devices alone, and which of its kinds
        the node's CPU and memory turn away on those two alone: each is worked out once
        (``_fits``, ``_refused``) and summed here in the same order, with the same
        operations, as worked out afresh."""
        if cpu <= 0:
            return 0.0
        idle = tuple(f if f > 0 else 0 for f in free)
        devices = (tuple(node.gpu_model), idle)
        fits = self._fits.get(devices)
        if fits is None:
            fits = self._fits[devices] = self._fits_by_group(node.gpu_model, idle)
        refused = self._refused.of(cpu, memory)
        unusable = 0.0
        for everything, fit, turned_away in zip(self._everything, fits, refused, strict=True):
            unusable += (turned_away if fit else everything) * cpu
        return unusable

    def _fits_by_group(self, models_of: Sequence[str], idle: tuple[int, ...]) -> tuple[bool, ...]:
        """Per group: whether a task of it finds its GPUs on these devices (CPU-only: always)."""
        found: list[bool] = []
        for gpu_milli, models, _ in self._groups:
            if gpu_milli <= 0:
                found.append(True)
                continue
            usable = [f for i, f in enumerate(idle) if not models or models_of[i] in models]
            if gpu_milli >= MILLI:
                found.append(usable.count(MILLI) >= gpu_milli // MILLI)
            else:
                found.append(any(f >= gpu_milli for f in usable))
        return tuple(found)
