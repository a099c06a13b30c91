"""Scheduler invariants on random clusters and workloads (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_world import check_capacity, check_gangs

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import (
    GpuSlot,
    NodeState,
    PendingJob,
    Snapshot,
    TaskRequest,
)

gpu_request = st.sampled_from([0, 250, 500, 1000, 2000, 4000, 8000])


@st.composite
def nodes(draw):
    count = draw(st.integers(1, 6))
    result = []
    for n in range(count):
        gpus = draw(st.integers(0, 8))
        used = [draw(st.sampled_from([0, 0, 0, 250, 500, 1000])) for _ in range(gpus)]
        cpu = draw(st.integers(1, 32)) * 1000
        mem = draw(st.integers(1, 64)) * 1024
        result.append(NodeState(
            f"n{n}", cpu, mem, tuple(GpuSlot(i, draw(st.sampled_from(["A100", "V100"])), 40960, u)
                                    for i, u in enumerate(used)),
            cpu_used_milli=draw(st.integers(0, cpu)), memory_used_mb=draw(st.integers(0, mem)),
            schedulable=draw(st.booleans()) or n == 0,
        ))
    return tuple(result)


@st.composite
def jobs(draw):
    count = draw(st.integers(0, 12))
    result = []
    for j in range(count):
        tasks = tuple(
            TaskRequest("w", i, draw(gpu_request), draw(st.integers(0, 8)) * 500, draw(st.integers(0, 8)) * 1024,
                        gpu_models=draw(st.sampled_from([(), ("A100",), ("V100",)])))
            for i in range(draw(st.integers(1, 4)))
        )
        result.append(PendingJob(j + 1, draw(st.integers(0, 3)), float(draw(st.integers(0, 5))), tasks))
    return tuple(result)


@settings(max_examples=300, deadline=None)
@given(nodes(), jobs())
def test_nothing_is_ever_allocated_over_capacity(cluster, pending) -> None:
    check_capacity(Snapshot(cluster, pending), schedule(Snapshot(cluster, pending)))


@settings(max_examples=300, deadline=None)
@given(nodes(), jobs())
def test_gangs_are_all_or_nothing_and_requests_are_honoured(cluster, pending) -> None:
    check_gangs(Snapshot(cluster, pending), schedule(Snapshot(cluster, pending)))


@settings(max_examples=100, deadline=None)
@given(nodes(), jobs())
def test_the_same_snapshot_gives_the_same_decisions(cluster, pending) -> None:
    snapshot = Snapshot(cluster, pending)
    assert schedule(snapshot) == schedule(Snapshot(tuple(reversed(cluster)), tuple(reversed(pending))))
