"""Why pending: every waiting job has a reason, a position in its VC and an ETA if known."""

from __future__ import annotations

from scheduler_world import World, job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import PendingReason, SchedulerConfig, VirtualCluster


def waits(decisions) -> dict[int, tuple[PendingReason, str, int]]:
    return {w.job_id: (w.reason, w.message, w.position) for w in decisions.waits}


def test_a_job_that_fits_nowhere_is_told_the_most_there_is_on_one_node() -> None:
    cluster = (node("a", used={i: 1000 for i in range(4)}), node("b", used={i: 1000 for i in range(3)}))
    decisions = schedule(snapshot(cluster, [job(1, 8000, models=("A100",))]))
    assert waits(decisions)[1] == (
        PendingReason.NO_FIT,
        "no node has 8 free A100 together for w; the most on one node is 5",
        1,
    )
    assert decisions.waits[0].short == "5/8 A100 on one node"


def test_a_job_that_fits_nowhere_is_told_when_nodes_are_cordoned() -> None:
    # The idle GPUs are on a cordoned node: "0 free" alone would read as a full cluster.
    cluster = (node("a", 4, schedulable=False), node("b", 4, used={i: 1000 for i in range(4)}))
    assert waits(schedule(snapshot(cluster, [job(1, 1000)])))[1] == (
        PendingReason.NO_FIT, "needs 1 GPU in total, 0 free; 1 node cordoned or unhealthy", 1)


def test_a_job_that_would_have_fitted_but_for_the_jobs_ahead_of_it_is_behind() -> None:
    decisions = schedule(snapshot((node("a", 4),), [job(1, 4000), job(2, 4000), job(3, 2000)]))
    assert [s.job_id for s in decisions.starts] == [1]
    reason, message, position = waits(decisions)[3]
    assert (reason, position) == (PendingReason.BEHIND, 2)
    assert message == "2nd in VC default; the jobs ahead of it took what was free (needs 2 GPU in total, 0 free)"
    assert next(w.short for w in decisions.waits if w.job_id == 3) == "ahead took 0/2 GPU free"


def test_positions_count_within_each_vc() -> None:
    vcs = (VirtualCluster("vision", {"A100": 8}), VirtualCluster("nlp", {"A100": 8}))
    work = [running(90, on("a", *range(8)), vc="vision"), running(91, on("b", *range(8)), vc="nlp")]
    pending = [job(1, 1000, vc="vision"), job(2, 1000, vc="nlp"), job(3, 1000, vc="vision", rank=0)]
    decisions = schedule(snapshot((node("a"), node("b")), pending, work, vcs=vcs))
    assert {j: p for j, (_, _, p) in waits(decisions).items()} == {3: 1, 1: 2, 2: 1}


def test_a_job_over_quota_is_told_when_its_vcs_running_jobs_should_have_freed_enough() -> None:
    vision = VirtualCluster("vision", {"A100": 16})
    work = [
        running(90, on("a", *range(8)), vc="vision", end=500.0, rank=0),
        running(91, on("b", 0, 1, 2, 3, 4, 5), vc="vision", end=200.0, rank=0),
    ]
    pending = [job(1, 4000, vc="vision", rank=1, at=0.0), job(2, 8000, vc="vision", rank=1, at=1.0)]
    decisions = schedule(snapshot((node("a"), node("b")), pending, work, vcs=(vision,)))
    first, second = decisions.waits
    assert (first.job_id, first.reason, first.eta) == (1, PendingReason.QUOTA, 200.0)
    assert first.message.startswith("VC vision: needs 4 A100, 2 of 16 free")
    # What the `yard jobs` table shows: its VC's 2 unused GPUs are all there is to borrow.
    assert first.short == "vision 2/16 free, needs 4, 2 to borrow, reserved"
    assert (second.job_id, second.reason, second.eta) == (2, PendingReason.QUOTA, 500.0)


def test_a_later_job_over_quota_gets_no_eta_that_the_jobs_ahead_of_it_will_have_used() -> None:
    vision = VirtualCluster("vision", {"A100": 8})
    work = [running(90, on("a", 0, 1, 2, 3), vc="vision", end=100.0), running(91, on("a", 4, 5, 6, 7), vc="vision")]
    pending = [job(1, 4000, vc="vision", at=0.0), job(2, 4000, vc="vision", at=1.0)]
    unlent = SchedulerConfig(borrowing=False)  # else they borrow the GPUs no VC guarantees
    first, second = schedule(snapshot((node("a"), node("b")), pending, work, vcs=(vision,), config=unlent)).waits
    assert (first.job_id, first.eta) == (1, 100.0)
    assert (second.job_id, second.eta) == (2, None)  # job 91 has no known end


def test_a_job_bigger_than_its_vcs_whole_quota_is_told_it_needs_a_bigger_quota() -> None:
    vision = VirtualCluster("vision", {"A100": 4})  # lowered after the job was submitted
    unlent = SchedulerConfig(borrowing=False)
    [wait] = schedule(snapshot((node("a"),), [job(1, 6000, vc="vision")], (), vcs=(vision,), config=unlent)).waits
    assert wait.message.startswith(
        "VC vision: needs 6 A100, 4 of 4 free; more than the VC's whole quota: it starts only if an admin raises"
    )


def test_a_job_waiting_for_a_preemption_keeps_the_same_eta_from_cycle_to_cycle() -> None:
    """The ETA is when the victims' grace period ends, not a grace period from each cycle."""
    world = World((node("a", 4),), vcs=(VirtualCluster("v", {"A100": 4}),))
    world.running[90] = running(90, on("a", 0, 1, 2, 3), rank=3, vc="v", grace=30.0)
    world.ends[90] = float("inf")
    world.submitted[90] = job(90, 4000, rank=3, vc="v")
    world.submit(job(1, 4000, rank=1, vc="v"))
    first = world.cycle().waits[0]
    assert (first.reason, first.eta) == (PendingReason.PREEMPTING, 30.0)
    world.advance(10.0)
    again = world.cycle().waits[0]
    assert (again.reason, again.eta) == (PendingReason.PREEMPTING, 30.0)
