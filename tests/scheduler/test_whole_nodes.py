"""Whole-node tasks (``taskRoles.<role>.nodes``): alone on an empty suitable node, all of it,
as a gang, counted in quotas by the GPUs taken, preempting like any job of its priority."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, note, settings
from hypothesis import strategies as st
from scheduler_world import World, check_capacity, describe, job, node, on, running, snapshot
from test_invariants import check_preemptions, check_quotas, permuted

from trainyard.core.priorities import OPPORTUNISTIC_RANK
from trainyard.scheduler.schedule import never_fits, schedule
from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import (
    Decisions,
    NodeState,
    PendingJob,
    PendingReason,
    SchedulerConfig,
    Snapshot,
    TaskRequest,
    VirtualCluster,
)


def whole(job_id: int, nodes: int = 1, *, rank: int = 1, vc: str = "default", models: tuple[str, ...] = (),
          at: float | None = None) -> PendingJob:
    """A job of ``nodes`` whole-node tasks, as ``services.requests`` makes them."""
    tasks = tuple(TaskRequest("w", i, 0, 0, 0, models, whole_node=True) for i in range(nodes))
    return PendingJob(job_id, rank, float(job_id) if at is None else at, tasks, vc=vc)


def placements_of(d: Decisions, job_id: int):
    return next(s.placements for s in d.starts if s.job_id == job_id)


def test_a_whole_node_task_gets_every_gpu_all_the_cpu_and_memory_of_an_empty_node() -> None:
    d = schedule(snapshot([node("a", 4, cpu=32_000, memory=256_000)], [whole(1)]))
    (p,) = placements_of(d, 1)
    assert p.node == "a" and p.whole_node
    assert [(g.index, g.milli) for g in p.gpus] == [(i, 1000) for i in range(4)]
    assert (p.cpu_milli, p.memory_mb) == (32_000, 256_000)


def test_it_takes_the_smallest_empty_node_that_suits_it_and_never_a_partly_used_one() -> None:
    nodes = [node("big", 8), node("small", 4), node("used", 2, used={0: 250})]
    d = schedule(snapshot(nodes, [whole(1)]))
    assert [p.node for p in placements_of(d, 1)] == ["small"]
    d = schedule(snapshot([node("used", 2, used={0: 250})], [whole(1)]))
    assert not d.starts and d.waits[0].reason == PendingReason.NO_FIT


def test_a_cpu_only_task_on_the_node_keeps_it_from_being_whole() -> None:
    cpu_only = running(5, on("a", cpu=500, memory=0))
    d = schedule(snapshot([node("a", 4)], [whole(1)], [cpu_only]))
    assert not d.starts
    assert d.waits[0].message.startswith("needs 1 whole node of 4 GPUs; 0 of the 1 that suit it are empty")


def test_nothing_shares_its_node_not_even_a_task_that_asks_for_nothing() -> None:
    nodes = [node("a", 2), node("b", 2)]
    nothing = PendingJob(2, 1, 2.0, (TaskRequest("w", 0, 0, 0, 0),))
    fraction = job(3, 250, cpu=0, memory=0)
    d = schedule(snapshot(nodes, [whole(1), nothing, fraction]))
    taken = placements_of(d, 1)[0].node
    others = [p.node for s in d.starts if s.job_id != 1 for p in s.placements]
    assert others and taken not in others
    # ... and once it runs, the next cycle keeps off its node too.
    w = World(tuple(nodes))
    w.submit(whole(1))
    w.cycle()
    w.submit(PendingJob(2, 1, 2.0, (TaskRequest("w", 0, 0, 0, 0),)))
    w.submit(job(3, 250, cpu=0, memory=0))
    w.submit(PendingJob(4, 1, 4.0, (TaskRequest("w", 0, 0, 0, 0), TaskRequest("w", 1, 0, 0, 0))))
    w.cycle()
    taken = w.running[1].placements[0].node
    assert all(p.node != taken for j, r in w.running.items() if j != 1 for p in r.placements), describe(w)


def test_a_task_holding_all_of_its_node_seals_it_whatever_its_request_said() -> None:
    """The store keeps what a task holds, not how it asked: a task holding every GPU, all
    the CPU and memory is whole-node work in the next cycle's snapshot."""
    holder = running(5, on("a", 0, 1, cpu=64_000, memory=512_000))
    nothing = PendingJob(2, 1, 2.0, (TaskRequest("w", 0, 0, 0, 0),))
    d = schedule(snapshot([node("a", 2)], [nothing], [holder]))
    assert not d.starts


def test_a_gang_of_whole_nodes_starts_whole_or_not_at_all_with_the_reason() -> None:
    nodes = [node("a", 8), node("b", 8, used={3: 500})]
    d = schedule(snapshot(nodes, [whole(1, 2)]))
    assert not d.starts
    (wait,) = d.waits
    assert wait.reason == PendingReason.NO_FIT
    assert wait.message.startswith("needs 2 whole nodes of 8 GPUs; 1 of the 2 that suit it is empty")
    assert wait.short.startswith("1/2 whole nodes empty")
    d = schedule(snapshot([node("a", 8), node("b", 8), node("c", 8)], [whole(1, 2)]))
    assert sorted(p.node for p in placements_of(d, 1)) == ["a", "b"]


def test_gpu_model_shorthands_choose_the_kind_of_node() -> None:
    nodes = [node("a", 4, model="V100"), node("b", 8, model="A100")]
    d = schedule(snapshot(nodes, [whole(1, models=("A100",))]))
    assert [p.node for p in placements_of(d, 1)] == ["b"]
    d = schedule(snapshot(nodes, [whole(1, models=("H100",))]))
    assert d.waits[0].message.startswith("needs 1 whole node(s) with only H100 GPUs; no node that takes work has them")


def test_quotas_count_the_gpus_of_the_nodes_taken() -> None:
    vcs = (VirtualCluster("v", {"A100": 12}),)
    nodes = [node("a", 8), node("b", 8)]
    unlent = SchedulerConfig(borrowing=False)  # else job 2 borrows the GPUs no VC guarantees
    d = schedule(snapshot(nodes, [whole(1, vc="v"), job(2, 4000, 1000, vc="v")], vcs=vcs, config=unlent))
    assert [s.job_id for s in d.starts] == [1]  # 8 of 12 taken: 5 more do not fit the quota
    (wait,) = d.waits
    assert wait.reason == PendingReason.QUOTA and "needs 5 A100, 4 of 12 free" in wait.message
    # Two whole nodes are 16 GPUs: over a quota of 12 the job never starts at its priority.
    d = schedule(snapshot(nodes, [whole(1, 2, vc="v")], vcs=vcs, config=unlent))
    assert not d.starts and d.waits[0].reason == PendingReason.QUOTA


def test_a_guaranteed_whole_node_job_reclaims_whole_nodes_from_opportunistic_work() -> None:
    w = World((node("a", 8), node("b", 8)), vcs=(VirtualCluster("v", {"A100": 16}),))
    for i in range(1, 5):
        w.submit(job(i, 4000, rank=OPPORTUNISTIC_RANK, vc="v"))
    w.cycle()
    w.advance(1)
    w.submit(whole(9, vc="v"))
    d = w.cycle()
    assert d.waits[0].reason == PendingReason.PREEMPTING
    victims = {p.job_id for p in d.preemptions}
    stopped_nodes = {p.node for v in victims for p in w.running[v].placements}
    assert len(stopped_nodes) == 1  # one node emptied, the other left alone
    w.advance(40)
    d = w.cycle()
    assert [p.node for p in placements_of(d, 9)] == sorted(stopped_nodes)


def test_a_job_asking_for_more_whole_nodes_than_the_cluster_has_is_refused_at_submit() -> None:
    nodes = [node("a", 8), node("b", 4, model="V100"), NodeState("cpu", 8000, 4096)]
    tasks = list(whole(1, 2, models=("A100",)).tasks)
    assert never_fits(nodes, tasks) == ["taskRoles.w: needs 2 whole nodes with A100 GPUs; the cluster has 1"]
    assert never_fits(nodes, list(whole(1, 2).tasks)) == []
    assert never_fits([NodeState("cpu", 8000, 4096)], list(whole(1).tasks)) == [
        "taskRoles.w: each instance needs a whole node with GPUs; the cluster has no GPU node"
    ]


# --- properties -----------------------------------------------------------------------------


@st.composite
def mixed_worlds(draw) -> tuple[World, list[tuple[int, PendingJob]], list[float]]:
    nodes = tuple(
        node(f"n{i}", draw(st.sampled_from((0, 2, 4, 8))), model=draw(st.sampled_from(("A100", "V100"))),
             cpu=draw(st.integers(2, 32)) * 1000, memory=draw(st.integers(4, 64)) * 1024)
        for i in range(draw(st.integers(1, 5)))
    )
    vcs = tuple(
        VirtualCluster(name, {m: draw(st.integers(0, 16)) for m in ("A100", "V100")}, draw(st.booleans()))
        for name in ("vision", "nlp")[: draw(st.integers(0, 2))]
    )
    vc_names = [v.name for v in vcs] or ["default"]
    config = SchedulerConfig(scorer=draw(st.sampled_from(sorted(SCORERS))), backfill=draw(st.booleans()),
                             timeshare=draw(st.booleans()))
    submissions = []
    for j in range(draw(st.integers(1, 12))):
        rank = draw(st.integers(0, 3))
        vc = draw(st.sampled_from(vc_names))
        step = draw(st.integers(0, 3))
        if draw(st.integers(0, 2)) == 0:
            pending = whole(j + 1, draw(st.integers(1, 2)), rank=rank, vc=vc, at=float(step * 10 + j),
                            models=draw(st.sampled_from(((), ("A100",), ("V100",)))))
        else:
            tasks = tuple(
                TaskRequest("w", i, draw(st.sampled_from((0, 250, 500, 1000, 2000))),
                            draw(st.integers(0, 4)) * 500, draw(st.integers(0, 2)) * 1024)
                for i in range(draw(st.integers(1, 3)))
            )
            pending = PendingJob(j + 1, rank, float(step * 10 + j), tasks, vc=vc,
                                 max_runtime=draw(st.sampled_from((None, 15.0))))
        submissions.append((step, pending))
    advances = draw(st.lists(st.sampled_from((0.0, 5.0, 20.0, 40.0)), min_size=3, max_size=6))
    return World(nodes, vcs=vcs, config=config), submissions, advances


def check_whole_nodes(s: Snapshot, d: Decisions) -> None:
    """Every whole-node task holds all of one suitable node, alone; its gang starts whole."""
    by_name = {n.name: n for n in s.nodes}
    pending = {j.job_id: j for j in s.pending}
    holders: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for r in s.running:
        for p in r.placements:
            holders[p.node].append((r.job_id, p.whole_node))
    for start in d.starts:
        job_ = pending[start.job_id]
        assert sorted((p.role, p.index) for p in start.placements) == sorted((t.role, t.index) for t in job_.tasks)
        asked = {(t.role, t.index): t for t in job_.tasks}
        for p in start.placements:
            task = asked[(p.role, p.index)]
            holders[p.node].append((start.job_id, task.whole_node))
            if task.whole_node:
                n = by_name[p.node]
                assert sorted(g.index for g in p.gpus) == sorted(g.index for g in n.gpus)
                assert all(g.milli == 1000 for g in p.gpus)
                assert (p.cpu_milli, p.memory_mb) == (n.cpu_milli, n.memory_mb)
                assert all(not task.gpu_models or g.model in task.gpu_models for g in n.gpus)
    for name, held in holders.items():
        if any(is_whole for _, is_whole in held):
            assert len(held) == 1, f"{name} shared by {held}"


@settings(max_examples=150, deadline=None)
@given(mixed_worlds(), st.integers(0, 1000))
def test_a_whole_node_task_never_shares_its_node_and_quotas_count_its_gpus(drawn, seed) -> None:
    """... and the same snapshot, its tuples in any order, gives the same decisions."""
    world, submissions, advances = drawn
    for step, seconds in enumerate(advances):
        for at, pending in submissions:
            if at == step:
                world.submit(pending, 30.0)
        before = world.snapshot()
        decisions = world.cycle()
        note(f"cycle {step}: {describe(world)}")
        check_capacity(before, decisions)
        check_whole_nodes(before, decisions)
        check_quotas(before, decisions)
        check_preemptions(before, decisions)
        assert schedule(permuted(before, seed)) == decisions
        world.advance(seconds)
