"""HiveD's two promises, property-tested on states the scheduler itself produced.

1. A guaranteed job that fits in its VC's free quota never waits on another VC's work
   beyond preemption: it starts, or opportunistic work is preempted for it and it starts
   in the next cycle once the preemptions in flight have completed — within one grace
   period (if nothing else changed meanwhile: the scheduler keeps no plan between
   cycles, so a cluster that changed is planned afresh).
2. One VC's guaranteed small jobs cannot fragment the cluster so that another VC's
   full-quota gang cannot be placed: with no opportunistic work around, it starts at once
   — or, where other VCs' jobs over their quota run borrowed (``borrowing``), once that
   borrowed work is reclaimed, within one grace period, as in 1.

Within the cell model's conditions (``scheduler/cells.py``): nodes of one size, quotas in
whole cells adding up to no more than the cluster, and gang tasks that each fit in a cell
or take whole nodes. Other VCs run random small jobs for several cycles first, ending at
random times, so that the cluster is as fragmented as their jobs can make it; some of them
are suspendable and take turns (time-sharing, with slices from every cycle to never), so
that work suspended and resumed, and plans to suspend, are part of it; and some are elastic
(``scheduler/elastic.py``), grown into idle GPUs wherever they are and shrunk for the gang.
"""

from __future__ import annotations

import re
from math import gcd

from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_world import World, describe, node

from trainyard.scheduler.snapshot import (
    PendingJob,
    PendingReason,
    SchedulerConfig,
    TaskRequest,
    VirtualCluster,
)


@st.composite
def fragmented(draw, *, opportunistic: bool):
    """A world after several cycles of other VCs' work, and VC x's full-quota gang."""
    size = draw(st.sampled_from((4, 8)))
    count = draw(st.integers(2, 5))
    half = size // 2
    units = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4).filter(lambda u: sum(u) <= 2 * count))
    names = ["x", "y", "z", "w"][: len(units)]
    # Other VCs borrow (within random limits and weights) what x and the rest do not use.
    vcs = tuple(
        VirtualCluster(n, {"A100": u * half}, borrow_limit=draw(st.sampled_from((None, None, 2))),
                       lend_limit=draw(st.sampled_from((None, None, 0, half))),
                       weight=draw(st.sampled_from((1.0, 2.0))))
        for n, u in zip(names, units, strict=True)
    )
    cell = size
    for v in vcs:
        cell = gcd(cell, v.quota["A100"])
    # A floor of service these short worlds reach, so that work takes turns.
    config = SchedulerConfig(time_slice=draw(st.sampled_from((0.0, 10.0, 1800.0))),
                             turn_floor=draw(st.sampled_from((0.0, 100.0))),
                             fair_share_half_life=draw(st.sampled_from((0.0, 60.0))),
                             # Kueue-like policies (test_kueue_policies.py): the promises hold under them too
                             borrow_within_vcs=draw(st.booleans()), reserve_at_once=draw(st.booleans()))
    world = World(tuple(node(f"n{i}", size, groups=draw(st.sampled_from((0, 2)))) for i in range(count)), vcs=vcs,
                  config=config)
    job_id = 0
    shares = [s for s in (250, 500, 1000, 2000, 4000, 8000) if s <= cell * 1000]
    for _step in range(draw(st.integers(3, 8))):
        for _ in range(draw(st.integers(0, 6))):
            job_id += 1
            vc = draw(st.sampled_from(vcs[1:]))
            rank = 3 if opportunistic and draw(st.integers(0, 2)) == 0 else draw(st.integers(0, 2))
            if rank == 3:
                gpus = [draw(st.sampled_from([s for s in (250, 1000, 2000, 4000, 8000) if s <= size * 1000]))]
            else:
                whole = [size * 1000] if vc.quota["A100"] >= size else []
                gpus = draw(st.lists(st.sampled_from(shares + whole), min_size=1, max_size=2))
            tasks = tuple(TaskRequest("w", i, g) for i, g in enumerate(gpus))
            # Some are elastic: up to two more workers like their last, grown into idle GPUs.
            grow = tuple(TaskRequest("w", len(gpus) + i, gpus[-1]) for i in range(draw(st.integers(0, 2))))
            duration = draw(st.sampled_from((15.0, 45.0, 1e9)))
            suspendable = draw(st.booleans())
            world.submit(PendingJob(job_id, rank, world.now + job_id * 1e-3, tasks, "", vc.name,
                                    suspendable=suspendable, grow=grow), duration)
        world.cycle()
        world.advance(draw(st.sampled_from((5.0, 20.0, 40.0))))
    quota = vcs[0].quota["A100"]
    piece = draw(st.sampled_from([t for t in (1, 2, 4, 8) if t <= cell and cell % t == 0]))
    if draw(st.booleans()) and quota >= size:  # whole-node tasks, the rest in cell-sized pieces
        gpus = [size] * (quota // size) + [piece] * ((quota % size) // piece)
    else:
        gpus = [piece] * (quota // piece)
    tasks = tuple(TaskRequest("w", i, g * 1000) for i, g in enumerate(gpus))
    gang = PendingJob(10_000, draw(st.integers(0, 2)), world.now, tasks, "", "x")
    return world, gang


@settings(max_examples=150, deadline=None)
@given(fragmented(opportunistic=False))
def test_small_jobs_of_other_vcs_never_keep_a_vcs_full_quota_gang_out(scenario) -> None:
    world, gang = scenario
    world.submit(gang)
    decisions = world.cycle()
    if gang.job_id not in world.running:  # only borrowed work may be in its way, and only for a grace period
        wait = next(w for w in decisions.waits if w.job_id == gang.job_id)
        assert wait.reason == PendingReason.PREEMPTING, describe(world)
        victims = [int(v) for v in re.findall(r"\d+", wait.message.split(" to stop")[0])]
        # its own, or stopping already (elastic jobs' workers leaving count)
        assert set(victims) <= set(world.stopping) | set(world.leaving), describe(world)
        assert all(world.running[p.job_id].borrowed for p in decisions.preemptions if p.for_job_id == gang.job_id)
        _all_stopped(world)
        world.cycle()
    assert gang.job_id in world.running, describe(world)


@settings(max_examples=150, deadline=None)
@given(fragmented(opportunistic=True))
def test_a_guaranteed_job_within_its_quota_waits_for_nothing_but_preemption(scenario) -> None:
    world, gang = scenario
    world.submit(gang)
    decisions = world.cycle()
    if gang.job_id not in world.running:
        wait = next(w for w in decisions.waits if w.job_id == gang.job_id)
        assert wait.reason == PendingReason.PREEMPTING, describe(world)
        victims = [int(v) for v in re.findall(r"\d+", wait.message.split(" to stop")[0])]
        assert set(victims) <= set(world.stopping) | set(world.leaving)
        # Every preemption in flight completes within its grace period; nothing else
        # happens meanwhile. (Its own victims alone are not enough: the scheduler keeps
        # no plan between cycles, so another VC's job whose victims are still stopping
        # may take the room first — and the job then waits for those, within the grace.)
        _all_stopped(world)
        world.cycle()
    assert gang.job_id in world.running, describe(world)


def _all_stopped(world: World) -> None:
    """Every preemption and every elastic job's leaving worker completes now."""
    for victim in list(world.stopping):
        world.stopping[victim] = world.now
    for workers in world.leaving.values():
        for task in workers:
            workers[task] = world.now
    world.advance(0.0)
