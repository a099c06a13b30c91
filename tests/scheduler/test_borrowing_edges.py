"""Borrowing and fair share at their edges: the cases an outside review of issue 30 found
wrong (each fixed since: a shape's outcome reused with another job's reservation, a false
fair-share message, reclaims undone the next cycle, the default scorer past a per-model
limit, advice to raise a quota a job can borrow past) and what it checked that held.
"""

from __future__ import annotations

import math
from dataclasses import replace

from scheduler_world import World, job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import PendingJob, PendingReason, SchedulerConfig, Snapshot, VirtualCluster

H = 7 * 24 * 3600.0  # the default half-life
VISION = VirtualCluster("vision", {"A100": 8})
NLP = VirtualCluster("nlp", {"A100": 8})
NODES = (node("a"), node("b"))


def wait_of(decisions, job_id: int):
    return next(w for w in decisions.waits if w.job_id == job_id)


def _full() -> list:
    # vision uses its quota on a, nlp its own on b: nothing idle to borrow.
    return [running(90, on("a", *range(8)), vc="vision", user="alice"),
            running(91, on("b", *range(8)), vc="nlp", user="bob")]


def test_only_the_head_of_a_queue_says_it_is_first_in_line_after_borrowing_was_tried() -> None:
    pending = [job(1, 1000, vc="vision", user="alice"), job(2, 1000, vc="vision", user="alice"),
               job(3, 1000, vc="vision", user="alice")]
    decisions = schedule(snapshot(NODES, pending, _full(), vcs=(VISION, NLP)))
    assert "first in line" in wait_of(decisions, 1).message
    for later in (2, 3):
        wait = wait_of(decisions, later)
        assert wait.reason == PendingReason.QUOTA
        assert "first in line" not in wait.message, wait.message
        assert "reserved" not in wait.short, wait.short


def test_without_borrowing_only_the_head_says_it_is_first_in_line() -> None:
    # The same queue with borrowing off: the message was right before issue 30.
    pending = [job(1, 1000, vc="vision", user="alice"), job(2, 1000, vc="vision", user="alice")]
    decisions = schedule(snapshot(NODES, pending, _full(), vcs=(VISION, NLP),
                                  config=SchedulerConfig(borrowing=False)))
    assert "first in line" in wait_of(decisions, 1).message
    assert "first in line" not in wait_of(decisions, 2).message


def test_the_fair_share_message_is_true_when_a_heavier_user_goes_first() -> None:
    # alice: no recent use, two jobs queued first; bob: half a half-life of GPU-seconds, one job.
    # Order: alice's 1 (0), bob's 3 (0.5 H), alice's 2 (0 + H): bob, the heavier user, goes ahead.
    pending = [job(1, 1000, vc="vision", user="alice"), job(2, 1000, vc="vision", user="alice"),
               job(3, 1000, vc="vision", user="bob")]
    decisions = schedule(snapshot(NODES, pending, _full(), vcs=(VISION, NLP),
                                  usage={("vision", "bob"): 0.5 * H}, config=SchedulerConfig(borrowing=False)))
    positions = {w.job_id: w.position for w in decisions.waits}
    assert positions == {1: 1, 3: 2, 2: 3}
    message = wait_of(decisions, 2).message
    assert "fair share" in message
    assert "less recent use" not in message, message


class _RecentWorld(World):
    """``World`` with a fixed ``borrowed_usage`` in its snapshots (the live controller's tally)."""

    recent: dict[str, float] = {}

    def snapshot(self) -> Snapshot:
        return replace(super().snapshot(), borrowed_usage=self.recent)


def _fair_share_churn(big: str, small: str, config: SchedulerConfig, recent: dict[str, float]) -> tuple[int, float]:
    """A lender ("lender") with 8 idle GPUs, VC ``big`` queuing 8-GPU jobs and VC ``small``
    1-GPU jobs, both over their quotas, run for 60 time slices: how many borrowed jobs were
    reclaimed, and how many GPUs ``small`` borrows at the end."""
    vcs = (VirtualCluster("lender", {"A100": 8}), VirtualCluster(big, {"A100": 8}), VirtualCluster(small, {"A100": 8}))
    world = _RecentWorld((node("a"), node("b"), node("c")), vcs=vcs, config=config)
    world.recent = recent
    for job_id in range(1, 4):
        world.submit(job(job_id, *([1000] * 8), vc=big, user="b", at=0.0))
    for job_id in range(10, 34):
        world.submit(job(job_id, 1000, vc=small, user="s", at=0.0))
    reclaimed = 0
    for _ in range(60 * 6):
        reclaimed += len(world.cycle().preemptions)
        world.advance(config.time_slice / 6)
    held = sum(r.gpus for r in world.running.values() if r.borrowed and r.vc == small)
    return reclaimed, held


def test_a_fair_share_reclaim_is_not_undone_by_the_next_cycle_with_fair_share_off() -> None:
    # Before: C's 1-GPU borrower reclaimed B's 8-GPU borrowed job every slice, and the GPUs went
    # back to B. Now a reclaim must leave B's share at least C's (Kueue's rule): B's one 8-GPU
    # job is not taken for a 1-GPU one, and nothing churns; the split evens out as jobs end.
    reclaimed, held = _fair_share_churn("B", "C", SchedulerConfig(fair_share_half_life=0), {})
    assert (reclaimed, held) == (0, 0), (reclaimed, held)


def test_a_fair_share_reclaim_is_not_undone_by_recent_usage() -> None:
    # Z (8-GPU jobs) holds the idle GPUs; C (1-GPU jobs) borrowed 5 GPUs on average lately.
    reclaimed, held = _fair_share_churn("Z", "C", SchedulerConfig(), {"C": 5 * H / math.log(2)})
    assert (reclaimed, held) == (0, 0), (reclaimed, held)


def test_a_fair_share_reclaim_holds_when_the_orders_agree() -> None:
    # The same world where the small VC comes first by name and nobody borrowed before: no churn.
    assert _fair_share_churn("Z", "C", SchedulerConfig(fair_share_half_life=0), {}) == (0, 8.0)


def test_a_job_bigger_than_its_quota_is_not_told_only_an_admin_can_start_it() -> None:
    vcs = (VirtualCluster("vision", {"A100": 4}), VirtualCluster("nlp", {"A100": 4}))
    work = [running(91, on("b", 0, 1, 2, 3), vc="nlp", user="bob", end=600.0)]
    decisions = schedule(snapshot(NODES, [job(1, 8000, 8000, vc="vision", user="alice")], work, vcs=vcs))
    message = wait_of(decisions, 1).message
    assert "borrowing" in message
    assert "only if an admin raises the quota" not in message, message
    # Once nlp's job has ended it does start, borrowed.
    decisions = schedule(snapshot(NODES, [job(1, 8000, 8000, vc="vision", user="alice")], [], vcs=vcs))
    assert [(s.job_id, s.borrowed) for s in decisions.starts] == [(1, True)]


def _borrowed_per_model(scorer: str) -> dict[str, int]:
    """What vision's 2-GPU job borrows, by model, when its limit is 1 GPU of each model."""
    nodes = (node("a", 8, model="A100"), node("b", 8, model="V100"))
    vcs = (VirtualCluster("vision", {"A100": 4}, borrow_limit=1), VirtualCluster("nlp", {"A100": 4, "V100": 8}))
    work = [running(90, on("a", 0, 1, 2, 3), vc="vision")]
    decisions = schedule(snapshot(nodes, [job(1, 2000, vc="vision")], work, vcs=vcs,
                                  config=SchedulerConfig(scorer=scorer)))
    models = {"a": "A100", "b": "V100"}
    held: dict[str, int] = {}
    for start in decisions.starts:
        assert start.borrowed
        for p in start.placements:
            held[models[p.node]] = held.get(models[p.node], 0) + sum(g.milli for g in p.gpus) // 1000
    return held


def test_the_default_scorer_keeps_borrowed_work_within_its_limit_of_each_model() -> None:
    assert all(gpus <= 1 for gpus in _borrowed_per_model("fgd-cpu").values()), _borrowed_per_model("fgd-cpu")


def test_bestfit_keeps_borrowed_work_within_its_limit_of_each_model() -> None:
    # The same job under a scorer that asks Access.fit: it cannot take 2 of one model in one
    # task, so it waits.
    assert _borrowed_per_model("bestfit") == {}


# A VC guaranteed 20 GPUs on 8-GPU nodes holds HiveD cells of 4 GPUs: two whole nodes and
# one cell. Its gang of 4 tasks of 5 GPUs fits the quota and never the cells.
CELLS_NODES = tuple(node(f"n{i}") for i in range(6))
CELLS_VCS = (VirtualCluster("a", {"A100": 20}), VirtualCluster("b", {"A100": 20}))
OUTSIDE = (5000, 5000, 5000, 5000)


def test_a_gang_that_can_never_fit_its_vcs_cells_runs_as_borrowed_work_on_an_empty_cluster() -> None:
    decisions = schedule(snapshot(CELLS_NODES, [job(1, *OUTSIDE, vc="a", rank=0)], vcs=CELLS_VCS))
    assert [(s.job_id, s.borrowed) for s in decisions.starts] == [(1, True)]
    # Tasks that fit a cell or take whole nodes stay in the quota, as before.
    decisions = schedule(snapshot(CELLS_NODES, [job(1, 8000, 8000, 4000, vc="a", rank=0)], vcs=CELLS_VCS))
    assert [(s.job_id, s.borrowed) for s in decisions.starts] == [(1, False)]


def test_one_that_cannot_borrow_says_why_and_holds_nothing_back() -> None:
    pending = [job(1, *OUTSIDE, vc="a", rank=0), job(2, 8000, vc="a", rank=1)]
    decisions = schedule(snapshot(CELLS_NODES, pending, vcs=CELLS_VCS, config=SchedulerConfig(borrowing=False)))
    assert [s.job_id for s in decisions.starts] == [2]  # no reservation for a job that never fits
    wait = next(w for w in decisions.waits if w.job_id == 1)
    assert wait.reason == PendingReason.NO_FIT
    assert wait.message.startswith("its task(s) of 5 GPUs can never fit VC a's cells (20 A100: 2 whole node(s) "
                                   "of 8 GPUs and 1 cell(s) of 4)"), wait.message
    assert "ask for tasks that fit in a cell or take whole nodes, or an admin for borrowing" in wait.message
    # Within a borrowing limit too small for it: BORROW_LIMIT, with both reasons.
    vcs = (VirtualCluster("a", {"A100": 20}, borrow_limit=8), CELLS_VCS[1])
    wait = schedule(snapshot(CELLS_NODES, pending[:1], vcs=vcs)).waits[0]
    assert wait.reason == PendingReason.BORROW_LIMIT
    assert "can never fit VC a's cells" in wait.message and "may borrow at most 8 GPU" in wait.message, wait.message


def test_gangs_outside_their_cells_cost_a_bounded_number_of_trials_a_cycle_and_renaming_buys_none() -> None:
    from trainyard.scheduler.schedule import TRIALS_PER_CYCLE
    from trainyard.scheduler.snapshot import TaskRequest

    def gang(job_id: int, memory: int, role: str) -> PendingJob:
        tasks = tuple(TaskRequest(role, i, 5000, 1000, memory) for i in range(4))
        return PendingJob(job_id, 0, float(job_id), tasks, "", "a")

    nodes = tuple(node(f"n{i}") for i in range(40))
    # Renamed roles are one shape: both start borrowed. Then one job per other shape: the
    # first TRIALS_PER_CYCLE shapes are tried, the rest wait as before this cycle.
    pending = [gang(1, 1024, "w"), gang(2, 1024, "x")]
    pending += [gang(3 + i, 2048 + i, "w") for i in range(TRIALS_PER_CYCLE + 2)]
    vcs = (VirtualCluster("a", {"A100": 20}, borrow_limit=1000), CELLS_VCS[1])
    decisions = schedule(snapshot(nodes, pending, vcs=vcs))
    started = sorted(s.job_id for s in decisions.starts)
    assert started == list(range(1, 3 + TRIALS_PER_CYCLE - 1)), started
    assert {w.reason for w in decisions.waits} == {PendingReason.NO_FIT}
