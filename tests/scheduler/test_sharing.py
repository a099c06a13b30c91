"""Safe GPU sharing: fractional shares of different users meet on a device only where both
VCs' ``gpuSharing`` rules allow it (the stricter applies), and a job kept out says why."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scheduler_world import job, node, on, running, snapshot

from trainyard.core.priorities import OPPORTUNISTIC_RANK
from trainyard.core.sharing import GpuSharing
from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import PendingReason, SchedulerConfig, TaskRequest, VirtualCluster
from trainyard.sim.openb import Pod
from trainyard.sim.placement import run_placement

ALICE_ON_GPU_0 = running(1, on("n1", 0, milli=500), user="alice", vc="vision")
GROUPS = {"alice": frozenset({"ml"}), "bob": frozenset({"ml"}), "carol": frozenset({"ops"})}


def vcs(vision: GpuSharing, nlp: GpuSharing = GpuSharing.ANYONE) -> tuple[VirtualCluster, ...]:
    return (VirtualCluster("vision", {"A100": 1}, True, vision), VirtualCluster("nlp", {"A100": 1}, True, nlp))


@pytest.mark.parametrize("scorer", sorted(SCORERS))
@pytest.mark.parametrize(
    ("who", "vc", "vision", "nlp", "shares"),
    [
        ("alice", "vision", GpuSharing.SAME_USER, GpuSharing.SAME_USER, True),  # her own job: always
        ("bob", "vision", GpuSharing.SAME_USER, GpuSharing.ANYONE, False),
        ("bob", "vision", GpuSharing.SAME_GROUP, GpuSharing.ANYONE, True),  # alice and bob are both in ml
        ("carol", "vision", GpuSharing.SAME_GROUP, GpuSharing.ANYONE, False),  # no group in common
        ("carol", "vision", GpuSharing.ANYONE, GpuSharing.ANYONE, True),
        ("bob", "nlp", GpuSharing.ANYONE, GpuSharing.SAME_USER, False),  # nlp's stricter rule applies
        ("bob", "nlp", GpuSharing.SAME_USER, GpuSharing.ANYONE, False),  # vision's stricter rule applies
        ("bob", "nlp", GpuSharing.ANYONE, GpuSharing.SAME_GROUP, True),
    ],
)
def test_a_fraction_joins_another_users_share_only_where_both_vcs_allow_it(
    scorer: str, who: str, vc: str, vision: GpuSharing, nlp: GpuSharing, shares: bool
) -> None:
    # Opportunistic: beyond any quota and cell, so that only the sharing rule decides.
    pending = job(2, 500, user=who, vc=vc, rank=OPPORTUNISTIC_RANK)
    s = snapshot([node("n1", 1)], [pending], [ALICE_ON_GPU_0], vcs=vcs(vision, nlp),
                 user_groups=GROUPS, config=SchedulerConfig(scorer=scorer))
    assert [x.job_id for x in schedule(s).starts] == ([2] if shares else [])


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_a_fraction_kept_off_a_shared_gpu_goes_to_another_one(scorer: str) -> None:
    s = snapshot([node("n1", 2)], [job(2, 500, user="bob", vc="vision", rank=OPPORTUNISTIC_RANK)], [ALICE_ON_GPU_0],
                 vcs=vcs(GpuSharing.SAME_USER), config=SchedulerConfig(scorer=scorer))
    (start,) = schedule(s).starts
    assert start.placements[0].gpus[0].index == 1


def test_a_job_kept_out_only_by_the_rule_says_which_gpu_and_which_rule() -> None:
    pending = job(2, 500, user="bob", vc="nlp", rank=OPPORTUNISTIC_RANK)
    s = snapshot([node("n1", 1)], [pending], [ALICE_ON_GPU_0],
                 vcs=vcs(GpuSharing.ANYONE, GpuSharing.SAME_USER), config=SchedulerConfig(backfill=False))
    (wait,) = schedule(s).waits
    assert wait.reason == PendingReason.NO_FIT
    assert wait.message == "GPU 0 of node n1 is shared with another user's job; VC nlp allows sharing with: same-user"
    assert wait.short == "GPU 0 of n1 shared with another user"


def test_each_job_is_told_of_a_gpu_its_own_expression_lets_it_use() -> None:
    # The first job may use rack r2 only; the second, of another user, any node: the GPU
    # named to each is one it could use (not the first job's, remembered for its kind).
    only_r2 = replace(job(2, 500, user="bob", vc="nlp", rank=OPPORTUNISTIC_RANK),
                      tasks=(TaskRequest("w", 0, 500, 1000, 1024, selector='node.labels["rack"] == "r2"'),))
    anywhere = job(3, 500, user="dave", vc="nlp", rank=OPPORTUNISTIC_RANK)
    carol_on_n2 = running(4, on("n2", 0, milli=500), user="carol", vc="vision")
    s = snapshot([node("n1", 1, rack="r1"), node("n2", 1, rack="r2")], [only_r2, anywhere],
                 [ALICE_ON_GPU_0, carol_on_n2], vcs=vcs(GpuSharing.ANYONE, GpuSharing.SAME_USER),
                 config=SchedulerConfig(backfill=False))
    waits = {w.job_id: w for w in schedule(s).waits}
    assert waits[2].short == "GPU 0 of n2 shared with another user"
    assert waits[3].short == "GPU 0 of n1 shared with another user"


def test_whole_gpus_and_room_elsewhere_are_not_blamed_on_the_rule() -> None:
    s = snapshot([node("n1", 1)], [job(2, 1000, user="bob", vc="nlp", rank=OPPORTUNISTIC_RANK)], [ALICE_ON_GPU_0],
                 vcs=vcs(GpuSharing.ANYONE, GpuSharing.SAME_USER), config=SchedulerConfig(backfill=False))
    (wait,) = schedule(s).waits
    assert "shared with another user" not in wait.message


def test_a_higher_priority_job_preempts_the_share_that_keeps_it_off_the_gpu() -> None:
    borrowed = running(1, on("n1", 0, milli=500), user="alice", vc="vision", rank=OPPORTUNISTIC_RANK)
    s = snapshot([node("n1", 1)], [job(2, 500, user="bob", vc="vision")], [borrowed], vcs=vcs(GpuSharing.SAME_USER))
    decisions = schedule(s)
    assert [p.job_id for p in decisions.preemptions] == [1]
    assert decisions.waits[0].reason == PendingReason.PREEMPTING


def test_in_one_cycle_two_users_fractions_go_to_two_gpus() -> None:
    s = snapshot([node("n1", 2)], [job(1, 500, user="alice"), job(2, 500, user="bob"), job(3, 500, user="alice")])
    starts = {x.job_id: x.placements[0].gpus[0].index for x in schedule(s).starts}
    assert set(starts) == {1, 2, 3}
    assert starts[1] == starts[3] != starts[2]


def test_the_simulator_places_owned_pods_by_the_rule_and_ownerless_pods_as_before() -> None:
    nodes = [node("n1", 1)]
    pods = [Pod("a", 1000, 1024, 1, 500), Pod("b", 1000, 1024, 1, 500)]
    for owners, rule, placed in [
        (None, GpuSharing.SAME_USER, 2),  # no owners: one user's pods
        (["u0", "u1"], GpuSharing.SAME_USER, 1),
        (["u0", "u1"], GpuSharing.ANYONE, 2),
    ]:
        run = run_placement(nodes, pods, "fgd-cpu", (), owners=owners, gpu_sharing=rule)
        assert run.placed == placed
