"""Kueue-like policies (``SchedulerConfig.borrow_within_vcs``, ``reserve_at_once``; settings
``scheduler_borrow_within_vcs`` and ``scheduler_reservation_holds``): a job over its VC's
quota reclaims other VCs' lower-priority borrowed work at once, and the first waiting job's
reservation holds against lower priorities at once. HiveD's guarantees under them are in
``test_hived_guarantees.py`` (its worlds draw both)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_world import World, describe, job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import PendingJob, PendingReason, SchedulerConfig, TaskRequest, VirtualCluster

NODES = (node("a"), node("b"))
VCS = (VirtualCluster("x", {"A100": 8}), VirtualCluster("y", {"A100": 4}), VirtualCluster("z", {"A100": 4}))


def test_a_borrower_reclaims_lower_priority_borrowed_work_at_once_never_guaranteed_work() -> None:
    # y runs its quota (a) and borrows all of x's idle node (b) for low-priority work; z runs
    # its quota and has a prod job over it.
    work = [running(90, on("a", *range(4)), vc="y", rank=2), running(91, on("a", 4, 5, 6, 7), vc="z", rank=0)]
    work += [running(100 + i, on("b", i), vc="y", rank=2, borrowed=True, started=99.0) for i in range(8)]
    pending = [job(1, 2000, vc="z", rank=0)]
    config = SchedulerConfig(time_slice=600.0)
    before = schedule(snapshot(NODES, pending, work, vcs=VCS, now=100.0, config=config))
    assert before.preemptions == ()  # fair share only, after a time slice
    decisions = schedule(snapshot(NODES, pending, work, vcs=VCS, now=100.0,
                                  config=SchedulerConfig(time_slice=600.0, borrow_within_vcs=True)))
    assert len(decisions.preemptions) == 2 and all(p.job_id >= 100 for p in decisions.preemptions)
    assert next(w for w in decisions.waits if w.job_id == 1).reason == PendingReason.PREEMPTING
    # Borrowed work of its own priority or higher is reclaimed only by fair share, as before.
    same = [*work[:2], *(running(100 + i, on("b", i), vc="y", rank=0, borrowed=True, started=99.0)
                         for i in range(8))]
    decisions = schedule(snapshot(NODES, pending, same, vcs=VCS, now=100.0,
                                  config=SchedulerConfig(time_slice=600.0, borrow_within_vcs=True)))
    assert decisions.preemptions == ()


def test_a_reservation_holding_at_once_keeps_lower_priorities_off_what_it_needs_but_not_its_own() -> None:
    vcs = (VirtualCluster("x", {"A100": 16}),)
    work = [running(90, on("a", 0, 1), vc="x", rank=2)]  # no expected end: the reservation has no start time
    pending = [job(1, 8000, 8000, vc="x", rank=0, at=1.0), job(2, 1000, vc="x", rank=2, at=2.0),
               job(3, 1000, vc="x", rank=0, at=3.0)]
    default = schedule(snapshot(NODES, pending, work, vcs=vcs, now=10.0,
                                config=SchedulerConfig(drain_after=300.0)))
    assert {s.job_id for s in default.starts} == {2, 3}  # before it drains, anything fills idle GPUs
    policy = SchedulerConfig(drain_after=300.0, reserve_at_once=True)
    vc_x = (VirtualCluster("x", {"A100": 16}, allow_priority_preemption=False),)
    decisions = schedule(snapshot(NODES, pending, work, vcs=vc_x, now=10.0, config=policy))
    assert {s.job_id for s in decisions.starts} == {3}  # its own priority is spared
    assert next(w for w in decisions.waits if w.job_id == 2).reason == PendingReason.RESERVED


@st.composite
def busy_vc(draw):
    """One VC owning the cluster, full of its low-priority jobs of random lengths; a prod
    gang wanting every GPU; more low-priority jobs arriving every cycle."""
    count = draw(st.integers(1, 3))
    world = World(tuple(node(f"n{i}", 8) for i in range(count)),
                  vcs=(VirtualCluster("x", {"A100": 8 * count}, allow_priority_preemption=False),),
                  config=SchedulerConfig(reserve_at_once=True, borrowing=draw(st.booleans())))
    arrival = st.tuples(st.sampled_from((1000, 2000, 4000)), st.sampled_from((5.0, 15.0, 35.0)))
    arrivals = draw(st.lists(st.lists(arrival, max_size=4), min_size=8, max_size=8))
    return world, count, arrivals


@settings(max_examples=60, deadline=None)
@given(busy_vc())
def test_a_higher_priority_gang_is_never_overtaken_by_lower_priorities_arriving_after_it(scenario) -> None:
    world, count, arrivals = scenario
    next_id = 0

    def arrive(batch: list[tuple[int, float]]) -> None:
        nonlocal next_id
        for gpus, seconds in batch:
            next_id += 1
            world.submit(job(next_id, gpus, vc="x", rank=2, at=world.now + next_id * 1e-3), seconds)

    arrive(arrivals[0])
    world.cycle()
    gang = PendingJob(10_000, 0, world.now, tuple(TaskRequest("w", i, 8000) for i in range(count)), "", "x")
    world.submit(gang, 10.0)
    ahead = max((world.ends[j] for j in world.running), default=world.now)  # work running when it came
    for batch in arrivals[1:]:
        arrive(batch)
        world.cycle()
        if gang.job_id in world.running:
            break
        world.advance(5.0)
    else:
        world.cycle()
    # Nothing that came after it started before it, and it started once what ran before it ended.
    assert gang.job_id in world.running or world.now < ahead, describe(world)
    started_after = [j for j, at in world.started_at.items() if at > gang.submitted_at and j != gang.job_id
                     and at < world.started_at.get(gang.job_id, float("inf")) and world.submitted[j].submitted_at
                     > gang.submitted_at and world.submitted[j].priority_rank > 0]
    assert started_after == [], describe(world)
