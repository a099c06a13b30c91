"""The queueing track's datasets (issue 35, ``sim.datasets``): each node's LRU cache, a
start's wait for the data its nodes lack, and placement's preference for the nodes holding
a waiting job's data, made by the live scheduler (``PendingJob.data_nodes``)."""

from __future__ import annotations

import argparse
import math

import pytest

from trainyard.controller import datasets as controller_datasets
from trainyard.core.transitions import EventKind
from trainyard.sim.datasets import GB, DataCaches, DatasetModel
from trainyard.sim.jobs import TraceJob, uniform_cluster
from trainyard.sim.queue import QueueSim, policy_named
from trainyard.sim.queue_track import dataset_model


def caches(reads: dict[int, int], sizes: list[float], cache_gb: float, nodes: tuple[str, ...] = ("n0", "n1"),
           **model: object) -> DataCaches:
    """Caches on ``nodes`` whose jobs read ``reads`` (job -> dataset) of ``sizes`` (GB), at 1 GB/s."""
    data = DataCaches(DatasetModel(len(sizes), max_gb=max(sizes), cache_gb=cache_gb, fetch_gbps=1.0,
                                   **model), nodes, reads)  # type: ignore[arg-type]
    data.reads, data.size = dict(reads), [s * GB for s in sizes]
    return data


def test_a_cache_evicts_the_least_recently_used_dataset_no_running_job_reads() -> None:
    data = caches({1: 0, 2: 1, 3: 2, 4: 0, 5: 3}, [40, 40, 40, 40], cache_gb=100)
    assert data.start(1, ["n0"]) == 40.0  # a miss: fetched at 1 GB/s
    data.end(1)
    assert data.start(2, ["n0"]) == 40.0
    assert data.start(4, ["n0"]) == 0.0  # a hit: dataset 0 is now the most recently used
    assert data.start(3, ["n0"]) == 40.0
    # No room for dataset 2: 1 and 0 are read by running jobs, so the cache passes its capacity.
    assert (list(data.caches["n0"]), data.tally.evictions) == ([1, 0, 2], 0)
    data.end(2)
    data.end(3)
    # Dataset 3: 1 goes (the least recently used), 0 stays (job 4 reads it), then 2 goes.
    assert data.start(5, ["n0", "n1"]) == 40.0  # fetched on both nodes at once
    assert (list(data.caches["n0"]), data.tally.evictions) == ([0, 3], 2)
    assert data.data_nodes(5) == frozenset({"n0", "n1"}) and data.data_nodes(2) == frozenset()
    assert (data.tally.hits, data.tally.misses, data.tally.bytes_fetched) == (1, 5, 200 * GB)


def test_jobs_read_the_same_datasets_whatever_the_policy_and_sizes_stay_in_range() -> None:
    model = DatasetModel(20, skew=1.2, min_gb=2, max_gb=50, cache_gb=50)
    one, two = DataCaches(model, ["n0"], range(500)), DataCaches(model, ["n0"], reversed(range(500)))
    assert one.reads == two.reads and one.size == two.size
    assert all(2 * GB <= s <= 50 * GB for s in one.size)
    popular = sum(1 for d in one.reads.values() if d == 0)
    assert popular > sum(1 for d in one.reads.values() if d == 19) * 3  # Zipf: the first is read most


def two_nodes_alike(prefer: bool, ahead: int = 2) -> tuple[QueueSim, DataCaches]:
    """Two 1-GPU nodes: jobs 1 and 2 (datasets 1 and 0) start on n0000 and n0001, and end at once;
    job 3 (dataset 0, held on n1) waits meanwhile, then finds both nodes free and alike."""
    jobs = [TraceJob(1, 0.0, 100.0, 1), TraceJob(2, 0.0, 100.0, 1), TraceJob(3, 50.0, 100.0, 1)]
    nodes = uniform_cluster(2, 1)
    data = caches({1: 1, 2: 0, 3: 0}, [10, 10], cache_gb=10, nodes=tuple(n.name for n in nodes), prefer=prefer,
                  ahead=ahead)
    sim = QueueSim(nodes, jobs, policy_named("easy"), data=data)
    return sim, data


@pytest.mark.parametrize("prefer", [True, False])
def test_placement_prefers_the_node_holding_a_waiting_jobs_data_among_nodes_that_fit_alike(prefer: bool) -> None:
    sim, data = two_nodes_alike(prefer)
    result = sim.run()
    started = {j: next(e.message for e in sim.records[j].history if e.kind == EventKind.PLACED) for j in (1, 2, 3)}
    assert started[1].endswith("on n0000") and started[2].endswith("on n0001")
    # Job 3 waited a cycle (its place in the queue known): the scheduler put it where its data is.
    assert started[3].endswith("on n0001" if prefer else "on n0000")
    assert data.tally.preferred == (1 if prefer else 0)
    assert (data.tally.hits, data.tally.misses) == ((1, 2) if prefer else (0, 3))
    # A miss's wait is in the job's queueing and JCT, and its GPU time held: jobs 1 and 2 fetched
    # for 10 s and ended at 110; job 3, which arrived at 50, then fetched or not.
    assert [result.outcomes[j].end for j in (1, 2)] == [110.0, 110.0]
    assert math.isclose(result.outcomes[3].queueing, 60.0 + (0.0 if prefer else 10.0))
    assert math.isclose(data.tally.fetch_gpu_seconds, 10.0 * (2 if prefer else 3))
    demand = sum(o.job.gpus * o.job.duration for o in result.outcomes.values())
    assert math.isclose(result.busy_gpu_seconds, demand + data.tally.fetch_gpu_seconds)
    assert result.lost_gpu_seconds == 0.0  # no checkpoint: a fetch is not a restore


def test_waiting_jobs_have_nodes_to_prefer_as_the_controller_gives_them() -> None:
    assert DatasetModel(1).ahead == controller_datasets.PREFETCH_AHEAD
    data = caches({1: 0, 2: 0, 3: 0, 4: 0}, [10], cache_gb=10)
    assert data.preferred([2, 3], {}) == {}  # first seen (``arriving``): no cache holds dataset 0 yet
    data.start(1, ["n1"])
    # 2 is next in line (the prefetcher's: the caches now); 3, further back, keeps what it had when
    # first seen; 4 is first seen now.
    assert data.preferred([2, 3, 4], {2: 1, 3: 3}) == {2: frozenset({"n1"}), 4: frozenset({"n1"})}
    everyone = caches({1: 0, 2: 0, 3: 0}, [10], cache_gb=10, ahead=0)
    assert everyone.preferred([2, 3], {}) == {}
    everyone.start(1, ["n1"])
    assert set(everyone.preferred([2, 3], {2: 1, 3: 5})) == {2, 3}  # 0: every waiting job, as the caches are now
    off = caches({1: 0, 2: 0}, [10], cache_gb=10, prefer=False)
    off.start(1, ["n1"])
    assert off.preferred([2], {2: 1}) == {}


def options(**changed: object) -> argparse.Namespace:
    values = {"datasets": 10, "dataset_skew": 1.0, "dataset_gb": "1:100", "cache_gb": 100.0, "fetch_gbps": 0.5,
              "data_placement": "on", "data_ahead": 2, **changed}
    return argparse.Namespace(**values)


@pytest.mark.parametrize(("changed", "named"), [
    ({"dataset_gb": "big"}, "--dataset-gb"), ({"dataset_gb": "5:1"}, "--dataset-gb"),
    ({"cache_gb": 50.0}, "--cache-gb"), ({"datasets": 0}, "--datasets"), ({"fetch_gbps": 0.0}, "--fetch-gbps"),
    ({"dataset_skew": -1.0}, "--dataset-skew"), ({"data_ahead": -1}, "--data-ahead"),
])
def test_options_out_of_range_are_refused_naming_the_option(changed: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        dataset_model(options(**changed))
    assert dataset_model(options(datasets=None)) is None
