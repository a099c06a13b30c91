"""Elastic jobs in the queue simulator (``sim/elastic.py``, ``QueueSim``): the live scheduler's
grow and shrink decisions applied, progress at the job's throughput curve's speed."""

from __future__ import annotations

import pytest

from trainyard.sim.elastic import Elastic
from trainyard.sim.jobs import TraceJob, uniform_cluster
from trainyard.sim.queue import QueueSim, policy_named


def replay(jobs: list[TraceJob], resize_cost: float = 0.0, gpus: int = 8):
    return QueueSim(uniform_cluster(1, gpus), jobs, policy_named("default"), resize_cost=resize_cost).run()


def test_an_elastic_job_alone_grows_to_its_maximum_at_once_and_runs_as_fast_as_its_curve_says() -> None:
    # Asked for 2 GPUs for an hour; linear: on 8 it takes a quarter of that.
    result = replay([TraceJob(1, 0.0, 3600.0, 2, elastic=Elastic(2, 8))])
    assert result.outcomes[1].end == pytest.approx(900.0)
    assert result.peak_gpus_busy == 8 and result.grows == 0  # grown in the cycle that started it
    # A measured curve that stops gaining at 4 workers: flat beyond the last point.
    curve = ((1, 1.0), (2, 2.0), (4, 3.0))
    result = replay([TraceJob(1, 0.0, 3600.0, 2, elastic=Elastic(2, 8, curve))])
    assert result.outcomes[1].end == pytest.approx(3600.0 * 2.0 / 3.0)


def test_a_waiting_job_shrinks_an_elastic_job_and_each_resize_costs_a_restart() -> None:
    jobs = [TraceJob(1, 0.0, 3600.0, 2, elastic=Elastic(2, 8)), TraceJob(2, 450.0, 600.0, 4)]
    result = replay(jobs, resize_cost=30.0)
    assert result.shrinks == 1 and result.grows == 1 and result.preemptions == 0
    assert result.outcomes[2].first_start == 450.0  # it waited for nothing: workers left at once
    # Job 1: 450 s on 8 (half its work), 30 s restart, then 4 workers until job 2 ends at
    # 1050 (570 s of progress at speed 2), 30 s restart, the rest on 8 at speed 4.
    done = 450.0 * 4 + 570.0 * 2
    assert result.outcomes[1].end == pytest.approx(1050.0 + 30.0 + (3600.0 - done) / 4)
    assert result.outcomes[1].queueing == pytest.approx(0.0)  # it never waited: it held workers throughout


def test_an_elastic_job_is_never_shrunk_below_its_minimum_nor_for_nothing() -> None:
    # Job 2 needs all 8 GPUs: shrinking job 1 to its minimum of 4 would not be enough, and
    # job 1 of the same priority is no victim, so nothing is shrunk: job 2 waits for it.
    jobs = [TraceJob(1, 0.0, 3600.0, 4, elastic=Elastic(4, 8)), TraceJob(2, 10.0, 600.0, 8)]
    result = replay(jobs)
    assert result.shrinks == 0 and result.preemptions == 0
    assert result.outcomes[2].first_start == pytest.approx(result.outcomes[1].end)
