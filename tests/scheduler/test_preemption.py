"""Preemption: reclaiming a VC's share from opportunistic work, and priority within a VC."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from scheduler_world import World, job, node, on, running, snapshot

from trainyard.scheduler.schedule import PLANS_PER_QUEUE, schedule
from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import (
    PendingJob,
    PendingReason,
    SchedulerConfig,
    TaskRequest,
    VirtualCluster,
)

OPPO, LOW, NORMAL, PROD = 3, 2, 1, 0
ALICE, BOB = VirtualCluster("alice", {"A100": 4}), VirtualCluster("bob", {"A100": 4})


def test_a_cpu_only_job_that_reclaims_says_it_needs_cpu_and_memory_not_gpus() -> None:
    """A trial read "needs its guaranteed GPUs back" of a job that asks for no GPU: it
    reclaims the node's CPU and memory that opportunistic work holds."""
    world = World((node("gpu-box", cpu=4000),), vcs=(ALICE, BOB))
    world.submit(job(2, 8000, rank=OPPO, vc="bob", at=0.0, cpu=4000), duration=10_000)
    world.cycle()
    world.advance(5)
    world.submit(job(1, 0, rank=NORMAL, vc="alice", at=5.0, cpu=2000), duration=100)
    [preempt] = world.cycle().preemptions
    assert preempt.reason == "reclaimed: VC alice needs the CPU and memory it holds for job 1"


def test_a_guaranteed_job_reclaims_its_vcs_share_from_opportunistic_work_end_to_end() -> None:
    """The issue's live scenario: bob's opportunistic 8-GPU job yields to alice's 4 GPUs."""
    world = World((node("gpu-box"),), vcs=(ALICE, BOB))
    world.submit(job(2, 8000, rank=OPPO, vc="bob", at=0.0), duration=10_000)
    world.cycle()
    assert set(world.running) == {2}
    world.advance(5)
    world.submit(job(1, 4000, rank=NORMAL, vc="alice", at=5.0), duration=100)
    decisions = world.cycle()
    assert decisions.starts == ()
    [preempt] = decisions.preemptions
    assert (preempt.job_id, preempt.for_job_id, preempt.grace_seconds) == (2, 1, 30.0)
    assert preempt.reason == "reclaimed: VC alice needs its guaranteed GPUs back for job 1"
    [wait] = decisions.waits
    assert (wait.job_id, wait.reason, wait.eta) == (1, PendingReason.PREEMPTING, 35.0)
    assert wait.message == "waiting for job(s) 2 to stop; they are being preempted for it"
    world.advance(10)  # within the grace period: still waiting, nothing preempted twice
    decisions = world.cycle()
    assert decisions.preemptions == () and decisions.waits[0].reason == PendingReason.PREEMPTING
    world.advance(20)  # bob's job has stopped and is requeued
    assert world.cycle().starts[0].job_id == 1  # alice starts within grace + one cycle
    assert world.snapshot().pending[0].job_id == 2
    world.advance(100)  # alice is done: bob runs again
    assert [s.job_id for s in world.cycle().starts] == [2]


def test_a_job_being_preempted_is_not_preempted_twice_and_counts_for_the_job_that_needs_it() -> None:
    work = [running(90, on("a", *range(8)), rank=OPPO, vc="bob")]
    pending = [job(1, 4000, vc="alice")]
    decisions = schedule(snapshot((node("a"),), pending, work, vcs=(ALICE, BOB), preempting=frozenset({90})))
    assert decisions.preemptions == ()
    assert decisions.waits[0].reason == PendingReason.PREEMPTING


VICTIM_CASES = [
    pytest.param(
        [running(90, on("a", 0, 1), rank=OPPO, started=0), running(91, on("a", 2, 3), rank=OPPO, started=50),
         running(92, on("a", 4, 5), rank=LOW, vc="big", started=60), running(93, on("a", 6, 7), rank=OPPO, started=20)],
        job(1, 2000, rank=PROD, vc="big"),
        [91],
        id="opportunistic work goes first, the shortest-running of it first",
    ),
    pytest.param(
        [running(90, on("a", 0, 1, 2, 3), rank=NORMAL, vc="big", started=0),
         running(91, on("a", 4, 5, 6, 7), rank=LOW, vc="big", started=0)],
        job(1, 4000, rank=PROD, vc="big"),
        [91],
        id="a higher priority preempts the lowest priority of its own VC first",
    ),
    pytest.param(
        [running(90, on("a", 0, 1, 2, 3), rank=NORMAL, vc="big", started=0),
         running(91, on("a", 4, 5, 6, 7), rank=LOW, vc="big", started=0)],
        job(1, 8000, rank=PROD, vc="big"),
        [90, 91],
        id="as many victims as the job needs and no more",
    ),
    pytest.param(
        [running(90, on("a", 0, 1, 2, 3), rank=NORMAL, vc="big"),
         running(91, on("a", 4, 5, 6, 7), rank=NORMAL, vc="big")],
        job(1, 4000, rank=NORMAL, vc="big"),
        [],
        id="equal priority never preempts",
    ),
    pytest.param(
        [running(90, on("a", 0, 1, 2, 3), on("b", 0, 1, 2, 3), rank=OPPO, started=0),
         running(91, on("b", 4, 5, 6, 7), rank=OPPO, started=0),
         running(92, on("a", 4, 5, 6, 7), rank=OPPO, started=10)],
        job(1, 8000, rank=PROD, vc="big"),
        [90, 92],
        id="a gang is preempted whole, and only victims that help are kept",
    ),
]


@pytest.mark.parametrize(("work", "pending", "victims"), VICTIM_CASES)
def test_the_planner_picks_the_fewest_cheapest_victims(work, pending, victims) -> None:
    big = VirtualCluster("big", {"A100": 16})
    nodes = {p.node for w in work for p in w.placements}
    decisions = schedule(snapshot(tuple(node(n) for n in sorted(nodes)), [pending], work, vcs=(big,)))
    assert [p.job_id for p in decisions.preemptions] == victims
    assert decisions.starts == ()


def test_another_vcs_guaranteed_job_within_its_quota_is_never_preempted() -> None:
    work = [running(90, on("a", *range(4)), rank=LOW, vc="bob"), running(91, on("a", 4, 5, 6, 7), rank=OPPO, vc="bob")]
    decisions = schedule(snapshot((node("a"),), [job(1, 8000, rank=PROD, vc="alice")],
                                  work, vcs=(VirtualCluster("alice", {"A100": 8}), BOB)))
    assert decisions.preemptions == ()  # the opportunistic half alone would not do
    assert decisions.waits[0].reason == PendingReason.NO_FIT


def test_a_lowered_quota_alone_stops_nothing() -> None:
    work = [running(90, on("a", *range(8)), rank=LOW, vc="bob")]  # bob holds 8, its quota is now 4
    decisions = schedule(snapshot((node("a"),), [job(1, 1000, rank=LOW, vc="bob")], work, vcs=(ALICE, BOB)))
    assert decisions.preemptions == () and decisions.starts == ()
    assert decisions.waits[0].reason == PendingReason.QUOTA


def test_a_vc_over_its_lowered_quota_gives_back_what_another_vc_needs_and_no_more() -> None:
    """An admin moved 4 of bob's 8 GPUs to alice. Bob keeps running until alice needs them;
    then bob's cheapest jobs that make room stop — here a whole node, since alice's quota is
    one 4-GPU cell: LOW and NORMAL on b rather than PROD and LOW on a — and bob keeps its
    quota's worth."""
    world = World((node("a", 4), node("b", 4)), vcs=(ALICE, BOB))
    for job_id, (where, rank, started) in enumerate((("a", PROD, 1.0), ("a", LOW, 2.0), ("b", LOW, 3.0),
                                                     ("b", NORMAL, 4.0)), start=90):
        index = (job_id - 90) % 2 * 2
        world.running[job_id] = running(job_id, on(where, index, index + 1), rank=rank, vc="bob", started=started)
        world.ends[job_id] = float("inf")
        world.submitted[job_id] = job(job_id, 2000, rank=rank, vc="bob")
    assert world.cycle().preemptions == ()  # over quota, but nobody needs the GPUs back
    world.submit(job(1, 2000, 2000, rank=LOW, vc="alice"))
    decisions = world.cycle()
    assert {p.job_id for p in decisions.preemptions} == {92, 93}
    assert all("bob holds more than its quota" in p.reason for p in decisions.preemptions)
    assert decisions.waits[0].reason == PendingReason.PREEMPTING
    world.advance(30.0)
    world.cycle()
    assert set(world.running) == {1, 90, 91}


def test_a_vc_can_turn_priority_preemption_off() -> None:
    calm = VirtualCluster("calm", {"A100": 8}, allow_priority_preemption=False)
    work = [running(90, on("a", *range(8)), rank=LOW, vc="calm")]
    decisions = schedule(snapshot((node("a"),), [job(1, 4000, rank=PROD, vc="calm")], work, vcs=(calm,)))
    assert decisions.preemptions == ()
    assert decisions.waits[0].reason == PendingReason.QUOTA


def test_without_vcs_priority_preempts_as_in_a_vc_opportunistic_work_first() -> None:
    work = [running(90, on("a", 0, 1, 2, 3), rank=LOW), running(91, on("a", 4, 5, 6, 7), rank=OPPO)]
    decisions = schedule(snapshot((node("a"),), [job(1, 8000, rank=PROD)], work))
    assert sorted(p.job_id for p in decisions.preemptions) == [90, 91]  # lower priority gives way
    decisions = schedule(snapshot((node("a"),), [job(1, 4000, rank=PROD)], work))
    assert [p.job_id for p in decisions.preemptions] == [91]  # opportunistic work first
    decisions = schedule(snapshot((node("a"),), [job(1, 8000, rank=LOW)], work))
    assert [p.job_id for p in decisions.preemptions] == []  # never a job of the same or higher priority


def test_what_a_preemption_frees_is_held_for_the_job_it_is_for() -> None:
    work = [running(90, on("a", 0, 1, 2, 3, 4, 5), rank=OPPO, vc="bob")]
    big = VirtualCluster("big", {"A100": 8})
    pending = [job(1, 8000, vc="big"), job(2, 1000, rank=OPPO, vc="bob", at=0.0)]
    decisions = schedule(snapshot((node("a"),), pending, work, vcs=(big, BOB)))
    assert [p.job_id for p in decisions.preemptions] == [90]
    assert decisions.starts == ()  # not even on the two GPUs that were free


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(job(10, 4000, vc="vision", at=1.0), id="the first job cannot get 4 GPUs on one node"),
        pytest.param(job(10, 1000, 1000, 1000, 1000, 1000, 1000, 1000, vc="vision", at=1.0),
                     id="the first job is bigger than its VC's quota"),
    ],
)
def test_a_job_that_preemption_cannot_help_does_not_keep_those_behind_it_from_their_share(head) -> None:
    # VC speech's guaranteed work sits on both nodes; opportunistic work fills the rest.
    vcs = (VirtualCluster("vision", {"A100": 6}), VirtualCluster("speech", {"A100": 2}))
    work = [
        running(1, on("n0", 0), vc="speech"),
        running(2, on("n1", 0), vc="speech"),
        running(3, on("n0", 1, 2, 3), vc="speech", rank=OPPO),
        running(4, on("n1", 1, 2, 3), vc="speech", rank=OPPO),
    ]
    small = job(11, 1000, vc="vision", at=2.0)
    decisions = schedule(snapshot((node("n0", 4), node("n1", 4)), (head, small), work, vcs=vcs))
    assert [(p.job_id, p.for_job_id) for p in decisions.preemptions] == [(3, 11)]
    assert {w.job_id: w.reason for w in decisions.waits}[11] == PendingReason.PREEMPTING


def test_a_long_queue_that_needs_preemption_is_planned_over_a_few_cycles_in_order() -> None:
    """At most PLANS_PER_QUEUE plans that stop more work per VC queue and cycle (each is a
    search); the rest wait as BEHIND and are planned in the next cycles — plans that only
    wait on work already stopping do not count against it."""
    world = World(tuple(node(f"n{i}", 8) for i in range(5)), vcs=(VirtualCluster("a", {"A100": 40}),))
    for i in range(40):
        world.running[100 + i] = running(100 + i, on(f"n{i // 8}", i % 8), rank=OPPO, vc="a", grace=300)
        world.ends[100 + i] = float("inf")
        world.submitted[100 + i] = job(100 + i, 1000, rank=OPPO, vc="a")
    for i in range(1, 41):
        world.submit(job(i, 1000, vc="a"))
    cap = PLANS_PER_QUEUE
    first = world.cycle()
    assert len(first.preemptions) == cap
    waits = {w.job_id: w for w in first.waits}
    assert waits[cap].reason == PendingReason.PREEMPTING and waits[cap + 1].reason == PendingReason.BEHIND
    assert f"{cap + 1}th in VC a" in waits[cap + 1].message
    planned = cap
    while planned < 40:
        world.advance(10.0)
        planned += len(world.cycle().preemptions)
    assert all(w.reason == PendingReason.PREEMPTING for w in world.history[-1].waits)
    assert len(world.history) <= 1 + -(-(40 - cap) // cap)


def test_past_the_plan_cap_a_job_no_preemption_could_help_keeps_its_own_reason() -> None:
    """The jobs past the cap wait as BEHIND because their turn to preempt comes next cycle;
    a V100 job whose only V100 node runs another VC's guaranteed work has nothing to preempt
    and says that the GPUs are taken, as it would without the cap."""
    nodes = (*(node(f"n{i}", 8) for i in range(5)), node("v0", 8, model="V100"))
    world = World(nodes, vcs=(VirtualCluster("a", {"A100": 40, "V100": 8}), VirtualCluster("b", {"V100": 8})))
    for i in range(40):
        world.running[100 + i] = running(100 + i, on(f"n{i // 8}", i % 8), rank=OPPO, vc="a", grace=300)
        world.ends[100 + i] = float("inf")
        world.submitted[100 + i] = job(100 + i, 1000, rank=OPPO, vc="a")
    world.running[200] = running(200, on("v0", *range(8)), vc="b")
    world.ends[200] = float("inf")
    world.submitted[200] = job(200, *[1000] * 8, vc="b")
    for i in range(1, 21):
        world.submit(job(i, 1000, vc="a"))
    world.submit(job(21, 1000, vc="a", models=("V100",)))
    waits = {w.job_id: w for w in world.cycle().waits}
    assert waits[PLANS_PER_QUEUE + 1].reason == PendingReason.BEHIND
    assert waits[21].reason == PendingReason.NO_FIT


def test_a_vc_over_its_quota_for_one_model_keeps_its_work_on_another() -> None:
    """bob's A100 quota was lowered (it holds 8 of 4), its V100 work is within quota: alice,
    who needs V100, gets nothing of bob's."""
    nodes = (node("a0", 4), node("a1", 4), node("v0", 4, model="V100"), node("v1", 4, model="V100", schedulable=False))
    vcs = (VirtualCluster("alice", {"V100": 4}), VirtualCluster("bob", {"A100": 4, "V100": 4}))
    work = [running(1, on("a0", 0, 1, 2, 3), vc="bob"), running(2, on("a1", 0, 1, 2, 3), vc="bob", started=1),
            running(3, on("v0", 0, 1, 2, 3), vc="bob", started=2)]
    decisions = schedule(snapshot(nodes, [job(10, 1000, 1000, 1000, 1000, vc="alice", models=("V100",))],
                                  work, vcs=vcs))
    assert decisions.preemptions == ()
    assert decisions.waits[0].reason == PendingReason.NO_FIT


def _world_with(nodes, vcs, work, *, stopping=(), now=0.0, scorer="fgd-cpu") -> World:
    """A world whose ``work`` runs already (as if placed by earlier cycles), ``stopping``
    of it being preempted; each job is requeued as itself when it stops."""
    world = World(nodes, vcs=vcs, config=SchedulerConfig(scorer=scorer), now=now)
    for w in work:
        stops_by = now + w.grace_seconds if w.job_id in stopping else None
        world.running[w.job_id] = replace(w, stops_by=stops_by)
        world.ends[w.job_id] = world.durations[w.job_id] = math.inf
        tasks = tuple(TaskRequest("w", p.index, sum(s.milli for s in p.gpus)) for p in w.placements)
        world.submitted[w.job_id] = PendingJob(w.job_id, w.priority_rank, w.started_at, tasks, w.user, w.vc)
        if stops_by is not None:
            world.stopping[w.job_id] = stops_by
    return world


def _stop_what_is_stopping(world: World) -> None:
    for victim in list(world.stopping):
        world.stopping[victim] = world.now
    world.advance(0.0)


def test_a_plan_holds_once_another_vcs_stopping_work_changes_which_of_its_nodes_is_whole() -> None:
    """Cells of 2 GPUs on 4-GPU nodes: each VC may hold one whole node and one loose cell.
    VC y's whole node is n1 only because its job 4, placed first, is there; job 4 is being
    preempted, and once it is gone the next cycle makes n2, where y's job 6 runs, y's whole
    node instead — taking the free cell beside job 6 that x's full-quota gang could use
    now. So x's plan must be made in the cells of that next cycle (reclaim n0 and the
    cell of n1 beside job 6), and wait for job 4 as well."""
    x, y = VirtualCluster("x", {"A100": 6}), VirtualCluster("y", {"A100": 6})
    work = [
        running(4, on("n1", 0), on("n1", 1, milli=250), rank=LOW, vc="y", started=0.0),
        running(5, on("n0", 0, 1, 2, 3), rank=OPPO, vc="y", started=5.0),
        running(6, on("n1", 1, milli=250), on("n2", 0, 1), rank=PROD, vc="y", started=40.0),
        running(7, on("n1", 2, milli=250), rank=OPPO, vc="y", started=25.0),
    ]
    world = _world_with(tuple(node(f"n{i}", 4) for i in range(3)), (x, y), work, stopping={4}, now=45.0)
    gang = job(10, *[1000] * 6, rank=PROD, vc="x", at=45.0)
    world.submit(gang)
    decisions = world.cycle()
    assert sorted(p.job_id for p in decisions.preemptions) == [5, 7]
    [wait] = decisions.waits
    assert wait.reason == PendingReason.PREEMPTING
    assert wait.message == "waiting for job(s) 4, 5, 7 to stop; they are being preempted for it"
    _stop_what_is_stopping(world)
    world.cycle()
    assert gang.job_id in world.running


def test_a_plan_holds_once_its_victim_leaves_another_vc_alone_on_a_node() -> None:
    """Cells of 4 GPUs on 8-GPU nodes. nlp's job 4 holds a cell of n1 beside vision's job 2;
    preempting job 4 for nlp's job 1 leaves vision alone on n1. The next cycle derives job
    2's cell as vision's loose cell (vision has one: loose cells are spent before whole
    nodes), not its whole node, so n1's other cell stays a hole for job 1's small task and
    job 4 is the only victim. (When a node left to one VC became its whole node, the plan
    had to reclaim the fresh node n0 from opportunistic job 3 as well.)"""
    vision, nlp = VirtualCluster("vision", {"A100": 12}), VirtualCluster("nlp", {"A100": 12})
    work = [
        running(2, on("n1", 4, milli=250), rank=PROD, vc="vision", started=5.0),
        running(3, on("n0", *range(8)), rank=OPPO, vc="vision", started=0.0),
        running(4, on("n1", 0, milli=250), on("n2", *range(8)), rank=NORMAL, vc="nlp", started=5.0),
    ]
    world = _world_with(tuple(node(f"n{i}") for i in range(3)), (vision, nlp), work, now=10.0, scorer="bestfit")
    pending = job(1, 250, 8000, rank=PROD, vc="nlp", at=10.0)
    world.submit(pending)
    decisions = world.cycle()
    assert sorted(p.job_id for p in decisions.preemptions) == [4]
    _stop_what_is_stopping(world)
    world.cycle()
    assert pending.job_id in world.running
    assert {p.node for p in world.running[pending.job_id].placements} == {"n1", "n2"}


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_a_plan_for_a_gang_holds_once_its_victim_stops_whatever_else_waits(scorer) -> None:
    """Hypothesis seed 63. Job 3's 2-GPU task needs 2.5 CPU, which only node a has; its
    4-GPU task goes first (largest first) and may take a's 4 GPUs. Whether it did depended
    on the scorer and, for FGD, on the pending mix: with job 4 waiting too, FGD put it on b
    and preempted job 5 (holding a CPU of a) for a plan that, once job 5 had stopped, no
    longer placed job 3 when it waited alone — on a cluster with nothing running."""
    nodes = (node("a", 4, cpu=3000, memory=4096), node("b", 8, model="V100", cpu=2000, memory=4096))
    gang = PendingJob(3, PROD, 3.0, (TaskRequest("w", 0, 2000, 2500, 0), TaskRequest("w", 1, 4000, 0, 3072)))
    other = PendingJob(4, PROD, 4.0, (TaskRequest("w", 0, 250, 0, 1024, ("A100",)), TaskRequest("w", 1, 0, 2500, 4096)))
    victim = running(5, on("b", 0, milli=250, cpu=0, memory=0), on("a", cpu=1000, memory=0), rank=OPPO)
    config = SchedulerConfig(scorer=scorer)
    decisions = schedule(snapshot(nodes, [gang, other], [victim], config=config))
    assert [(p.job_id, p.for_job_id) for p in decisions.preemptions] == [(5, 3)]
    for waiting in ([gang, other], [gang]):
        [start] = schedule(snapshot(nodes, waiting, config=config)).starts
        assert start.job_id == 3
        assert {p.index: p.node for p in start.placements} == {0: "a", 1: "b"}
