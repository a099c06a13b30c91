"""Time-sharing: suspendable jobs of one VC and priority take turns, least attained service
first — from a job with twice the service and past a floor —, a time slice apart;
preemption for priority prefers suspendable victims."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scheduler_world import World, job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import PendingReason, SchedulerConfig, VirtualCluster

LOW, NORMAL, PROD = 2, 1, 0
TEAM, OTHER = VirtualCluster("team", {"A100": 8}), VirtualCluster("other", {"A100": 8})
SLICE = SchedulerConfig().time_slice


def _decide(pending, work, *, now: float, vcs=(TEAM,), config: SchedulerConfig | None = None, nodes=None):
    nodes = nodes or (node("a"),)
    return schedule(snapshot(nodes, pending, work, now=now, vcs=vcs, config=config or SchedulerConfig()))


def test_a_waiting_job_suspends_a_running_one_with_more_service_once_its_slice_is_over() -> None:
    work = [running(90, on("a", *range(8)), vc="team", suspendable=True, attained=3600.0)]
    waiting = [job(1, 4000, vc="team", at=10.0)]
    early = _decide(waiting, work, now=SLICE - 1)
    assert early.preemptions == ()
    assert early.waits[0].reason == PendingReason.QUOTA
    decisions = _decide(waiting, work, now=SLICE)
    [preempt] = decisions.preemptions
    assert (preempt.job_id, preempt.for_job_id, preempt.suspend) == (90, 1, True)
    assert "take its turn" in preempt.reason and "5.0 GPU-h" in preempt.reason  # 1 + 8 GPUs × 0.5 h
    assert decisions.waits[0].reason == PendingReason.PREEMPTING


def test_a_job_is_suspended_only_for_one_with_less_than_half_its_service() -> None:
    """Job 90 has 4 GPU-h by the end of its slice: a job with 2 GPU-h (half) waits, one with
    a second less takes its turn — jobs of similar service do not alternate every slice."""
    work = [running(90, on("a", *range(8)), vc="team", suspendable=True, started=0.0)]
    four_gpu_hours = 8 * SLICE  # what job 90 has received by then
    assert SchedulerConfig().turn_ratio == 2.0
    for attained in (four_gpu_hours / 2, four_gpu_hours):
        decisions = _decide([job(1, 4000, vc="team", attained=attained)], work, now=SLICE)
        assert decisions.preemptions == ()
    decisions = _decide([job(1, 4000, vc="team", attained=four_gpu_hours / 2 - 1)], work, now=SLICE)
    assert [p.job_id for p in decisions.preemptions] == [90]


def test_a_job_is_not_suspended_before_it_has_received_the_floor_of_service() -> None:
    """A 1-GPU job has 0.5 GPU-h when its slice ends: below the 2 GPU-h floor it keeps its
    turn, so short jobs finish in one go; past the floor a new job takes its turn."""
    floor = SchedulerConfig().turn_floor
    assert floor == 2 * 3600.0
    work = [running(90, on("a", 0), vc="team", suspendable=True, started=0.0)]
    waiting = [job(1, 1000, vc="team", at=10.0)]
    for now in (SLICE, floor):
        assert _decide(waiting, work, now=now, nodes=(node("a", 1),)).preemptions == ()
    decisions = _decide(waiting, work, now=floor + 1, nodes=(node("a", 1),))
    assert [p.job_id for p in decisions.preemptions] == [90]


@pytest.mark.parametrize(
    ("victim", "config"),
    [
        pytest.param(running(90, on("a", *range(8)), vc="team"), None, id="not suspendable"),
        pytest.param(running(90, on("a", *range(8)), vc="team", rank=PROD, suspendable=True), None,
                     id="of a higher priority"),
        pytest.param(running(90, on("a", *range(8)), vc="other", suspendable=True), None, id="of another VC"),
        pytest.param(running(90, on("a", *range(8)), vc="team", suspendable=True), SchedulerConfig(timeshare=False),
                     id="time-sharing off"),
    ],
)
def test_only_suspendable_jobs_of_the_same_vc_and_priority_take_turns(victim, config) -> None:
    decisions = _decide([job(1, 4000, vc="team")], [victim], now=10 * SLICE, vcs=(TEAM, OTHER), config=config)
    assert decisions.preemptions == ()
    assert decisions.starts == ()


def test_without_vcs_every_guaranteed_job_of_a_priority_takes_turns_with_every_other() -> None:
    work = [running(90, on("a", *range(8)), vc="x", suspendable=True)]
    decisions = _decide([job(1, 4000, vc="y")], work, now=SLICE, vcs=())
    assert [(p.job_id, p.suspend) for p in decisions.preemptions] == [(90, True)]


def test_the_job_that_has_received_the_most_service_is_suspended_first() -> None:
    work = [
        running(90, on("a", 0, 1, 2, 3), vc="team", suspendable=True, attained=100.0),
        running(91, on("a", 4, 5, 6, 7), vc="team", suspendable=True, attained=50_000.0),
    ]
    decisions = _decide([job(1, 4000, vc="team")], work, now=SLICE)
    assert [p.job_id for p in decisions.preemptions] == [91]


def test_waiting_jobs_of_a_priority_go_in_order_of_least_attained_service() -> None:
    pending = [job(1, 8000, vc="team", at=1.0, attained=7200.0), job(2, 8000, vc="team", at=2.0)]
    assert [s.job_id for s in _decide(pending, [], now=0.0).starts] == [2]
    fifo = SchedulerConfig(timeshare=False)
    assert [s.job_id for s in _decide(pending, [], now=0.0, config=fifo).starts] == [1]


def test_preemption_for_priority_prefers_a_suspendable_victim() -> None:
    older = running(90, on("a", 0, 1, 2, 3), vc="team", rank=LOW, started=0.0)
    newer = running(91, on("a", 4, 5, 6, 7), vc="team", rank=LOW, started=100.0)
    urgent = [job(1, 4000, vc="team", rank=PROD)]
    # Of two jobs that cannot be suspended, the one that loses least (started last) stops.
    assert [p.job_id for p in _decide(urgent, [older, newer], now=200.0).preemptions] == [91]
    decisions = _decide(urgent, [replace(older, suspendable=True), newer], now=200.0)
    assert [(p.job_id, p.suspend) for p in decisions.preemptions] == [(90, True)]
    assert "higher priority" in decisions.preemptions[0].reason


def test_two_jobs_take_turns_each_for_a_whole_slice() -> None:
    """Two suspendable 8-GPU jobs of one VC on one node (no floor of service): they
    alternate, each time the one running has received twice the service of the one
    waiting, so turns grow longer; neither is suspended before it has run a whole slice,
    and each resumes with its service."""
    slice_ = 100.0
    world = World((node("a"),), vcs=(TEAM,), config=SchedulerConfig(time_slice=slice_, turn_floor=0.0))
    world.submit(job(1, 8000, vc="team", suspendable=True))
    world.submit(job(2, 8000, vc="team", suspendable=True))
    holder, runs = [], []
    for _ in range(300):
        world.cycle()
        current = sorted(j for j in world.running if j not in world.stopping)
        if current:
            holder.append((world.now, current[0]))
        world.advance(10.0)
    for (t, j), (_, previous) in zip(holder[1:], holder, strict=False):
        if j != previous:
            runs.append((t, j))
    assert [j for _, j in runs][:4] == [2, 1, 2, 1]
    starts = [holder[0][0]] + [t for t, _ in runs]
    lengths = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(length >= slice_ for length in lengths)
    assert lengths[2] > lengths[0]  # turns grow with the service: no alternating every slice
    first = world.records[1]
    assert len(first.attempts) >= 3  # suspended and resumed as new attempts of its chain
    assert world.running.get(1, world.pending.get(1)).attained_service > 0
