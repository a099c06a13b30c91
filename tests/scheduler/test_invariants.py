"""Scheduler invariants on random clusters, VCs and workloads, run for several cycles.

Every cycle of a short simulation (``World``: starts run, preempted jobs stop after their
grace period and are requeued, time passes and jobs end) is checked, so the snapshots
include running, stopping and reserved work that the scheduler itself produced.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass, replace

from hypothesis import given, note, settings
from hypothesis import strategies as st
from scheduler_world import World, check_capacity, check_gangs, check_sharing, describe, node, snapshot

from trainyard.core.priorities import OPPORTUNISTIC_RANK
from trainyard.core.sharing import GpuSharing
from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.cells import FRESH, SEALED, SHARED, Cells
from trainyard.scheduler.ledger import Ledger
from trainyard.scheduler.placement import place_gang
from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.scorers.registry import SCORERS, scorer_for
from trainyard.scheduler.snapshot import (
    Decisions,
    NodeState,
    PendingJob,
    PendingReason,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TaskRequest,
    VirtualCluster,
)

MODELS = ("A100", "V100")
GPU_REQUESTS = (0, 250, 500, 1000, 1000, 2000, 4000, 8000)
SLICES = (0.0, 10.0, 1800.0)  # time-sharing's slice: turns at every cycle, every other, never
# Time-sharing's (turn_ratio, turn_floor): from any job with more service, from one with
# twice as much, and a floor these short worlds reach; the default's floor they never reach.
USERS = ("alice", "bob", "carol")
TURNS = ((1.0, 0.0), (2.0, 0.0), (2.0, 100.0), (SchedulerConfig().turn_ratio, SchedulerConfig().turn_floor))


@dataclass(frozen=True)
class Scenario:
    """What a strategy draws: a cluster and a timed stream of submissions. Immutable, so
    that hypothesis prints a falsifying example as drawn (``run`` builds a fresh ``World``
    from it, which the simulation then changes)."""

    nodes: tuple[NodeState, ...]
    vcs: tuple[VirtualCluster, ...]
    config: SchedulerConfig
    user_quotas: dict[tuple[str, int], int]
    submissions: tuple[tuple[int, PendingJob, float], ...]  # (step, job, true duration)
    advances: tuple[float, ...]  # seconds after each cycle
    user_groups: dict[str, frozenset[str]] | None = None

    def world(self) -> World:
        return World(self.nodes, vcs=self.vcs, config=self.config, user_quotas=self.user_quotas,
                     user_groups=self.user_groups or {})


@st.composite
def worlds(draw) -> Scenario:
    """A cluster, VCs, quotas and a timed stream of submissions."""
    nodes = []
    for i in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from((0, 2, 4, 8)))
        nodes.append(
            node(
                f"n{i}",
                gpus,
                model=draw(st.sampled_from(MODELS)),
                groups=draw(st.sampled_from((0, 2))) if gpus else 0,
                rack=draw(st.sampled_from((None, "r1", "r2"))),
                cpu=draw(st.integers(2, 64)) * 1000,
                memory=draw(st.integers(4, 128)) * 1024,
                schedulable=i == 0 or draw(st.integers(0, 5)) > 0,
            )
        )
    vcs = tuple(
        VirtualCluster(
            name,
            {m: draw(st.integers(0, 12)) for m in MODELS if draw(st.booleans())},
            draw(st.booleans()),
            draw(st.sampled_from(GpuSharing)),
            borrow_limit=draw(st.sampled_from((None, None, 0, 2))),
            lend_limit=draw(st.sampled_from((None, None, 0, 4))),
            weight=draw(st.sampled_from((1.0, 3.0))),
        )
        for name in ("vision", "nlp")[: draw(st.integers(0, 2))]
    )
    vc_names = [v.name for v in vcs] or ["default"]
    user_quotas = {
        ("alice", r): draw(st.sampled_from((0, 1000, 4000))) for r in range(4) if draw(st.integers(0, 3)) == 0
    }
    turns = draw(st.sampled_from(TURNS))
    config = SchedulerConfig(
        scorer=draw(st.sampled_from(sorted(SCORERS))), backfill=draw(st.booleans()),
        timeshare=draw(st.booleans()), time_slice=draw(st.sampled_from(SLICES)),
        turn_ratio=turns[0], turn_floor=turns[1], gpu_sharing=draw(st.sampled_from(GpuSharing)),
        borrowing=draw(st.booleans()), fair_share_half_life=draw(st.sampled_from((0.0, 3600.0))),
    )
    submissions = []
    for j in range(draw(st.integers(1, 14))):
        tasks = tuple(
            TaskRequest(
                "w",
                i,
                draw(st.sampled_from(GPU_REQUESTS)),
                draw(st.integers(0, 6)) * 500,
                draw(st.integers(0, 4)) * 1024,
                draw(st.sampled_from(((), ("A100",), ("V100",), MODELS))),
            )
            for i in range(draw(st.integers(1, 3)))
        )
        rank = draw(st.integers(0, 3))
        # Opportunistic work mostly comes first, so that guaranteed work has to reclaim.
        step = 0 if rank == OPPORTUNISTIC_RANK and draw(st.booleans()) else draw(st.integers(0, 3))
        job = PendingJob(
            j + 1,
            rank,
            float(step * 10 + j),
            tasks,
            draw(st.sampled_from(USERS)),
            draw(st.sampled_from([*vc_names, *vc_names, "ghost"])),
            draw(st.sampled_from((None, 15.0, 100.0))),
            suspendable=draw(st.booleans()),
        )
        submissions.append((step, job, draw(st.sampled_from((5.0, 20.0, 1000.0)))))
    advances = draw(st.lists(st.sampled_from((0.0, 5.0, 10.0, 40.0)), min_size=4, max_size=6))
    return Scenario(tuple(nodes), vcs, config, user_quotas, tuple(submissions), tuple(advances), draw(group_sets()))


def group_sets() -> st.SearchStrategy[dict[str, frozenset[str]]]:
    """Which groups each user is in (for ``same-group`` sharing): none, one, or two."""
    return st.fixed_dictionaries({
        user: st.frozensets(st.sampled_from(("ml", "ops")), max_size=2) for user in USERS
    })


@st.composite
def shared_worlds(draw) -> Scenario:
    """Mostly fractional jobs of three users on a few GPUs, under every sharing rule, with
    priorities that preempt and guaranteed work that reclaims (sharing-heavy)."""
    nodes = [node(f"n{i}", draw(st.sampled_from((1, 2, 4)))) for i in range(draw(st.integers(1, 2)))]
    gpus = sum(len(n.gpus) for n in nodes)
    vcs = tuple(
        VirtualCluster(
            name, {"A100": draw(st.integers(0, gpus))}, draw(st.booleans()), draw(st.sampled_from(GpuSharing))
        )
        for name in ("vision", "nlp")[: draw(st.integers(0, 2))]
    )
    config = SchedulerConfig(
        scorer=draw(st.sampled_from(sorted(SCORERS))), backfill=draw(st.booleans()),
        gpu_sharing=draw(st.sampled_from(GpuSharing)),
    )
    vc_names = [v.name for v in vcs] or ["default"]
    submissions = []
    for j in range(draw(st.integers(2, 12))):
        step = draw(st.integers(0, 3))
        shares = draw(st.lists(st.sampled_from((250, 500, 500, 750, 1000)), min_size=1, max_size=2))
        tasks = tuple(TaskRequest("w", i, g) for i, g in enumerate(shares))
        job = PendingJob(
            j + 1, draw(st.integers(0, 3)), float(step * 10 + j), tasks, draw(st.sampled_from(USERS)),
            draw(st.sampled_from(vc_names)), draw(st.sampled_from((None, 15.0))),
        )
        submissions.append((step, job, draw(st.sampled_from((5.0, 20.0, 1000.0)))))
    advances = draw(st.lists(st.sampled_from((0.0, 5.0, 10.0, 40.0)), min_size=4, max_size=6))
    return Scenario(tuple(nodes), vcs, config, {}, tuple(submissions), tuple(advances), draw(group_sets()))


@st.composite
def busy_worlds(draw) -> Scenario:
    """Opportunistic work fills the cluster first; guaranteed work then has to reclaim it,
    and higher priorities arrive after lower ones (preemption-heavy)."""
    nodes = [node(f"n{i}", 8, groups=2) for i in range(draw(st.integers(1, 3)))]
    vcs = tuple(
        VirtualCluster(name, {"A100": draw(st.sampled_from((4, 8, 12)))}, draw(st.booleans()))
        for name in ("vision", "nlp")[: draw(st.integers(1, 2))]
    )
    turns = draw(st.sampled_from(TURNS))
    config = SchedulerConfig(scorer=draw(st.sampled_from(sorted(SCORERS))), time_slice=draw(st.sampled_from(SLICES)),
                             turn_ratio=turns[0], turn_floor=turns[1])
    submissions = []
    for j in range(draw(st.integers(2, 12))):
        step = draw(st.integers(0, 4))
        rank = OPPORTUNISTIC_RANK if step == 0 else draw(st.integers(0, 3))
        gpus = draw(st.lists(st.sampled_from((250, 1000, 2000, 4000, 8000)), min_size=1, max_size=2))
        tasks = tuple(TaskRequest("w", i, g) for i, g in enumerate(gpus))
        vc = draw(st.sampled_from([v.name for v in vcs]))
        job = PendingJob(j + 1, rank, float(step * 10 + j), tasks, "", vc, suspendable=draw(st.booleans()))
        submissions.append((step, job, 1000.0))
    advances = draw(st.lists(st.sampled_from((5.0, 10.0, 20.0, 40.0)), min_size=5, max_size=7))
    return Scenario(tuple(nodes), vcs, config, {}, tuple(submissions), tuple(advances))


@st.composite
def crowded_worlds(draw) -> Scenario:
    """Mostly suspendable jobs of few priorities crowd a small cluster with short time
    slices: they take turns (time-sharing-heavy), beside priority preemption and reclaim."""
    nodes = [node(f"n{i}", 8, groups=2) for i in range(draw(st.integers(1, 2)))]
    vcs = tuple(
        VirtualCluster(name, {"A100": draw(st.sampled_from((4, 8, 16)))}, draw(st.booleans()))
        for name in ("vision", "nlp")[: draw(st.integers(0, 2))]
    )
    scorer = draw(st.sampled_from(sorted(SCORERS)))
    turns = draw(st.sampled_from(TURNS[:3]))
    config = SchedulerConfig(scorer=scorer, time_slice=draw(st.sampled_from(SLICES[:2])),
                             turn_ratio=turns[0], turn_floor=turns[1])
    vc_names = [v.name for v in vcs] or ["default", "other"]
    submissions = []
    for j in range(draw(st.integers(3, 12))):
        step = draw(st.integers(0, 4))
        gpus = draw(st.lists(st.sampled_from((1000, 2000, 4000, 8000)), min_size=1, max_size=2))
        tasks = tuple(TaskRequest("w", i, g) for i, g in enumerate(gpus))
        job = PendingJob(
            j + 1, draw(st.sampled_from((1, 1, 2, 3))), float(step * 10 + j), tasks, "",
            draw(st.sampled_from(vc_names)), suspendable=draw(st.integers(0, 3)) > 0,
        )
        submissions.append((step, job, 1000.0))
    advances = draw(st.lists(st.sampled_from((5.0, 10.0, 20.0)), min_size=5, max_size=7))
    return Scenario(tuple(nodes), vcs, config, {}, tuple(submissions), tuple(advances))


def run(scenario: Scenario) -> list[tuple[Snapshot, Decisions]]:
    """Each cycle's snapshot and decisions. A failing example prints the scenario and each
    cycle's world (``describe``) as notes: under pytest, hypothesis 6.155 prints every
    argument of a falsifying example empty here (``scenario=,``, even an integer's)."""
    note(f"scenario: {scenario!r}")
    world = scenario.world()
    seen = []
    for step, seconds in enumerate(scenario.advances):
        for at, job, duration in scenario.submissions:
            if at == step:
                world.submit(job, duration)
        before = world.snapshot()
        decisions = world.cycle()
        note(f"cycle {step}: {describe(world)}")
        seen.append((before, decisions))
        world.advance(seconds)
    return seen


def check_quotas(s: Snapshot, d: Decisions) -> None:
    """Guaranteed usage (running + starts) stays within each VC's quota, per model; borrowed
    work is started only by a guaranteed job of a VC with a quota, with borrowing on, and
    within its VC's borrowing limit and what the VCs lend (each per model)."""
    if not s.vcs:
        assert not any(x.borrowed for x in d.starts)
        return
    quota = {(v.name, m): q * 1000 for v in s.vcs for m, q in v.quota.items()}
    models = {(n.name, g.index): g.model for n in s.nodes for g in n.gpus}
    pending = {j.job_id: j for j in s.pending}
    used: dict[tuple[str, str], int] = defaultdict(int)
    borrowed: dict[tuple[str, str], int] = defaultdict(int)
    users: dict[tuple[str, int], int] = defaultdict(int)
    work = [(r.vc, r.user, r.priority_rank, r.borrowed, r.placements) for r in s.running]
    for x in d.starts:
        job = pending[x.job_id]
        work.append((job.vc, job.user, job.priority_rank, x.borrowed, x.placements))
        if x.borrowed:
            assert s.config.borrowing and job.priority_rank < OPPORTUNISTIC_RANK
            assert job.vc in {v.name for v in s.vcs}
    for vc, user, rank, lent, placements in work:
        for p in placements:
            for share in p.gpus:
                users[(user, rank)] += share.milli
                if lent:
                    borrowed[(vc, models[(p.node, share.index)])] += share.milli
                elif rank < OPPORTUNISTIC_RANK:
                    used[(vc, models[(p.node, share.index)])] += share.milli
    for key, milli in used.items():
        assert milli <= quota.get(key, 0), f"{key} uses {milli} of {quota.get(key, 0)}"
    for key, limit in s.user_quotas.items():
        assert users[key] <= limit
    borrowing = {pending[x.job_id].vc for x in d.starts if x.borrowed}
    if not borrowing:
        return
    vcs = {v.name: v for v in s.vcs}
    capacity: dict[str, int] = defaultdict(int)
    for model in models.values():
        capacity[model] += 1000
    for model in {m for _, m in borrowed}:
        promised = sum(v.quota.get(model, 0) for v in s.vcs) * 1000
        lent = max(0, capacity[model] - promised) + sum(
            min(max(0, v.quota.get(model, 0) * 1000 - used[(v.name, model)]),
                v.lend_limit * 1000 if v.lend_limit is not None else 10**9)
            for v in s.vcs
        )
        total = sum(milli for (_, m), milli in borrowed.items() if m == model)
        assert total <= lent, f"{total} of {model} borrowed, {lent} lent"
        for vc in borrowing:
            limit = vcs[vc].borrow_limit
            if limit is not None:
                assert borrowed[(vc, model)] <= limit * 1000, f"{vc} borrows {borrowed[(vc, model)]} of {model}"


def check_preemptions(s: Snapshot, d: Decisions) -> None:
    running = {r.job_id: r for r in s.running}
    pending = {j.job_id: j for j in s.pending}
    waits = {w.job_id: w for w in d.waits}
    allow = {v.name: v.allow_priority_preemption for v in s.vcs}
    for p in d.preemptions:
        victim, job = running[p.job_id], pending[p.for_job_id]
        assert p.job_id not in s.preempting, "preempted twice"
        assert job.priority_rank < OPPORTUNISTIC_RANK
        if victim.guaranteed:  # no VC is over its quota here: never another VC's
            assert victim.vc == job.vc or not s.vcs
            if victim.priority_rank == job.priority_rank:  # a turn: suspendable, enough more service, slice run
                assert s.config.timeshare and victim.suspendable and p.suspend
                assert victim.attained_at(s.now) > s.config.turn_ratio * job.attained_service
                assert victim.attained_at(s.now) > s.config.turn_floor
                assert s.now - victim.started_at >= s.config.time_slice
            else:
                # Without VCs, one pool in which priority preempts, as in a VC by default.
                assert allow.get(job.vc, not s.vcs) and victim.priority_rank > job.priority_rank
        assert p.suspend == victim.suspendable
        assert waits[job.job_id].reason == PendingReason.PREEMPTING
    for job_id, wait in waits.items():
        if wait.reason != PendingReason.PREEMPTING:
            continue
        # What is preempted for it frees enough: with those victims gone (and this cycle's
        # starts running), the job starts when it is the only one waiting.
        victims = {int(v) for v in re.findall(r"\d+", wait.message.split(" to stop")[0])}
        assert victims <= set(running)
        work = [r for r in s.running if r.job_id not in victims]
        for x in d.starts:
            j = pending[x.job_id]
            work.append(RunningJob(j.job_id, j.vc, j.user, j.priority_rank, x.placements, s.now,
                                   suspendable=j.suspendable, attained_service=j.attained_service,
                                   borrowed=x.borrowed))
        alone = snapshot(
            _without_usage(s.nodes), [pending[job_id]], work,
            now=s.now, vcs=s.vcs, user_quotas=s.user_quotas, config=s.config, user_groups=s.user_groups,
        )
        assert [x.job_id for x in schedule(alone).starts] == [job_id]


def _without_usage(nodes):
    return tuple(
        replace(n, gpus=tuple(replace(g, used_milli=0) for g in n.gpus), cpu_used_milli=0, memory_used_mb=0)
        for n in nodes
    )


def permuted(s: Snapshot, seed: int) -> Snapshot:
    rng = random.Random(seed)

    def shuffled(items):
        items = list(items)
        rng.shuffle(items)
        return tuple(items)

    return replace(
        s,
        nodes=shuffled(replace(n, gpus=shuffled(n.gpus)) for n in s.nodes),
        pending=shuffled(s.pending),
        running=shuffled(s.running),
        vcs=shuffled(replace(v, quota=dict(shuffled(v.quota.items()))) for v in s.vcs),
        user_quotas=dict(shuffled(s.user_quotas.items())),
        preempting=frozenset(shuffled(s.preempting)),
    )


@settings(max_examples=200, deadline=None)
@given(st.one_of(worlds(), busy_worlds(), crowded_worlds(), shared_worlds()))
def test_every_cycle_keeps_capacity_gangs_quotas_sharing_and_preemption_rules(scenario) -> None:
    for s, d in run(scenario):
        check_capacity(s, d)
        check_gangs(s, d)
        check_quotas(s, d)
        check_sharing(s, d)
        check_preemptions(s, d)


@settings(max_examples=200, deadline=None)
@given(shared_worlds())
def test_no_device_ever_holds_shares_of_two_users_their_vcs_keep_apart(scenario) -> None:
    for s, d in run(scenario):
        check_sharing(s, d)
        check_capacity(s, d)
        check_preemptions(s, d)


@settings(max_examples=100, deadline=None)
@given(st.one_of(worlds(), busy_worlds(), crowded_worlds(), shared_worlds()), st.integers(0, 1000))
def test_the_same_snapshot_gives_the_same_decisions_whatever_the_input_order(scenario, seed) -> None:
    for s, d in run(scenario):
        assert schedule(s) == d
        assert schedule(permuted(s, seed)) == d


@settings(max_examples=100, deadline=None)
@given(st.one_of(worlds(), busy_worlds()))
def test_time_sharing_changes_nothing_while_no_job_is_suspendable(scenario) -> None:
    """The live controller sends no job as suspendable and no attained service until the
    suspend contract exists: every decision is then what it was without time-sharing."""
    for s, _ in run(scenario):
        plain = replace(
            s,
            pending=tuple(replace(j, suspendable=False, attained_service=0.0) for j in s.pending),
            running=tuple(replace(r, suspendable=False, attained_service=0.0) for r in s.running),
        )
        off = replace(plain, config=replace(s.config, timeshare=False))
        on = replace(plain, config=replace(s.config, timeshare=True))
        assert schedule(on) == schedule(off)


def check_cell_indexes(cells: Cells) -> None:
    """The indexes ``Cells`` keeps beside ``owner`` are what ``owner`` says."""
    bound: dict[str, int] = defaultdict(int)
    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (node_name, _), vc in cells.owner.items():
        bound[node_name] += 1
        held[vc][node_name] += 1
    assert {n: c for n, c in cells.bound_on.items() if c} == dict(bound)
    assert {vc: {n: c for n, c in nodes.items() if c} for vc, nodes in cells.held.items() if any(nodes.values())} == {
        vc: dict(nodes) for vc, nodes in held.items()
    }
    for node_name in cells.cell_of:
        holders = sorted(vc for vc, nodes in held.items() if nodes.get(node_name))
        if not bound[node_name]:
            family = FRESH
        elif bound[node_name] < cells.cells_on[node_name]:
            family = SHARED
        else:
            family = "=" + holders[0] if len(holders) == 1 else SEALED
        assert cells.family(node_name) == family, node_name
        assert (node_name in cells.shared) == (family == SHARED)
        for vc in held:
            partly = bool(held[vc].get(node_name)) and family != "=" + vc
            assert (node_name in cells.partly.get(vc, set())) == partly


def cell_state(cells: Cells) -> tuple[object, ...]:
    return (
        dict(cells.owner),
        {k: list(v) for k, v in cells.whole.items() if v},
        {k: v for k, v in cells.loose.items() if v},
        {n: cells.family(n) for n in cells.cell_of},
    )


@settings(max_examples=100, deadline=None)
@given(st.one_of(worlds(), busy_worlds()))
def test_cell_indexes_follow_their_owners_and_a_discarded_try_leaves_every_cell_as_it_was(scenario) -> None:
    for s, _ in run(scenario):
        ledger = Ledger(s)
        cells = ledger.cells
        check_cell_indexes(cells)
        before = cell_state(cells)
        scorer = scorer_for(s)
        for pending in sorted(s.pending, key=lambda j: j.job_id):
            attempt = Tentative()
            place_gang(pending, ledger, scorer, attempt)
            check_cell_indexes(cells)
            attempt.discard()
            check_cell_indexes(cells)
            assert cell_state(cells) == before
        for vc in sorted({r.vc for r in s.running}):
            # As preemption tries it: the VC's cells derived again without one of its jobs.
            survivors = [r for r in s.running if r.vc == vc][1:]
            attempt = Tentative()
            cells.rebind(vc, survivors, attempt)
            check_cell_indexes(cells)
            attempt.discard()
            check_cell_indexes(cells)
            assert cell_state(cells) == before
