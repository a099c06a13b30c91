"""A cycle bounded by ``SchedulerConfig.max_starts`` (Slurm's ``sched_max_job_start``):
its starts are the first starts of the unbounded cycle on the same snapshot, it asks for the
next cycle at once, and every job it did not try waits ``BEHIND`` saying so."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_world import check_capacity, check_gangs, check_sharing, job, node, snapshot
from test_invariants import busy_worlds, check_quotas, crowded_worlds, run, shared_worlds, worlds

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import PendingReason, Snapshot


def bounded(s: Snapshot, most: int) -> Snapshot:
    return replace(s, config=replace(s.config, max_starts=most))


@settings(max_examples=100, deadline=None)
@given(st.one_of(worlds(), busy_worlds(), crowded_worlds(), shared_worlds()), st.integers(1, 3))
def test_a_bounded_cycle_makes_the_first_starts_of_the_unbounded_one(scenario, most) -> None:
    for s, full in run(scenario):
        d = schedule(bounded(s, most))
        check_capacity(s, d)
        check_gangs(s, d)
        check_quotas(s, d)
        check_sharing(s, d)
        if not d.more:  # the bound was never reached: nothing changes
            assert d == full
            continue
        assert len(d.starts) >= most
        assert d.starts == full.starts[: len(d.starts)]
        assert not d.grows
        started = {start.job_id for start in d.starts}
        waiting = {wait.job_id for wait in d.waits}
        assert started | waiting == {j.job_id for j in s.pending} and not started & waiting
        # The jobs it did not try wait BEHIND, saying so; those it tried and left waiting may
        # still start or preempt in the unbounded cycle's later phases (preemption, borrowing).
        untried = [w for w in d.waits if "started its most jobs" in w.message]
        assert all(w.reason == PendingReason.BEHIND for w in untried)

def test_the_jobs_past_the_bound_wait_behind_and_the_next_cycle_tries_them() -> None:
    s = snapshot([node("n1")], [job(i, 1000) for i in range(1, 6)])
    d = schedule(bounded(s, 2))
    assert [start.job_id for start in d.starts] == [1, 2] and d.more
    assert [(w.job_id, w.reason, w.position) for w in d.waits] == [
        (3, PendingReason.BEHIND, 1), (4, PendingReason.BEHIND, 2), (5, PendingReason.BEHIND, 3)]
    assert "started its most jobs (2) before its turn" in d.waits[0].message
    unbounded = schedule(s)
    assert not unbounded.more and len(unbounded.starts) == 5
    # Stopped at the bound, the cycle asks for the next one even with no job left untried:
    # the phases it skipped (preemption, borrowing) may have work.
    assert schedule(bounded(s, 5)).more and not schedule(bounded(s, 6)).more
