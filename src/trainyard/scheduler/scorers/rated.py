"""Scorers that rate every node a task fits on, the way the Kubernetes scheduling framework
does: an integer score per node (0..100), the highest wins.

The FGD paper's baselines (random, dot-product, GPU clustering, GPU packing and its
best-fit) are defined this way in the authors' simulator. Among equal scores, stock
Kubernetes draws at random; the authors' simulator vendors a ``selectHost`` patched to take
the node whose name sorts first "for reproducibility" (``vendor/k8s.io/kubernetes/pkg/
scheduler/core/generic_scheduler.go``) — names it prefixes with a random per-seed order
(``sim.openb.seeded_names``). GPU clustering, GPU packing and FGD follow that rule
(``ties_by_name``): it is what places their CPU-only pods, see ``GpuPacking`` and
``FgdRated``. The others keep a draw among equals, seeded by the job id and the task so that
the same snapshot still yields the same decisions (the scheduler's contract); with it they
already land within a point of the authors' numbers (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import Capacity, FreeNode
from trainyard.scheduler.ledger import Access, Ledger, Select
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter, select_bestfit
from trainyard.scheduler.scorers.fgd import Fgd, latest_kind
from trainyard.scheduler.snapshot import GpuShare, PendingJob, Snapshot, TaskRequest, WorkloadClass
from trainyard.scheduler.standing import Bands, Standing, StandingKey, Standings

MAX_SCORE = 100
Rate = Callable[[FreeNode, TaskRequest], float]


def draw_for(job: PendingJob, task: TaskRequest) -> random.Random:
    return random.Random(job.job_id * 1_000_003 + task.index * 7919 + len(task.role))


def may_fit(node: FreeNode, task: TaskRequest) -> bool:
    """A cheap test of what ``Access.fit`` checks on the node's own capacity (it stays the
    authority: a node that passes here and fails there is skipped)."""
    if not node.hosts_cpu_and_memory(task):
        return False
    if task.gpu_milli <= 0:
        return True
    any_device = not task.gpu_models and not task.gpu_memory_mb and not task.selector  # every device suits it
    if task.gpu_milli < MILLI:
        if any_device:
            return max(node.gpu_free, default=0) >= task.gpu_milli
        return any(f >= task.gpu_milli and node.suits(p, task) for p, f in enumerate(node.gpu_free))
    wanted = task.gpu_milli // MILLI
    if any_device:
        return node.whole >= wanted
    return sum(1 for p, f in enumerate(node.gpu_free) if f == MILLI and node.suits(p, task)) >= wanted


def highest_rated(task: TaskRequest, access: Access, gang: GangProgress, rate: Rate, select: Select,
                  *, ties_by_name: bool = False, kept: Standings[Standing] | Standings[Bands] | None = None
                  ) -> Choice | None:
    """The node ``rate`` scores highest, with ``select``'s devices. Among equals a random
    one, or (``ties_by_name``) the one whose name sorts first. ``kept``: where to keep, per
    kind of task, every node's rating from one task to the next (``rate`` a function of the
    node's free capacity and the kind alone): ``Standing`` to tie by name, else ``Bands``."""
    if kept is not None and access.only is None and not access.data_nodes and (
            task.gpu_milli <= 0 or not access.in_cells):
        # One tier, every node in it rated: the nodes the index offers and ``may_fit`` passes,
        # each rated again only once changed since the kind was last asked.
        capacity = access.ledger.capacity
        kind = (task.gpu_milli, task.cpu_milli, task.memory_mb, task.gpu_models, task.gpu_memory_mb, task.selector)

        def rating(node: FreeNode) -> float | None:
            return rate(node, task) if capacity.offers(node, task) and may_fit(node, task) else None

        first = _first_rated(task, gang, capacity, kept.of_kind(capacity, kind), rating)
        if first is None:
            return None
        fit = access.fit(first, task, select)
        if fit is not None:
            return first, fit
        # ``Access.fit`` has the last word: past a node it refuses, the walk below decides.
    rng = draw_for(gang.job, task)
    # Ties by name make the order the nodes come in worth nothing (a random draw among
    # equals takes them in best-fit order): the index's own order spares merging its lists.
    for tier in access.tiers(task, ordered=not ties_by_name):
        rated = [(rate(node, task), node) for node in tier if may_fit(node, task)]
        while rated:
            top = max(score for score, _ in rated)
            best = [node for score, node in rated if score == top]
            node = min(best, key=lambda n: n.name) if ties_by_name else best[rng.randrange(len(best))]
            fit = access.fit(node, task, select)
            if fit is not None:
                return node, fit
            rated = [(score, other) for score, other in rated if other is not node]
    return None


def _first_rated(task: TaskRequest, gang: GangProgress, capacity: Capacity, kept: Standing | Bands,
                 rating: Callable[[FreeNode], float | None]) -> FreeNode | None:
    """The node ``highest_rated``'s walk tries first: the best rated, among equals the name
    that sorts first (``Standing``: the least (-rating, name)) or the walk's draw among them
    in best-fit order (``Bands``)."""
    if isinstance(kept, Standing):
        def key_of(node: FreeNode) -> StandingKey | None:
            rated = rating(node)
            return None if rated is None else (-rated, node.name)

        least = kept.least(capacity, key_of)
        return None if least is None else capacity.nodes[least[-1]]  # type: ignore[index]
    best = kept.best(capacity, rating)
    return None if best is None else capacity.nodes[best[draw_for(gang.job, task).randrange(len(best))][2]]


class Rated:
    """A scorer from a per-node rating; ``capacity`` holds each node's (CPU, GPU) size.
    ``ties_by_name``: among equal ratings take the node whose name sorts first (the paper's
    simulator) rather than a seeded random one."""

    ties_by_name = False

    def __init__(self, snapshot: Snapshot) -> None:
        self.capacity = {n.name: (n.cpu_milli, len(n.gpus) * MILLI) for n in snapshot.nodes}
        self.max_cpu = max((c for c, _ in self.capacity.values()), default=1) or 1
        self.max_gpu = max((g for _, g in self.capacity.values()), default=MILLI) or MILLI
        # every node's rating per kind of task, from one task to the next (``highest_rated``)
        self._kept: Standings[Standing] | Standings[Bands] = (
            Standings(Standing) if self.ties_by_name else Standings(Bands))

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot) -> Rated:
        return cls(snapshot)

    def attempts(self, job: PendingJob, ledger: Ledger) -> Sequence[NodeFilter | None]:
        return (None,)

    def rate(self, node: FreeNode, task: TaskRequest) -> float:
        raise NotImplementedError

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        return highest_rated(task, access, gang, self.rate, select_bestfit, ties_by_name=self.ties_by_name,
                             kept=self._kept)


class RandomFit(Rated):
    """Random: any node the task fits on, with equal chance (the paper's weakest baseline)."""

    def rate(self, node: FreeNode, task: TaskRequest) -> float:
        return 0


class BestFitRated(Rated):
    """The paper's best-fit: least CPU and GPU left after placing, each weighted one half and
    normalised by the largest node; the integer score is then stretched to 0..100 over the
    candidates (``NormalizeScore``), which keeps the ties of its integer rounding."""

    def rate(self, node: FreeNode, task: TaskRequest) -> float:
        left = 0.5 * (node.cpu_milli - task.cpu_milli) / self.max_cpu
        left += 0.5 * (max(0, node.gpu_sum) - max(0, task.gpu_milli)) / self.max_gpu
        return int((1 - left) * MAX_SCORE)


class DotProduct(Rated):
    """Tetris's alignment (Grandl et al., SIGCOMM'14) as the paper runs it ("merge", "max"):
    the node whose free (CPU, GPU) has the smallest dot product with the task's request,
    both normalised by the largest node's size."""

    def rate(self, node: FreeNode, task: TaskRequest) -> float:
        dot = (node.cpu_milli / self.max_cpu) * (task.cpu_milli / self.max_cpu)
        dot += (max(0, node.gpu_sum) / self.max_gpu) * (max(0, task.gpu_milli) / self.max_gpu)
        return int((1 - dot / 2) * MAX_SCORE)


class GpuClustering(Rated):
    """GPU clustering: a task goes where tasks of its kind (shared GPU, or whole GPUs) already
    run — best if only its kind — then to idle nodes, then to nodes running the other kind;
    fuller nodes first within each band. A node's kinds are read from its devices: a partly
    used device holds shared tasks, a fully used one whole-GPU tasks. (The authors' plugin
    counts kinds from the pods on the node, a whole-GPU pod's kind being its GPU count;
    this one lands within a point of their numbers without that.) CPU-only tasks rate 0
    everywhere and go, like equals, to the node whose name sorts first (see ``GpuPacking``)."""

    ties_by_name = True

    def rate(self, node: FreeNode, task: TaskRequest) -> float:
        if task.gpu_milli <= 0:
            return 0
        kinds = set()
        for f in node.gpu_free:
            if 0 < f < MILLI:
                kinds.add("share")
            elif f <= 0:
                kinds.add("whole")
        mine = "share" if task.gpu_milli < MILLI else "whole"
        fullness = MAX_SCORE // 4 * (self.max_gpu - max(0, node.gpu_sum)) // self.max_gpu
        if mine in kinds:
            band = 3 if len(kinds) == 1 else 2
        else:
            band = 1 if not kinds else 0
        return band * MAX_SCORE // 4 + fullness


class GpuPacking(Rated):
    """GPU packing: first shared devices (the fullest), then free devices of a node already in
    use (as few as possible), then an idle node (the one with fewest GPUs).

    CPU-only tasks rate 0 on every node, so the tie rule alone places them. With the
    authors' rule (the name that sorts first) they fill nodes in name order, one after
    another, and leave the CPU of the rest to the whole-GPU tasks that come later; drawn at
    random they spread over every node, and from ~88 % arrived demand whole-GPU tasks find
    free GPUs only on nodes whose CPU is gone (3 points below the paper at 100 %)."""

    ties_by_name = True

    def rate(self, node: FreeNode, task: TaskRequest) -> float:
        if task.gpu_milli <= 0:
            return 0
        free = node.gpu_free
        fully_free = sum(1 for f in free if f == MILLI)
        if fully_free == len(free):
            return max(MAX_SCORE // 3 - fully_free, fully_free)
        share = min(task.gpu_milli, MILLI)
        wanted = max(1, task.gpu_milli // MILLI)
        use = sorted((f for p, f in enumerate(free) if f >= share and node.suits(p, task)))[:wanted]
        if len(use) < wanted:
            return 0
        whole = sum(1 for f in use if f == MILLI)
        if whole:
            return max(MAX_SCORE // 2 - whole, MAX_SCORE // 3)
        return max(MAX_SCORE - sum(f * 100 // MILLI for f in use) // 10, MAX_SCORE // 2)


# The authors' run scripts take as FGD's target workload ("typical pods") the most popular
# pod kinds that cover 95 % of the pods, CPU-only kinds included (``--pod-popularity-
# threshold 95``, ``--is-involved-cpu-pods true`` in ``scripts/generate_config_and_run.py``).
POPULAR = 0.95


def typical_pods(workload: Sequence[WorkloadClass], popular: float = POPULAR) -> tuple[WorkloadClass, ...]:
    """FGD's target workload as the authors' simulator builds it (``GetTypicalPods``,
    ``pkg/utils/frag.go``): kinds of (CPU, GPU request, GPU models) — memory is no part of a
    kind — CPU-only ones included, most popular first (among equals the larger kind), the
    fewest that cover ``popular`` of the pods, weighed by their share of those."""
    counts: dict[tuple[int, int, tuple[str, ...]], float] = {}
    for w in workload:
        if w.weight > 0:
            kind = (w.cpu_milli, w.gpu_milli, w.gpu_models)
            counts[kind] = counts.get(kind, 0.0) + w.weight

    def popularity(item: tuple[tuple[int, int, tuple[str, ...]], float]) -> tuple[object, ...]:
        (cpu, gpu, models), count = item
        per_gpu, number = (min(gpu, MILLI), max(1, gpu // MILLI)) if gpu > 0 else (0, 0)
        return count, cpu, per_gpu, number, "|".join(models)

    kept: list[tuple[tuple[int, int, tuple[str, ...]], float]] = []
    covered, total = 0.0, sum(counts.values())
    for item in sorted(counts.items(), key=popularity, reverse=True):
        if covered >= popular * total:
            break
        kept.append(item)
        covered += item[1]
    return tuple(
        WorkloadClass(gpu_milli=gpu, weight=count / covered, cpu_milli=cpu, memory_mb=0, gpu_models=models)
        for (cpu, gpu, models), count in kept
    )


def fgd_score(before: float, after: float) -> int:
    """The authors' FGD score of a placement that takes a node's fragmentation (milli-GPU)
    from ``before`` to ``after``: sigmoid of the decrease in GPUs, times 100, truncated to an
    integer (``fgd_score.go``; not normalised over the nodes). No change scores 50, any
    growth at most 49. The difference is rounded first so that float noise cannot turn an
    unchanged node into a 49."""
    decrease = round(before - after, 6) / MILLI
    return int(1.0 / (1.0 + math.exp(-decrease)) * MAX_SCORE)


class FgdRated(Fgd):
    """The FGD baseline (``fgd``) as the authors' simulator runs it: a Kubernetes score plugin
    (``pkg/simulator/plugin/fgd_score.go``) scores every node the pod passes the filters on,
    ``fgd_score`` of its fragmentation before and after, and the patched ``selectHost`` takes
    the highest score, among equals the node whose name sorts first.

    What that means beside the paper's formula: (1) a CPU-only pod is scored like any other —
    its CPU can leave GPU kinds of the target workload without the CPU they need — so it
    goes, in name order, to the first node where it changes nothing (50), usually one whose
    GPUs are all taken or that keeps CPU enough for every kind; (2) the target workload is
    ``typical_pods``: CPU-only kinds count, each adding its share of every free GPU to a
    node's fragmentation (the authors count their "XL/XR" quadrants as fragment whether the
    pod fits or not), and memory does not; (3) the integer score makes many nodes equal,
    and the name decides among them. A shared GPU goes to the device that scores highest,
    among equals the lowest index (``calculateGpuShareFragExtendScore``); whole GPUs to the
    free devices of lowest index (``AllocateExclusiveGpuId``)."""

    def __init__(self, workload: Sequence[WorkloadClass]) -> None:
        typical = typical_pods(workload)
        super().__init__(typical)  # FGD's measure over the GPU kinds, weighed among themselves
        self.gpu_share = sum(w.weight for w in typical if w.gpu_milli > 0)
        self.cpu_only_share = sum(w.weight for w in typical if w.gpu_milli <= 0)
        self._scores: dict[tuple[object, ...], tuple[int, tuple[int, ...]] | None] = {}
        # task kind -> id(node) -> (node, its ``version``, its rating): every node is rated for
        # every task, mostly unchanged since a task of the same kind last rated it, and
        # building ``answer``'s key cost more than the rest of a visit. The latest kinds only.
        self._rated: dict[tuple[object, ...], dict[int, tuple[FreeNode, int, float]]] = {}
        self._standings = Standings(Standing)

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        kind = (task.gpu_milli, task.cpu_milli, task.gpu_models, task.gpu_memory_mb, task.selector)
        rated: dict[int, tuple[FreeNode, int, float]] = latest_kind(self._rated, kind)

        def rate(node: FreeNode, task: TaskRequest) -> float:
            found = rated.get(id(node))
            if found is not None and found[0] is node and found[1] == node.version:
                return found[2]  # the same node, unchanged since (``version``): the same rating
            rating = self.rate(node, task)
            rated[id(node)] = (node, node.version, rating)
            return rating

        return highest_rated(task, access, gang, rate, self.select, ties_by_name=True, kept=self._standings)

    def rate(self, node: FreeNode, task: TaskRequest) -> float:
        answer = self.answer(node, task)
        return -1 if answer is None else answer[0]

    def answer(self, node: FreeNode, task: TaskRequest) -> tuple[int, tuple[int, ...]] | None:
        """The node's score for ``task`` and the positions of the devices it would get (None
        if its devices cannot take it), remembered by node state."""
        # Which devices suit the task: its models and memory, and its resource expression's answer.
        suits = (task.gpu_models, task.gpu_memory_mb, task.selector and node.selected(task.selector, True))
        key = (task.gpu_milli, task.cpu_milli, suits, self._fixed(node, task), tuple(node.gpu_free), node.cpu_milli)
        if key not in self._scores:
            self._scores[key] = self._answer(node, task)
        return self._scores[key]

    def _answer(self, node: FreeNode, task: TaskRequest) -> tuple[int, tuple[int, ...]] | None:
        free = node.gpu_free
        before = self.fragmentation(node, free, 0, 0)
        if task.gpu_milli <= 0:
            return fgd_score(before, self.fragmentation(node, free, task.cpu_milli, 0)), ()
        by_index = sorted((p for p in range(len(free)) if node.suits(p, task)), key=lambda p: node.gpu_index[p])
        if task.gpu_milli < MILLI:
            best: tuple[int, tuple[int, ...]] | None = None
            for p in by_index:
                if free[p] >= task.gpu_milli:
                    score = self._device_score(node, task, p, before)
                    if best is None or score > best[0]:
                        best = (score, (p,))
            return best
        chosen = [p for p in by_index if free[p] == MILLI][: task.gpu_milli // MILLI]
        if len(chosen) < task.gpu_milli // MILLI:
            return None
        after = self._after(node, task, [GpuShare(node.gpu_index[p], MILLI) for p in chosen])
        return fgd_score(before, after), tuple(chosen)

    def _device_score(self, node: FreeNode, task: TaskRequest, p: int, before: float) -> int:
        return fgd_score(before, self._after(node, task, [GpuShare(node.gpu_index[p], task.gpu_milli)]))

    def select(self, node: FreeNode, task: TaskRequest, tiers: list[list[int]]) -> list[GpuShare] | None:
        """The devices ``answer`` scores, within the positions the task may use (in order)."""
        if task.gpu_milli >= MILLI:
            return select_bestfit(node, task, tiers)
        before = self.fragmentation(node, node.gpu_free, 0, 0)
        best: tuple[tuple[int, int, int], int] | None = None
        for rank, positions in enumerate(tiers):
            for p in positions:
                if node.gpu_free[p] >= task.gpu_milli:
                    key = (rank, -self._device_score(node, task, p, before), node.gpu_index[p])
                    if best is None or key < best[0]:
                        best = (key, p)
        return None if best is None else [GpuShare(node.gpu_index[best[1]], task.gpu_milli)]

    def fragmentation(self, node: FreeNode, free: list[int], cpu_used: int, memory_used: int) -> float:
        """The authors' measure has no memory: every node is measured as if it had none left
        (the target workload's kinds ask for none)."""
        return super().fragmentation(node, free, cpu_used, node.memory_mb)

    def _expected(self, node: FreeNode, free: list[int], cpu: int, memory: int) -> float:
        """FGD's expected fragmentation with the CPU-only kinds' share of every free GPU."""
        total = sum(f for f in free if f > 0)
        if total == 0:
            return 0.0
        return self.gpu_share * super()._expected(node, free, cpu, memory) + self.cpu_only_share * total
