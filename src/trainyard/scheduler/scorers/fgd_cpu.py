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
a cluster fills: on nodes whose CPUs are gone while GPUs are still free, and in whole GPUs
taken by shared tasks that whole-GPU tasks then miss. Two changes to FGD's cost address
them; everything else (the fragmentation measure, device choice, scan) is FGD's:

* **CPU stranding**: with the workload's CPU per GPU ``r``, a node left with free CPU below
  ``r`` × its free GPU strands the difference (FGD sees CPU only as a yes/no per task
  kind). When no task kind is limited to GPU models, the cost adds the *change* in the
  node's stranded milli-GPUs plus twice what it leaves stranded: the change rewards putting
  a task that needs little CPU on a node short of CPU, the level keeps nodes from being
  drained of CPU (the change alone lost on ``cpu300``, the level alone on ``gpushare40/60``).
  With model limits only the level counts, one for one (the change hurt ``gpuspec20``);
* when no task kind is limited to GPU models, the target workload weighs each kind by its
  count × √(its GPU request), so the kinds that ask for more GPU — the ones that fail first
  when the cluster fills — count more when judging which free GPUs are fragments. With
  model limits, FGD's weighting by count is what keeps scarce models for the tasks that
  need them, and reweighting measurably hurt (the ``gpuspec`` pod lists), so it is kept.

On ``cpu300`` (CPU-only pods asking 3× the CPU, the one openb list whose pods ask more CPU
per GPU than the cluster has) it stays level with FGD (86.13 against 86.16); gating CPU-aware
changes on that property was tried and lost or tied (docs/benchmarks.md, "What is not done").

Speed comes from ``Fgd``'s search (answers cached by node state; under quota or cell rules
those answers bound the exact ones, so few nodes are fitted exactly). Measured on openb's
pod lists and on ``bench_scheduler.py``: docs/benchmarks.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter
from trainyard.scheduler.scorers.fgd import Fgd, pending_mix
from trainyard.scheduler.scorers.topology import Topology, select_grouped
from trainyard.scheduler.snapshot import GpuShare, PendingJob, Snapshot, TaskRequest, WorkloadClass

STRANDED_WEIGHT = 1.0  # cost per milli-GPU stranded for want of CPU (kinds limited to models)
STRANDED_LEVEL_WEIGHT = 2.0  # without model limits: cost per milli-GPU stranded after, besides the change


def demand_weighted(workload: Sequence[WorkloadClass]) -> tuple[WorkloadClass, ...]:
    """Each GPU kind's weight × √(its GPU request in GPUs); unchanged if any kind is limited
    to GPU models."""
    gpu_kinds = tuple(w for w in workload if w.gpu_milli > 0)
    if any(w.gpu_models for w in gpu_kinds):
        return gpu_kinds
    return tuple(
        WorkloadClass(w.gpu_milli, w.weight * math.sqrt(w.gpu_milli / 1000), w.cpu_milli, w.memory_mb, w.gpu_models)
        for w in gpu_kinds
    )


class FgdCpu(Fgd):
    def __init__(self, workload: Sequence[WorkloadClass]) -> None:
        super().__init__(demand_weighted(workload))
        gpu = sum(w.gpu_milli * p for w, p in self.classes)
        cpu = sum(w.cpu_milli * p for w, p in self.classes)
        self.cpu_per_gpu = cpu / gpu if gpu else 0.0  # milli-CPU per milli-GPU
        self.topology = Topology()
        self.limited = any(w.gpu_models for w, _ in self.classes)  # some kind is limited to GPU models

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot) -> FgdCpu:
        return cls(snapshot.config.workload or pending_mix(snapshot.pending))

    # --- topology: gangs as ``Topology`` places them, a task's GPUs in one group ---------

    def attempts(self, job: PendingJob, ledger: Ledger) -> Sequence[NodeFilter | None]:
        return self.topology.attempts(job, ledger)

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        if len(gang.job.tasks) > 1:
            return self.topology.choose(task, access, gang)
        return super().choose(task, access, gang)

    def select_whole(self, node: FreeNode, task: TaskRequest, tiers: list[list[int]]) -> list[GpuShare] | None:
        return select_grouped(node, task, tiers)

    def rank(self, node: FreeNode, task: TaskRequest, answer: tuple) -> tuple:
        shares = answer[1]
        groups = len({node.gpu_group[p] for p, _ in shares}) if len(shares) > 1 else 1
        return (groups, answer[0])

    def _fixed(self, node: FreeNode, task: TaskRequest) -> tuple:
        fixed = super()._fixed(node, task)  # a multi-GPU task's answer depends on the groups too
        return (fixed, tuple(node.gpu_group)) if task.gpu_milli >= 2 * MILLI else fixed

    def _fixed_for(self, task: TaskRequest) -> object:
        return task.gpu_milli >= 2 * MILLI

    def penalty(self, node: FreeNode, task: TaskRequest, devices: list[GpuShare]) -> float:
        if self.cpu_per_gpu <= 0:
            return 0.0
        after = self.stranded(max(0, node.gpu_sum) - sum(d.milli for d in devices), node.cpu_milli - task.cpu_milli)
        if self.limited:
            return STRANDED_WEIGHT * after
        return after - self.stranded(max(0, node.gpu_sum), node.cpu_milli) + STRANDED_LEVEL_WEIGHT * after

    def stranded(self, gpu_free: int, cpu_free: int) -> float:
        """Milli-GPUs that ``cpu_free`` milli-CPUs cannot serve at the workload's CPU per GPU."""
        return max(0.0, self.cpu_per_gpu * gpu_free - cpu_free) / self.cpu_per_gpu
