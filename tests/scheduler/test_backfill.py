"""EASY backfill: the first job that cannot start holds a reservation; others fill around it."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from scheduler_world import World, job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import SchedulerConfig

# Node a: half busy until t=100, then free; node b: busy with no known end; node c: 2 GPUs.
NODES = (node("a"), node("b"), node("c", 2))
WORK = (
    running(90, on("a", 0, 1, 2, 3), end=100.0),
    running(91, on("b", *range(8))),
)
BIG = job(1, 8000)  # fits only on a, once job 90 has ended: reserved from t=100


def decide(*later):
    return schedule(snapshot(NODES, (BIG, *later), WORK))


def outcome(decisions, job_id: int) -> str:
    if any(s.job_id == job_id for s in decisions.starts):
        return "starts"
    return str(next(w.reason for w in decisions.waits if w.job_id == job_id))


@pytest.mark.parametrize(
    ("later", "expected"),
    [
        pytest.param(
            job(2, 4000, max_runtime=50.0), "starts", id="a job that ends before the reservation may use its GPUs"
        ),
        pytest.param(
            job(2, 4000, max_runtime=500.0), "RESERVED", id="a job that would outlast the reservation waits as RESERVED"
        ),
        pytest.param(job(2, 4000), "RESERVED", id="a job without a maximum run time is taken to outlast it"),
        pytest.param(job(2, 2000), "starts", id="a job fits where the reservation needs nothing"),
        pytest.param(job(2, 6000), "NO_FIT", id="a job that fits nowhere even without the reservation is NO_FIT"),
    ],
)
def test_backfill_does_not_delay_the_reservation(later, expected) -> None:
    decisions = decide(later)
    assert outcome(decisions, 1) == "NO_FIT"
    assert outcome(decisions, 2) == expected
    for start in decisions.starts:
        if start.job_id == 2 and later.max_runtime is None:
            assert {p.node for p in start.placements} == {"c"}


def test_the_first_job_that_cannot_start_is_told_when_it_will() -> None:
    wait = next(w for w in decide().waits if w.job_id == 1)
    assert wait.eta == 100.0
    assert wait.message.endswith("first in line: its reservation starts when running jobs reach their declared ends")


def test_a_job_held_back_is_told_by_whom() -> None:
    wait = next(w for w in decide(job(2, 4000)).waits if w.job_id == 2)
    assert wait.message == "would delay the reservation of job 1, first in line"
    assert wait.position == 2


def test_the_reserved_job_is_told_where_it_will_run_and_only_it() -> None:
    """The nodes of its reservation, where the controller fetches its datasets meanwhile (issue 35)."""
    waits = {w.job_id: w for w in decide(job(2, 4000)).waits}
    assert waits[1].reserved_nodes == ("a",)
    assert waits[2].reserved_nodes == ()


UNKNOWN_ENDS = (running(90, on("a", 0, 1, 2, 3)), running(91, on("b", *range(8))))


def test_without_expected_ends_small_jobs_use_idle_gpus_until_the_head_has_waited_drain_after() -> None:
    pending = (BIG, job(2, 4000), job(3, 4000, max_runtime=10.0))
    decisions = schedule(snapshot(NODES, pending, UNKNOWN_ENDS, now=BIG.submitted_at + 100.0))
    head = next(w for w in decisions.waits if w.job_id == 1)
    assert head.eta is None
    assert "smaller jobs may use idle GPUs until it has waited 300 s" in head.message
    assert outcome(decisions, 2) == "starts"


def test_then_the_reservation_drains_what_it_needs() -> None:
    pending = (BIG, job(2, 4000), job(3, 4000, max_runtime=10.0))
    decisions = schedule(snapshot(NODES, pending, UNKNOWN_ENDS, now=BIG.submitted_at + 300.0))
    head = next(w for w in decisions.waits if w.job_id == 1)
    assert head.eta is None
    assert head.message.endswith("waits for running jobs without a declared end, and holds what it needs")
    # It drains: nothing long starts on what it needs, but something surely short does.
    assert outcome(decisions, 2) == "RESERVED"
    assert outcome(decisions, 3) == "starts"


def test_without_backfill_jobs_behind_start_wherever_they_fit() -> None:
    decisions = schedule(snapshot(NODES, (BIG, job(2, 4000)), WORK, config=SchedulerConfig(backfill=False)))
    assert outcome(decisions, 2) == "starts"


def stream_of_small_jobs(*, declared: bool, backfill: bool = True, drain_after: float = 300.0) -> tuple[World, float]:
    """64 GPUs full of 1-GPU jobs, 1-5 more arriving every 10 s (about 50 GPUs' worth of
    demand), and a 4 x 8-GPU job submitted at t=30; runs until it starts or t=4000."""
    rng = random.Random(7)
    config = SchedulerConfig(backfill=backfill, drain_after=drain_after)
    world = World(tuple(node(f"n{i}") for i in range(8)), config=config)
    next_id = 100

    def small() -> None:
        nonlocal next_id
        next_id += 1
        duration = rng.uniform(30, 300)
        world.submit(job(next_id, 1000, at=world.now, max_runtime=duration * 1.5 if declared else None), duration)

    for _ in range(64):
        small()
    for step in range(400):
        if step == 3:
            world.submit(job(1, 8000, 8000, 8000, 8000, at=world.now), duration=600.0)
        for _ in range(rng.randint(1, 5)):
            small()
        world.cycle()
        if 1 in world.started_at:
            break
        world.advance(10.0)
    return world, 30.0


@pytest.mark.parametrize("declared", [True, False], ids=["with declared run times", "without run times"])
def test_a_32_gpu_job_does_start_in_a_steady_stream_of_small_jobs(declared: bool) -> None:
    world, submitted = stream_of_small_jobs(declared=declared)
    assert 1 in world.started_at, "the 32-GPU job never started"
    # Declared run times reserve at once; without them the reservation drains after
    # drain_after (300 s), and the small jobs on its GPUs run at most 300 s more.
    assert world.started_at[1] - submitted <= (400.0 if declared else 300.0 + 310.0)
    # Small jobs kept starting while it waited (they backfilled around its reservation).
    assert len(world.started_at) > 64 + 30


def test_without_a_reservation_the_32_gpu_job_starves_in_that_stream() -> None:
    world, _ = stream_of_small_jobs(declared=True, backfill=False)
    assert 1 not in world.started_at


def test_an_opportunistic_reservation_never_drains() -> None:
    pending = (job(1, 8000, rank=3, at=0.0), job(2, 4000, rank=3, at=1.0))
    decisions = schedule(snapshot(NODES, pending, UNKNOWN_ENDS, now=1e6))
    assert outcome(decisions, 1) == "NO_FIT" and outcome(decisions, 2) == "starts"


def test_a_requeued_job_drains_only_once_it_has_waited_again() -> None:
    requeued = replace(BIG, waiting_since=BIG.submitted_at + 1000.0)  # preempted long after submit
    for waited, expected in ((100.0, "starts"), (300.0, "RESERVED")):
        now = requeued.waiting_since + waited
        decisions = schedule(snapshot(NODES, (requeued, job(2, 4000)), UNKNOWN_ENDS, now=now))
        assert outcome(decisions, 2) == expected


def test_a_reservation_on_its_own_vcs_busy_gpus_does_not_charge_their_quota_twice() -> None:
    """VC a (16 GPUs) runs 14; its first 4-GPU job waits for quota and its reservation,
    draining, holds GPUs a's own jobs still use. Those GPUs' quota comes back when those
    jobs end — when the reservation can start — so the hold must not charge it again: a
    1-GPU job behind it still fits a's 2 free GPUs of quota. (Charged twice, a's quota
    went below zero and every job behind waited: the sharing anomaly the Philly
    replay showed, VCs waiting longer shared than alone on their quota.)"""
    from trainyard.scheduler.snapshot import PendingReason, VirtualCluster

    world = World((node("n0"), node("n1"), node("n2")), vcs=(VirtualCluster("a", {"A100": 16}),
                                                            VirtualCluster("b", {"A100": 8})), now=400.0,
                  config=SchedulerConfig(borrowing=False))  # with it, job 10 borrows b's idle GPUs
    for r in (running(1, on("n0", 0, 1, 2, 3), vc="a"), running(2, on("n0", 4, 5, 6, 7), vc="a"),
              running(3, on("n1", 0, 1, 2, 3), vc="a"), running(4, on("n1", 4, 5), vc="a")):
        world.running[r.job_id] = r
        world.ends[r.job_id] = float("inf")
    world.submit(job(10, 4000, vc="a", at=0.0))
    world.submit(job(11, 1000, vc="a", at=1.0))
    decisions = world.cycle()
    assert [s.job_id for s in decisions.starts] == [11]
    assert {w.job_id: w.reason for w in decisions.waits} == {10: PendingReason.QUOTA}
