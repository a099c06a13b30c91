"""Borrowing (``scheduler/borrowing.py``): a guaranteed job over its VC's quota runs on other
VCs' idle guaranteed GPUs as borrowed work, within the borrowing and lending limits, shared
by weight, and reclaimed when a lender needs its GPUs back."""

from __future__ import annotations

from scheduler_world import World, job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import PendingReason, SchedulerConfig, VirtualCluster

OPPO = 3
# Two VCs on two 8-GPU nodes: each guarantees one node's worth.
VISION = VirtualCluster("vision", {"A100": 8})
NLP = VirtualCluster("nlp", {"A100": 8})
NODES = (node("a"), node("b"))


def starts(decisions) -> list[tuple[int, bool]]:
    return [(s.job_id, s.borrowed) for s in decisions.starts]


def wait_of(decisions, job_id: int):
    return next(w for w in decisions.waits if w.job_id == job_id)


def test_a_job_over_its_quota_runs_borrowed_on_another_vcs_idle_gpus() -> None:
    work = [running(90, on("a", *range(8)), vc="vision")]
    decisions = schedule(snapshot(NODES, [job(1, 2000, vc="vision")], work, vcs=(VISION, NLP)))
    assert starts(decisions) == [(1, True)]
    assert {p.node for p in decisions.starts[0].placements} == {"b"}
    # Without borrowing it waits for its quota, as before.
    decisions = schedule(snapshot(NODES, [job(1, 2000, vc="vision")], work, vcs=(VISION, NLP),
                                  config=SchedulerConfig(borrowing=False)))
    assert wait_of(decisions, 1).reason == PendingReason.QUOTA


def test_any_guaranteed_priority_borrows_but_opportunistic_work_stays_opportunistic() -> None:
    work = [running(90, on("a", *range(8)), vc="vision")]
    pending = [job(1, 1000, vc="vision", rank=0), job(2, 1000, vc="vision", rank=2),
               job(3, 1000, vc="vision", rank=OPPO)]
    decisions = schedule(snapshot(NODES, pending, work, vcs=(VISION, NLP)))
    assert sorted(starts(decisions)) == [(1, True), (2, True), (3, False)]


def test_borrowing_comes_before_stopping_the_vcs_own_lower_priorities() -> None:
    work = [running(90, on("a", *range(8)), vc="vision", rank=2)]
    decisions = schedule(snapshot(NODES, [job(1, 4000, vc="vision", rank=0)], work, vcs=(VISION, NLP)))
    assert starts(decisions) == [(1, True)] and decisions.preemptions == ()


def test_a_lender_reclaims_borrowed_work_at_once_suspending_what_can_be() -> None:
    world = World(NODES, vcs=(VISION, NLP))
    world.running[90] = running(90, on("a", *range(8)), vc="vision")
    world.running[91] = running(91, on("b", 0, 1, 2, 3), vc="vision", borrowed=True, suspendable=True)
    world.running[92] = running(92, on("b", 4, 5, 6, 7), vc="vision", borrowed=True)
    for job_id in (90, 91, 92):
        world.ends[job_id] = float("inf")
    world.submit(job(1, 8000, vc="nlp"))
    decisions = world.cycle()
    by_victim = {p.job_id: p for p in decisions.preemptions}
    assert set(by_victim) == {91, 92}
    assert by_victim[91].suspend and not by_victim[92].suspend
    assert by_victim[91].reason == (
        "reclaimed: it runs on borrowed GPUs, and VC nlp needs its guaranteed GPUs back for job 1"
    )
    assert wait_of(decisions, 1).reason == PendingReason.PREEMPTING
    for victim in list(world.stopping):  # they stop within their grace period
        del world.stopping[victim], world.running[victim]
    assert starts(world.cycle()) == [(1, False)]


def test_borrowed_work_is_reclaimed_after_opportunistic_work() -> None:
    work = [running(90, on("a", *range(8)), vc="vision"),
            running(91, on("b", 0, 1, 2, 3), vc="vision", borrowed=True),
            running(92, on("b", 4, 5, 6, 7), vc="vision", rank=OPPO)]
    decisions = schedule(snapshot(NODES, [job(1, 4000, vc="nlp")], work, vcs=(VISION, NLP)))
    assert [p.job_id for p in decisions.preemptions] == [92]


def test_the_vc_furthest_over_its_weighted_share_is_reclaimed_first() -> None:
    vcs = (VirtualCluster("x", {"A100": 8}), VirtualCluster("y", {"A100": 4}, weight=1.0),
           VirtualCluster("z", {"A100": 4}, weight=4.0))
    # y and z each borrow 4 of x's GPUs; z's weight makes its share the smaller one.
    work = [running(90, on("a", *range(4)), vc="y"), running(91, on("a", 4, 5, 6, 7), vc="z"),
            running(92, on("b", 0, 1, 2, 3), vc="y", borrowed=True, started=5.0),
            running(93, on("b", 4, 5, 6, 7), vc="z", borrowed=True, started=9.0)]
    decisions = schedule(snapshot(NODES, [job(1, 4000, vc="x")], work, vcs=vcs))
    assert [p.job_id for p in decisions.preemptions] == [92]


def test_a_borrowing_limit_holds_and_why_pending_says_it_is_all_the_job_waits_for() -> None:
    vision = VirtualCluster("vision", {"A100": 8}, borrow_limit=2)
    work = [running(90, on("a", *range(8)), vc="vision")]
    pending = [job(1, 2000, vc="vision", at=0.0), job(2, 1000, vc="vision", at=1.0)]
    decisions = schedule(snapshot(NODES, pending, work, vcs=(vision, NLP)))
    assert starts(decisions) == [(1, True)]
    wait = wait_of(decisions, 2)
    assert wait.reason == PendingReason.BORROW_LIMIT
    assert wait.message.startswith(
        "VC vision: needs 1 A100, 0 of 8 free; borrowing: needs 1 GPU, VC vision may borrow at most 2 GPU of "
        "each model, 0 left over the models it accepts"
    )
    assert wait.short == "vision 0/8 free, needs 1, borrow limit 0/2 left"


def test_a_lending_limit_keeps_part_of_a_vcs_quota_free_for_it() -> None:
    nlp = VirtualCluster("nlp", {"A100": 8}, lend_limit=3)
    work = [running(90, on("a", *range(8)), vc="vision")]
    pending = [job(i, 1000, vc="vision", at=float(i)) for i in range(1, 6)]
    decisions = schedule(snapshot(NODES, pending, work, vcs=(VISION, nlp)))
    assert starts(decisions) == [(1, True), (2, True), (3, True)]
    wait = wait_of(decisions, 4)
    assert wait.reason == PendingReason.BORROW_LIMIT
    assert "borrowing: needs 1 GPU, the other VCs' lending limits leave 0 GPU to borrow" in wait.message
    # A VC that lends nothing lends nothing; one with no quota borrows nothing either.
    decisions = schedule(snapshot(NODES, pending, work, vcs=(VISION, VirtualCluster("nlp", {"A100": 8}, lend_limit=0))))
    assert decisions.starts == ()


def test_idle_gpus_go_to_the_vcs_that_want_them_in_proportion_to_their_weights() -> None:
    vcs = (VirtualCluster("x", {"A100": 8}), VirtualCluster("light", {"A100": 4}, weight=1.0),
           VirtualCluster("heavy", {"A100": 4}, weight=3.0))
    work = [running(90, on("a", *range(4)), vc="light"), running(91, on("a", 4, 5, 6, 7), vc="heavy")]
    # light asked first, for more than there is: heavy still gets three GPUs of every four.
    pending = [job(i, 1000, vc="light", at=float(i)) for i in range(1, 9)]
    pending += [job(i, 1000, vc="heavy", at=float(i)) for i in range(11, 19)]
    decisions = schedule(snapshot(NODES, pending, work, vcs=vcs))
    borrowed = [pending_job.vc for pending_job in pending for s in decisions.starts if s.job_id == pending_job.job_id]
    assert borrowed.count("heavy") == 6 and borrowed.count("light") == 2


def test_a_borrower_takes_another_vcs_borrowed_work_for_fair_share_only_after_a_time_slice() -> None:
    vcs = (VirtualCluster("x", {"A100": 8}), VirtualCluster("y", {"A100": 4}), VirtualCluster("z", {"A100": 4}))
    work = [running(90, on("a", *range(4)), vc="y"), running(91, on("a", 4, 5, 6, 7), vc="z")]
    work += [running(100 + i, on("b", i), vc="y", borrowed=True) for i in range(8)]  # y borrows all of x's
    config = SchedulerConfig(time_slice=600.0)
    early = schedule(snapshot(NODES, [job(1, 1000, vc="z")], work, vcs=vcs, now=100.0, config=config))
    assert early.preemptions == () and wait_of(early, 1).reason == PendingReason.QUOTA
    late = schedule(snapshot(NODES, [job(1, 1000, vc="z")], work, vcs=vcs, now=700.0, config=config))
    [preempt] = late.preemptions
    assert preempt.reason.startswith("reclaimed for fair share: VC y borrows more than its weighted share")
    # Not while the borrower's VC would then have the larger share: z already borrows as much as y.
    even = [running(90, on("a", *range(4)), vc="y"), running(91, on("a", 4, 5, 6, 7), vc="z")]
    even += [running(100 + i, on("b", i), vc="y" if i < 4 else "z", borrowed=True) for i in range(8)]
    decisions = schedule(snapshot(NODES, [job(1, 1000, vc="z")], even, vcs=vcs, now=700.0, config=config))
    assert decisions.preemptions == ()


def test_borrowed_work_holds_no_quota_so_its_vc_starts_guaranteed_work_beside_it() -> None:
    work = [running(91, on("b", 0, 1, 2, 3), vc="vision", borrowed=True)]
    decisions = schedule(snapshot(NODES, [job(1, 8000, vc="vision")], work, vcs=(VISION, NLP)))
    assert starts(decisions) == [(1, False)]
