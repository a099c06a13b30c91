"""The cell model: each VC's guaranteed GPUs packed into cells bound to it (HiveD)."""

from __future__ import annotations

from dataclasses import replace

from scheduler_world import World, job, node, on, running, snapshot

from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.cells import cell_sizes
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.quota import Owner
from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.scorers.base import select_bestfit
from trainyard.scheduler.snapshot import PendingReason, SchedulerConfig, VirtualCluster

OPPO = 3


def gpus_of(decisions, job_id: int) -> list[tuple[str, int]]:
    start = next(s for s in decisions.starts if s.job_id == job_id)
    return [(p.node, g.index) for p in start.placements for g in p.gpus]


def test_cells_are_the_largest_size_that_tiles_every_node_and_every_quota() -> None:
    nodes = [node("a"), node("b"), node("v", 4, model="V100")]
    assert cell_sizes(nodes, [{"A100": 4}, {"A100": 8}], {}) == {"A100": 4, "V100": 4}
    assert cell_sizes(nodes, [{"A100": 16}, {"A100": 8, "V100": 2}], {}) == {"A100": 8, "V100": 2}
    assert cell_sizes(nodes, [{"A100": 3}], {"A100": 4}) == {"A100": 4, "V100": 4}


def test_two_vcs_of_four_gpus_share_one_node_each_in_its_own_pcie_group() -> None:
    vcs = (VirtualCluster("alice", {"A100": 4}), VirtualCluster("bob", {"A100": 4}))
    box = node("box", 8, groups=2)
    world = World((box,), vcs=vcs)
    world.submit(job(1, 1000, vc="alice"))
    world.submit(job(2, 1000, vc="bob"))
    world.submit(job(3, 3000, vc="alice"))
    world.cycle()
    world.submit(job(4, 3000, vc="bob"))
    decisions = world.cycle()
    alice = {i for j in (1, 3) for _, i in gpus_of(world.history[0], j)}
    bob = {i for _, i in gpus_of(world.history[0], 2)} | {i for _, i in gpus_of(decisions, 4)}
    assert sorted([sorted(alice), sorted(bob)]) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_vcs_guaranteed_job_stays_in_its_cells_even_when_other_nodes_are_idle() -> None:
    # "small" holds node a (its one cell) through job 90; idle nodes b and c stay whole for
    # "big", whose quota is two nodes. The opportunistic job on a is reclaimed instead.
    vcs = (VirtualCluster("small", {"A100": 8}), VirtualCluster("big", {"A100": 16}))
    work = [running(90, on("a", 0), vc="small"), running(91, on("a", 1, 2, 3, 4, 5, 6, 7), rank=OPPO, vc="big")]
    decisions = schedule(snapshot((node("a"), node("b"), node("c")), [job(1, 1000, vc="small")], work, vcs=vcs))
    assert decisions.starts == ()
    assert [p.job_id for p in decisions.preemptions] == [91]
    big_gang = job(2, 8000, 8000, vc="big")
    decisions = schedule(snapshot((node("a"), node("b"), node("c")), [big_gang], work, vcs=vcs))
    assert sorted(n for n, _ in gpus_of(decisions, 2))[::8] == ["b", "c"]


def test_a_cell_bound_to_one_vc_is_not_used_by_another_vcs_guaranteed_jobs() -> None:
    vcs = (VirtualCluster("x", {"A100": 4}), VirtualCluster("y", {"A100": 4}))
    work = [running(90, on("a", 0), vc="x")]  # binds a's first cell (GPUs 0-3) to x
    pending = [job(1, 4000, vc="y"), job(2, 1000, vc="y")]
    decisions = schedule(snapshot((node("a"),), pending, work, vcs=vcs, config=SchedulerConfig(borrowing=False)))
    assert sorted(i for _, i in gpus_of(decisions, 1)) == [4, 5, 6, 7]
    wait = next(w for w in decisions.waits if w.job_id == 2)
    assert wait.reason == PendingReason.QUOTA  # y's quota is spent; x's free GPUs are not y's guarantee
    # Borrowing, job 2 runs there as borrowed work: it binds no cell of x's, and is reclaimed.
    decisions = schedule(snapshot((node("a"),), pending, work, vcs=vcs))
    assert [(s.job_id, s.borrowed) for s in decisions.starts] == [(1, False), (2, True)]


def test_loose_cells_fill_partly_used_nodes_before_splitting_a_fresh_one() -> None:
    vcs = (VirtualCluster("x", {"A100": 4}), VirtualCluster("y", {"A100": 4}), VirtualCluster("z", {"A100": 8}))
    work = [running(90, on("b", 0), vc="x")]  # x holds half of b
    decisions = schedule(snapshot((node("a"), node("b")), [job(1, 1000, vc="y"), job(2, 8000, vc="z")], work, vcs=vcs))
    assert gpus_of(decisions, 1)[0][0] == "b"  # y takes b's other half ...
    assert {n for n, _ in gpus_of(decisions, 2)} == {"a"}  # ... so z's whole node stays whole


# Cases the HiveD property (test_hived_guarantees.py) found: a gang within its VC's quota
# that waited although it could start, or could be helped by preemption.


def _put(world: World, job_id: int, vc: str, rank: int, where: str, gpus: tuple[int, ...], milli: int) -> None:
    world.running[job_id] = running(job_id, on(where, *gpus, milli=milli), rank=rank, vc=vc, started=float(job_id))
    world.ends[job_id] = float("inf")
    world.submitted[job_id] = job(job_id, milli * len(gpus), rank=rank, vc=vc)


def test_a_gang_its_scorer_cannot_place_is_placed_in_the_cell_order() -> None:
    """FGD binds the partly used n0 as x's one whole node, to keep the empty n1 whole for
    the pending 8-GPU job; x's eighth task then fits nowhere. In the cell order (emptiest
    fresh node first) the gang fits on n1 at once: nothing is preempted for it."""
    world = World(tuple(node(f"n{i}") for i in range(3)), vcs=(VirtualCluster("x", {"A100": 8}),
                                                              VirtualCluster("y", {"A100": 4})))
    world.config = replace(world.config, scorer="fgd")
    _put(world, 5, "y", OPPO, "n0", (1,), 250)
    _put(world, 6, "y", 0, "n2", (0,), 250)
    world.submit(job(7, 8000, rank=OPPO, vc="y"))
    world.submit(job(10_000, *[1000] * 8, rank=0, vc="x"))
    decisions = world.cycle()
    assert decisions.preemptions == ()
    assert {p.node for p in world.running[10_000].placements} == {"n1"}


def test_a_hole_part_of_which_another_jobs_plan_holds_counts_as_taken() -> None:
    """n1 is shared (y holds its first cell); its second cell is a hole with opportunistic
    work on one GPU. Once another job's plan holds a GPU of that hole, x may neither bind
    it nor count on reclaiming it, so x's loose cell may split the idle n0 instead."""
    vcs = (VirtualCluster("x", {"A100": 4}), VirtualCluster("y", {"A100": 4}), VirtualCluster("w", {"A100": 8}))
    nodes = (node("n0"), node("n1"))
    work = [running(6, on("n1", 0, milli=250), rank=0, vc="y"), running(5, on("n1", 5), rank=OPPO, vc="y")]
    ledger = Ledger(snapshot(nodes, [], work, vcs=vcs))
    gang = job(10_000, *[1000] * 4, rank=0, vc="x")
    task = gang.tasks[0]

    def fresh_node_allowed() -> bool:
        access = Access(ledger, gang)
        tiers = list(access.tiers(task))
        return access.split_fresh and any(n.name == "n0" for n in tiers[-1])

    assert not fresh_node_allowed()  # the hole n1[4-7] could take x once job 5 is preempted
    held = Tentative()
    ledger.hold(Owner("w", "", 0), [on("n1", 4, milli=250)], held)  # another job's plan
    assert ledger.held_in(ledger.capacity.nodes["n1"], 1)
    assert fresh_node_allowed()
    fit = Access(ledger, gang).fit(ledger.capacity.nodes["n1"], task, select_bestfit)
    assert fit is None  # and x does not bind the held hole either


def test_a_job_behind_a_plan_takes_a_loose_cell_and_does_not_delay_the_plan() -> None:
    """vision (one whole node and one loose cell) plans job 3: the 8-GPU task on n1, once
    the opportunistic job stopping there is gone, and its small task on n0. Job 4 behind it
    starts at once in vision's loose cell on n0 (loose cells are spent before whole nodes),
    where job 3's small task fits beside it: job 3 still starts once job 2 has stopped.
    (Before loose cells came first, job 4 would have bound n0 as vision's whole node and
    taken the one job 3 needs: the plan's cells kept it out.)"""
    world = World((node("n0", groups=2), node("n1", groups=2)),
                  vcs=(VirtualCluster("vision", {"A100": 12}, allow_priority_preemption=False),))
    world.config = replace(world.config, scorer="bestfit")
    _put(world, 1, "vision", OPPO, "n0", (0,), 250)
    _put(world, 2, "vision", OPPO, "n1", tuple(range(8)), 1000)
    world.stopping[2] = 30.0  # preempted for job 3 in an earlier cycle
    world.submit(job(3, 250, 8000, rank=0, vc="vision", at=12.0))
    world.submit(job(4, 250, rank=0, vc="vision", at=23.0))
    first = world.cycle()
    assert {w.job_id: w.reason for w in first.waits}[3] == PendingReason.PREEMPTING
    assert {p.node for p in world.running[4].placements} == {"n0"}
    world.advance(30.0)
    world.cycle()
    assert 3 in world.running


def test_a_small_job_spends_a_loose_cell_so_its_vcs_wide_job_still_finds_a_whole_node() -> None:
    """x's quota, 9 GPUs on 8-GPU nodes, is one whole node and one single-GPU cell. Its
    1-GPU job running on an otherwise empty node holds that loose cell, not the node: its
    8-GPU job then binds a whole node and starts, as it would alone on a cluster of x's
    quota (8 + 1 GPUs). When the small job bound its node whole, the wide one waited with 8
    GPUs of quota unused (the sharing anomaly the Philly VCs showed, docs/benchmarks.md)."""
    vcs = (VirtualCluster("x", {"A100": 9}), VirtualCluster("y", {"A100": 7}))
    nodes = (node("a"), node("b"), node("c"))
    first = schedule(snapshot(nodes, [job(1, 1000, vc="x")], [], vcs=vcs))
    (placed,) = gpus_of(first, 1)
    work = [running(1, on(placed[0], placed[1]), vc="x")]
    decisions = schedule(snapshot(nodes, [job(2, 8000, vc="x")], work, vcs=vcs))
    assert len({n for n, _ in gpus_of(decisions, 2)} - {placed[0]}) == 1  # a whole node of its own


def test_once_its_loose_cells_are_spent_a_vcs_small_jobs_bind_a_whole_node() -> None:
    vcs = (VirtualCluster("x", {"A100": 9}),)
    work = [running(1, on("a", 0), vc="x")]  # x's one loose cell
    decisions = schedule(snapshot((node("a"), node("b")), [job(2, 1000, vc="x"), job(3, 8000, vc="x")], work,
                                  vcs=vcs, config=SchedulerConfig(borrowing=False)))
    # Job 2 binds a whole node (a, where x is alone) and job 3 has no whole node left.
    assert [n for n, _ in gpus_of(decisions, 2)] == ["a"]
    assert next(w for w in decisions.waits if w.job_id == 3).reason in (PendingReason.QUOTA, PendingReason.NO_FIT)


def test_a_loose_cell_that_fills_a_small_fresh_node_does_not_wait_on_a_hole_it_would_have_to_reclaim() -> None:
    # Found by test_invariants: n0 has one GPU, n1 two. nlp holds a cell of n1, and carol's
    # opportunistic share sits in n1's other one, which bob may not share (same-user). Bob's
    # loose cell fills n0 whole, splitting nothing: it starts there rather than reclaiming
    # carol's work for the hole. (Before, a preemption plan that freed n0 for bob was
    # followed, once its victims had gone, by a second one for the hole.)
    vcs = (VirtualCluster("vision", {"A100": 1}), VirtualCluster("nlp", {"A100": 1}))
    work = [running(1, on("n1", 0, milli=250), rank=OPPO, vc="vision", user="carol"),
            running(5, on("n1", 1, milli=250), rank=0, vc="nlp", user="alice")]
    decisions = schedule(snapshot((node("n0", 1), node("n1", 2)), [job(4, 250, rank=0, vc="vision", user="bob")],
                                  work, vcs=vcs))
    assert decisions.preemptions == ()
    assert gpus_of(decisions, 4) == [("n0", 0)]
