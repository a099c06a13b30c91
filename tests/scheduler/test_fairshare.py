"""Fair share over time (``scheduler/fairshare.py``): decayed usage, and who goes first
among jobs of one VC and priority."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_world import job, node, on, running, snapshot

from trainyard.scheduler.fairshare import UsageTally, current_usage, fair_order, record_end, run_usage
from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import PendingReason, SchedulerConfig, VirtualCluster

HOUR = 3600.0
WEEK = 7 * 24 * HOUR


def test_a_run_counts_its_gpu_seconds_decayed_by_the_half_life() -> None:
    # Just ended: almost all of a short run counts; one half-life later, half of it.
    assert run_usage(2, 0.0, 60.0, 60.0, WEEK) == pytest.approx(120.0, rel=1e-4)
    assert run_usage(2, 0.0, 60.0, 60.0 + WEEK, WEEK) == pytest.approx(60.0, rel=1e-4)
    # The exact integral, against a fine sum.
    steps = 10_000
    width = 5 * HOUR / steps
    summed = sum(3 * width * 2 ** (-(8 * HOUR - (i + 0.5) * width) / HOUR) for i in range(steps))
    assert run_usage(3, 0.0, 5 * HOUR, 8 * HOUR, HOUR) == pytest.approx(summed, rel=1e-6)
    # Keeping g GPUs busy for ever approaches g * H / ln 2; without a half-life nothing counts.
    assert run_usage(1, 0.0, 50 * HOUR, 50 * HOUR, HOUR) == pytest.approx(HOUR / math.log(2), rel=1e-6)
    assert run_usage(1, 0.0, 10.0, 10.0, 0.0) == 0.0


def test_the_tally_adds_ended_runs_and_running_work_in_any_order() -> None:
    tally = UsageTally(HOUR)
    tally.add(("v", "alice"), 1, 0.0, 1800.0)
    tally.add(("v", "alice"), 2, 600.0, 1200.0)  # ended earlier than the one added before it
    now = 5000.0
    expected = run_usage(1, 0.0, 1800.0, now, HOUR) + run_usage(2, 600.0, 1200.0, now, HOUR)
    assert tally.value(("v", "alice"), now) == pytest.approx(expected)
    bob = running(7, on("a", 0, 1), vc="v", user="bob", started=4000.0, borrowed=True)
    usage, borrowed = current_usage(tally, [bob], now)
    assert usage[("v", "alice")] == pytest.approx(expected)
    assert usage[("v", "bob")] == pytest.approx(run_usage(2, 4000.0, now, now, HOUR))
    assert borrowed == {"v": pytest.approx(run_usage(2, 4000.0, now, now, HOUR))}
    record_end(tally, bob, now)  # once it stops, the tally holds it
    usage, borrowed = current_usage(tally, [], now)
    assert usage[("v", "bob")] == pytest.approx(run_usage(2, 4000.0, now, now, HOUR))
    assert borrowed["v"] == pytest.approx(usage[("v", "bob")])


def by_vc_and_priority(j):
    return (j.vc, j.priority_rank)


def test_one_users_many_jobs_and_a_colleagues_one_take_turns() -> None:
    alices = [job(i, 1000, user="alice", at=float(i)) for i in range(1, 6)]
    bobs = job(9, 1000, user="bob", at=9.0)
    order, overtaken = fair_order([*alices, bobs], {}, WEEK, by_vc_and_priority)
    assert [j.job_id for j in order] == [1, 9, 2, 3, 4, 5]
    assert overtaken == {2: 1, 3: 1, 4: 1, 5: 1}
    # A heavy recent user waits behind a light one; off, submit order stays.
    order, _ = fair_order([*alices, bobs], {("default", "alice"): 100 * HOUR}, WEEK, by_vc_and_priority)
    assert [j.job_id for j in order][0] == 9
    assert fair_order([*alices, bobs], {}, 0.0, by_vc_and_priority)[0] == [*alices, bobs]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y"]), st.integers(0, 1),
                          st.sampled_from([0, 500, 1000, 4000])), min_size=0, max_size=30),
       st.dictionaries(st.sampled_from([("x", "a"), ("x", "b"), ("y", "c")]), st.floats(0, 1e6)))
def test_fair_order_only_reorders_within_a_queue_and_priority_and_keeps_each_users_order(jobs, usage) -> None:
    pending = [job(i, gpus, user=user, vc=vc, rank=rank, at=float(i)) for i, (user, vc, rank, gpus) in enumerate(jobs)]
    order, _ = fair_order(pending, usage, HOUR, by_vc_and_priority)
    assert sorted(j.job_id for j in order) == [j.job_id for j in pending]
    assert [by_vc_and_priority(j) for j in order] == [by_vc_and_priority(j) for j in pending]
    for user in ("a", "b", "c"):
        for group in {by_vc_and_priority(j) for j in pending}:
            mine = [j.job_id for j in pending if j.user == user and by_vc_and_priority(j) == group]
            assert [j.job_id for j in order if j.user == user and by_vc_and_priority(j) == group] == mine


def test_who_starts_first_among_equals_depends_on_recent_usage_and_why_pending_says_so() -> None:
    vcs = (VirtualCluster("v", {"A100": 8}),)
    pending = [job(1, 8000, vc="v", user="alice", at=0.0), job(2, 8000, vc="v", user="bob", at=5.0)]
    usage = {("v", "alice"): 36 * HOUR, ("v", "bob"): 2 * HOUR}
    decisions = schedule(snapshot((node("a"),), pending, vcs=vcs, usage=usage))
    assert [s.job_id for s in decisions.starts] == [2]
    [wait] = decisions.waits
    assert wait.message.endswith(
        "; fair share: 1 later job(s) of other users go first, by their users' recent use and jobs queued "
        "(alice: 36.0 GPU-h recently, half-life 7 d)"
    )
    # Off, submit order decides, as before.
    off = schedule(snapshot((node("a"),), pending, vcs=vcs, usage=usage,
                            config=SchedulerConfig(fair_share_half_life=0.0)))
    assert [s.job_id for s in off.starts] == [1]


def test_priority_still_goes_before_fair_share() -> None:
    pending = [job(1, 8000, user="alice", rank=0, at=9.0), job(2, 8000, user="bob", rank=1, at=0.0)]
    decisions = schedule(snapshot((node("a"),), pending, usage={("default", "alice"): 1e9}))
    assert [s.job_id for s in decisions.starts] == [1]
    assert decisions.waits[0].reason == PendingReason.NO_FIT
