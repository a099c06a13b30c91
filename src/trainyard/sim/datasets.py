"""Datasets near the GPUs in the queueing track (issue 35): what the nodes' caches save, and
what placement's preference for the nodes that hold a job's data is worth.

The model. ``count`` datasets, the i-th (from 1) read by a job with probability in
proportion to 1 / i ** ``skew`` (Zipf; 0: all alike), each of a size drawn log-uniformly
between ``min_gb`` and ``max_gb``; every job reads one, drawn once per job id (so that
every policy replays the same jobs reading the same data). Each node keeps a cache of
``cache_gb`` (the setting ``dataset_cache_gb``), least recently used first out, never what a
running job on the node reads (``backends/datacache``'s rules: past its capacity while what
it holds is in use). A job that starts on a node whose cache lacks its dataset fetches it
there first, at ``fetch_gbps`` from the source, each node on its own (no contention
between nodes): its GPUs are held meanwhile without progress, so that the fetch's time
is in its queueing and JCT, and its GPU time in the allocation.

The preference is the live scheduler's own: the simulator gives a waiting job the nodes
whose cache holds its dataset as ``PendingJob.data_nodes`` when the controller does — in
the cycle that first sees it waiting, as the caches then are (``DatasetPrefetcher.arriving``:
a job keeps that set while it waits), and to the first ``ahead`` waiting jobs of each VC as
the caches are now (the prefetcher's run; their position as the last cycle decided it,
``KeepWaiting.position``, or where the simulator skips a cycle that could start nothing,
their place in the scheduler's own queue order, ``schedule.ordered``; 0: every waiting job
as the caches are now) — and ``scheduler.ledger.data_first`` puts those nodes first among
nodes that fit alike. The live prefetcher looks at the caches every 10 s; the simulator at
every cycle.
``prefer=False`` gives none (the preference off; the caches as before).

Not modelled: the prefetcher's fetches while a job waits (here a job fetches when it
starts), an elastic job's added workers (they fetch nothing), contention at the source.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from trainyard.scheduler.snapshot import PendingJob

GB = 1e9
PREFETCH_AHEAD = 2  # the controller's (``controller.datasets.PREFETCH_AHEAD``): the first two of each VC


@dataclass(frozen=True)
class DatasetModel:
    count: int
    skew: float = 1.0
    min_gb: float = 1.0
    max_gb: float = 100.0
    cache_gb: float = 100.0  # the setting dataset_cache_gb's default
    fetch_gbps: float = 0.5  # GB a second from the source to one node
    prefer: bool = True  # placement's preference for the nodes holding a job's data
    ahead: int = PREFETCH_AHEAD
    seed: int = 35

    def __post_init__(self) -> None:
        """ValueError naming the option (``yard sim queue``'s) that is out of range."""
        for option, value, ok in (
                ("--datasets", self.count, self.count >= 1),
                ("--dataset-skew", self.skew, 0 <= self.skew < math.inf),
                ("--dataset-gb", f"{self.min_gb}:{self.max_gb}", 0 < self.min_gb <= self.max_gb < math.inf),
                ("--cache-gb", self.cache_gb, self.max_gb <= self.cache_gb < math.inf),
                ("--fetch-gbps", self.fetch_gbps, 0 < self.fetch_gbps < math.inf),
                ("--data-ahead", self.ahead, self.ahead >= 0)):
            if not ok:
                raise ValueError(f"{option}: {value} is out of range (datasets >= 1, skew >= 0, "
                                 "0 < MIN <= MAX <= cache GB, fetch GB/s > 0, ahead >= 0)")


@dataclass
class DataTally:
    """What the caches did over a replay: per start of a job on a node, a hit or a miss."""

    hits: int = 0
    misses: int = 0
    bytes_fetched: float = 0.0
    evictions: int = 0
    fetch_seconds: float = 0.0  # the starts' waits for their data, summed over jobs
    fetch_gpu_seconds: float = 0.0  # the GPU time held meanwhile (set by ``QueueSim``)
    preferred: int = 0  # starts of jobs that had data_nodes to prefer
    fetches: list[float] = field(default_factory=list)  # each start's wait (for percentiles)


class DataCaches:
    """The nodes' caches under ``model``, the datasets of ``job_ids`` drawn up front."""

    def __init__(self, model: DatasetModel, nodes: Iterable[str], job_ids: Iterable[int]) -> None:
        self.model = model
        draw = random.Random(model.seed)
        low, high = math.log(model.min_gb), math.log(model.max_gb)
        self.size = [math.exp(draw.uniform(low, high)) * GB for _ in range(model.count)]
        weights = [1.0 / (i + 1) ** model.skew for i in range(model.count)]
        ids = sorted(job_ids)
        self.reads = dict(zip(ids, draw.choices(range(model.count), weights, k=len(ids)), strict=True))
        self.capacity = model.cache_gb * GB
        self.caches: dict[str, OrderedDict[int, float]] = {n: OrderedDict() for n in nodes}
        self.used = dict.fromkeys(self.caches, 0.0)
        self.in_use: dict[str, dict[int, int]] = {n: {} for n in self.caches}  # node -> dataset -> jobs
        self.holding: dict[int, set[str]] = {}  # dataset -> the nodes that hold it
        self.placed: dict[int, tuple[str, ...]] = {}  # running job -> its nodes
        self.first_seen: dict[int, frozenset[str]] = {}  # waiting job -> its data_nodes when it arrived
        self.tally = DataTally()
        # Whether the waiting jobs' places in their queues decide which get data_nodes.
        self.by_position = model.prefer and model.ahead > 0

    def data_nodes(self, job_id: int) -> frozenset[str]:
        """The nodes whose cache holds the job's dataset (``PendingJob.data_nodes``)."""
        return frozenset(self.holding.get(self.reads[job_id], ()))

    def preferred(self, pending: Sequence[int], positions: Mapping[int, int]) -> dict[int, frozenset[str]]:
        """The waiting jobs' data_nodes, as the controller gives them: none with the preference
        off; else a job's first seen now as the caches are now, those of ``positions`` (the
        last cycle's) at most ``ahead`` as they are now, the rest's as they were when first seen."""
        model = self.model
        if not model.prefer:
            return {}
        found = {}
        for j in pending:
            if j not in self.first_seen:
                nodes = self.first_seen[j] = self.data_nodes(j)
            elif model.ahead == 0 or positions.get(j, model.ahead + 1) <= model.ahead:
                nodes = self.data_nodes(j)
            else:
                nodes = self.first_seen[j]
            if nodes:
                found[j] = nodes
        return found

    def start(self, job_id: int, nodes: Iterable[str], had_preference: bool = False) -> float:
        """The job starts on ``nodes``: each fetches its dataset unless its cache holds it;
        the seconds until the last has it (the job's wait for its data)."""
        dataset = self.reads[job_id]
        size = self.size[dataset]
        self.first_seen.pop(job_id, None)  # back in the queue (preempted), it is seen anew
        placed = tuple(dict.fromkeys(nodes))
        self.placed[job_id] = placed
        wait = 0.0
        for node in placed:
            cache = self.caches[node]
            if dataset in cache:
                self.tally.hits += 1
                cache.move_to_end(dataset)
            else:
                self.tally.misses += 1
                self.tally.bytes_fetched += size
                wait = size / (self.model.fetch_gbps * GB)
                self._make_room(node, size)
                cache[dataset] = size
                self.used[node] += size
                self.holding.setdefault(dataset, set()).add(node)
            uses = self.in_use[node]
            uses[dataset] = uses.get(dataset, 0) + 1
        self.tally.fetch_seconds += wait
        self.tally.fetches.append(wait)
        self.tally.preferred += had_preference
        return wait

    def end(self, job_id: int) -> None:
        """The job has stopped running (ended, preempted, suspended): its nodes' caches may evict its data."""
        dataset = self.reads[job_id]
        for node in self.placed.pop(job_id, ()):
            uses = self.in_use[node]
            uses[dataset] -= 1
            if not uses[dataset]:
                del uses[dataset]

    def _make_room(self, node: str, size: float) -> None:
        cache, uses = self.caches[node], self.in_use[node]
        for victim in [d for d in cache if d not in uses]:  # least recently used first
            if self.used[node] + size <= self.capacity:
                return
            self.used[node] -= cache.pop(victim)
            self.holding[victim].discard(node)
            self.tally.evictions += 1


def queue_positions(order: Iterable[PendingJob]) -> dict[int, int]:
    """Each job's 1-based place among its VC's in ``order`` (the scheduler's queue order),
    as ``KeepWaiting.position`` counts it in a cycle that starts nothing."""
    counts: dict[str, int] = {}
    positions = {}
    for job in order:
        counts[job.vc] = counts.get(job.vc, 0) + 1
        positions[job.job_id] = counts[job.vc]
    return positions
