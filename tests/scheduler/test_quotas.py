"""Cluster health, VC quotas and per-user quotas: one case per rule."""

from __future__ import annotations

import pytest
from scheduler_world import job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import PendingReason, SchedulerConfig, Snapshot, VirtualCluster

VISION = VirtualCluster("vision", {"A100": 16})
NLP = VirtualCluster("nlp", {"A100": 8, "V100": 8})


def started(decisions) -> list[int]:
    return [s.job_id for s in decisions.starts]


def wait_of(decisions, job_id: int):
    return next(w for w in decisions.waits if w.job_id == job_id)


def test_a_cordoned_node_receives_nothing_new() -> None:
    decisions = schedule(Snapshot((node("a", schedulable=False), node("b", 2)), (job(1, 1000), job(2, 4000))))
    assert [p.node for s in decisions.starts for p in s.placements] == ["b"]
    assert wait_of(decisions, 2).reason == PendingReason.NO_FIT


CASES = [
    pytest.param(
        [job(1, 8000, vc="vision", rank=0)],
        [running(90, on("a", *range(8)), vc="vision", rank=0), running(91, on("b", 0), vc="vision", rank=0)],
        [],
        "VC vision: needs 8 A100, 7 of 16 free",
        id="a guaranteed job runs only within its VC's quota",
    ),
    pytest.param(
        [job(1, 8000, vc="vision", rank=3)],
        [running(90, on("a", 0, 1, 2, 3, 4, 5, 6, 7), vc="vision"), running(91, on("b", 0), vc="vision")],
        [1],
        None,
        id="an opportunistic job uses idle GPUs beyond any quota",
    ),
    pytest.param(
        [job(1, 1000, vc="robotics")],
        [],
        [],
        "unknown virtual cluster 'robotics'",
        id="a job of a VC the snapshot does not know waits on quota",
    ),
    pytest.param(
        [job(1, 1000, vc="vision", models=("V100",))],
        [],
        [],
        "VC vision has no quota for V100",
        id="a gpuModel restriction counts against that model's quota only",
    ),
    pytest.param(
        [job(1, 0, vc="vision", cpu=4000)],
        [running(90, on("a", 0, 1, 2, 3, 4, 5, 6, 7), vc="vision"), running(91, on("b", *range(8)), vc="vision")],
        [1],
        None,
        id="a CPU-only task needs no quota",
    ),
    pytest.param(
        [job(1, 250, vc="vision"), job(2, 250, vc="vision"), job(3, 500, vc="vision")],
        [running(90, on("a", *range(8)), vc="vision"), running(91, on("b", 0, 1, 2, 3, 4, 5, 6), vc="vision")],
        [1, 2, 3],
        None,
        id="fractions count against the quota in thousandths",
    ),
]


@pytest.mark.parametrize(("pending", "work", "starts", "message"), CASES)
def test_quota_rules(pending, work, starts, message) -> None:
    # The quota alone: with borrowing, a job over it may run on nlp's idle GPUs (test_borrowing).
    config = SchedulerConfig(borrowing=False)
    decisions = schedule(snapshot((node("a"), node("b"), node("c")), pending, work, vcs=(VISION, NLP), config=config))
    assert started(decisions) == starts
    if message is not None:
        wait = decisions.waits[0]
        assert wait.reason == PendingReason.QUOTA
        assert wait.message.split(";")[0] == message


def test_per_model_quota_is_not_spent_on_another_model() -> None:
    nodes = (node("a", 8, model="A100"), node("v", 8, model="V100"))
    work = [running(90, on("a", *range(8)), vc="nlp")]
    decisions = schedule(snapshot(nodes, [job(1, 4000, vc="nlp"), job(2, 8000, vc="nlp")], work, vcs=(NLP,)))
    assert started(decisions) == [1]
    assert {p.node for p in decisions.starts[0].placements} == {"v"}
    assert wait_of(decisions, 2).message.startswith("VC nlp: needs 8 A100/V100, 4 of 16 free")


def test_a_user_over_their_quota_at_a_priority_waits_with_user_quota() -> None:
    work = [running(90, on("a", 0, 1, 2, 3), user="alice", rank=0)]
    pending = [job(1, 4000, user="alice", rank=0), job(2, 4000, user="alice", rank=1), job(3, 1000, user="bob", rank=0)]
    decisions = schedule(snapshot((node("a"), node("b")), pending, work, user_quotas={("alice", 0): 6000}))
    assert started(decisions) == [3, 2]
    wait = wait_of(decisions, 1)
    assert wait.reason == PendingReason.USER_QUOTA
    assert wait.message == "user alice at prod: needs 4 GPU, 2 of 6 left"


def test_over_both_quotas_the_user_quota_is_the_reason_and_nothing_is_preempted() -> None:
    # VC vision is full with alice's own normal job; her prod job could take its GPUs by
    # priority, but her prod quota forbids it: no preemption may be planned for it.
    work = [running(90, on("a", *range(8)), vc="vision", user="alice", rank=1),
            running(91, on("b", *range(8)), vc="vision", user="alice", rank=1)]
    pending = [job(1, 4000, vc="vision", user="alice", rank=0)]
    decisions = schedule(snapshot((node("a"), node("b")), pending, work, vcs=(VISION,),
                                  user_quotas={("alice", 0): 2000}))
    assert decisions.preemptions == ()
    wait = wait_of(decisions, 1)
    assert wait.reason == PendingReason.USER_QUOTA
    assert wait.message == "user alice at prod: needs 4 GPU, 2 of 2 left"


def test_without_vcs_every_job_shares_one_pool_without_limits() -> None:
    decisions = schedule(Snapshot((node("a"),), (job(1, 8000, vc="anything"),)))
    assert started(decisions) == [1]


def test_work_on_a_gpu_the_node_no_longer_reports_does_not_break_the_cycle() -> None:
    # A task holds GPU 6 of a node that now reports 4 (a restart with fewer GPUs, or a
    # device that fell off the bus): the cycle goes on and explains the waiting job.
    gone = running(1, on("a", 6), rank=3)
    for scorer in SCORERS:
        decisions = schedule(snapshot((node("a", 4),), [job(2, *[1000] * 5)], [gone],
                                      config=SchedulerConfig(scorer=scorer)))
        assert [w.reason for w in decisions.waits] == [PendingReason.NO_FIT]
