"""The controller's fair-share usage: bootstrapped from the store, kept up to date as runs end,
and the same after a restart (checked against ``scheduler.fairshare.run_usage``)."""

from __future__ import annotations

import pytest

from tests.controller.test_world import inventory
from trainyard.controller.fairshare import FairShareUsage
from trainyard.controller.scheduling import PortPlan, apply_decisions
from trainyard.controller.world import running_work
from trainyard.core.clock import FakeClock
from trainyard.scheduler.fairshare import run_usage
from trainyard.scheduler.snapshot import Decisions, GpuShare, RunningJob, StartJob, TaskPlacement
from trainyard.services import auth
from trainyard.services import jobs as job_service
from trainyard.spec.loading import parse_job
from trainyard.store.events import job_events
from trainyard.store.rows import AttemptRow, JobRow, TaskRow

pytestmark = pytest.mark.postgres

H = 3600.0  # the half-life
SPEC = "name: a\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: %d}\n    commands: [sleep 600]\n"


def start(db, clock, user: str, gpus: list[int], *, borrowed: bool = False) -> int:
    """Submit a job of ``user`` and place it on these GPUs of n-A100, as the controller would."""
    with db.session() as s:
        if user not in {u.name for u in auth.list_users(s)}:
            auth.create_user(s, user, is_admin=False, clock=clock)
        job_id = job_service.submit_job(s, auth.get_user(s, user), parse_job(SPEC % len(gpus)), clock=clock).id
    placement = TaskPlacement("w", 0, "n-A100", tuple(GpuShare(g, 1000) for g in gpus), 1000, 1024)
    with db.session() as s:
        apply_decisions(s, Decisions(starts=(StartJob(job_id, (placement,), borrowed=borrowed),)), {},
                        {job_id: PortPlan(0, {})}, clock)
    return job_id


def finish(db, clock, job_id: int) -> None:
    """The job's tasks and attempt end now, as reconcile would record it."""
    now = clock.now()
    with db.session() as s:
        for task in s.query(TaskRow).filter_by(job_id=job_id):
            task.state, task.finished_at = "SUCCEEDED", now
        attempt = s.query(AttemptRow).filter_by(job_id=job_id).one()
        attempt.state, attempt.finished_at = "SUCCEEDED", now
        job = s.get(JobRow, job_id)
        job.state, job.finished_at = "SUCCEEDED", now


def usage(db, keeper: FairShareUsage, clock):
    with db.session() as s:
        return keeper.usage(s, running_work(s), clock.now().timestamp())


def same(got, expected) -> bool:
    """The snapshot's two mappings, each equal to the expected one up to rounding."""
    return all(g.keys() == e.keys() and g == pytest.approx(e) for g, e in zip(got, expected, strict=True))


def test_usage_counts_ended_and_running_runs_and_survives_a_restart(db) -> None:
    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8)
    t0 = clock.now().timestamp()
    keeper = FairShareUsage(H)
    assert usage(db, keeper, clock) == ({}, {})  # bootstrapped from an empty history

    borrowed = start(db, clock, "alice", [0, 1], borrowed=True)
    own = start(db, clock, "bob", [2])
    clock.advance(100)
    now = t0 + 100
    assert same(usage(db, keeper, clock), (
        {("default", "alice"): run_usage(2, t0, now, now, H), ("default", "bob"): run_usage(1, t0, now, now, H)},
        {"default": run_usage(2, t0, now, now, H)}))

    clock.advance(800)
    finish(db, clock, borrowed)  # at t0 + 900
    clock.advance(300)
    now = t0 + 1200
    expected = (
        {("default", "alice"): run_usage(2, t0, t0 + 900, now, H), ("default", "bob"): run_usage(1, t0, now, now, H)},
        {"default": run_usage(2, t0, t0 + 900, now, H)},
    )
    assert same(usage(db, keeper, clock), expected)
    # A restarted controller rebuilds the same from the store.
    assert same(usage(db, FairShareUsage(H), clock), expected)

    # A run started and ended between two schedule steps counts too, from its attempt's end.
    with db.session() as s:
        work = running_work(s)
    short = start(db, clock, "carol", [3])
    with db.session() as s:
        number = s.get(JobRow, short).attempt
    placed = (TaskPlacement("w", 0, "n-A100", (GpuShare(3, 1000),), 1000, 1024),)
    keeper.started([(RunningJob(short, "default", "carol", 1, placed, started_at=now), number)])
    clock.advance(60)
    finish(db, clock, short)
    clock.advance(40)
    now = t0 + 1300
    got, _ = usage(db, keeper, clock)
    assert got[("default", "carol")] == pytest.approx(run_usage(1, t0 + 1200, t0 + 1260, now, H))
    assert got[("default", "alice")] == pytest.approx(run_usage(2, t0, t0 + 900, now, H))
    assert work.attempts == {own: 0}


def test_the_start_event_and_the_attempt_say_it_runs_borrowed(db) -> None:
    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8)
    job_id = start(db, clock, "alice", [0], borrowed=True)
    with db.session() as s:
        assert s.query(AttemptRow).filter_by(job_id=job_id).one().borrowed
        assert [r.borrowed for r in running_work(s).running] == [True]
        placed = [e.message for e in job_events(s, job_id) if e.kind == "placed"]
    assert placed == [
        "attempt 0 placed: w/0 on n-A100 GPU 0; started on borrowed GPUs: VC default is over its quota, and it "
        "is reclaimed (suspended if it can be, else requeued) when the lending VC needs them"
    ]


def test_fair_share_off_keeps_no_usage(db) -> None:
    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8)
    start(db, clock, "alice", [0])
    clock.advance(100)
    keeper = FairShareUsage(0)
    assert usage(db, keeper, clock) == ({}, {}) and keeper.tally is None


def test_an_elastic_job_counts_each_size_for_the_time_it_held_live_and_after_a_restart(db) -> None:
    from trainyard.controller import elastic
    from trainyard.core import transitions
    from trainyard.scheduler.snapshot import Grow

    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8)
        auth.create_user(s, "alice", is_admin=False, clock=clock)
        spec = SPEC.replace("  w:\n", "  w:\n    instances: {min: 1, max: 3}\n") % 1
        job_id = job_service.submit_job(s, auth.get_user(s, "alice"), parse_job(spec), clock=clock).id
    t0 = clock.now().timestamp()
    first = TaskPlacement("w", 0, "n-A100", (GpuShare(0, 1000),), 1000, 1024)
    with db.session() as s:
        apply_decisions(s, Decisions(starts=(StartJob(job_id, (first,)),)), {}, {job_id: PortPlan(0, {})}, clock)
    with db.session() as s:
        [task] = s.query(TaskRow).filter_by(job_id=job_id)
        transitions.task_launched(task, s.get(JobRow, job_id), clock.now())
    keeper = FairShareUsage(H)
    usage(db, keeper, clock)
    clock.advance(100)
    added = tuple(TaskPlacement("w", i, "n-A100", (GpuShare(i, 1000),), 1000, 1024) for i in (1, 2))
    with db.session() as s:
        assert elastic.grow(s, [Grow(job_id, added)], {job_id: {}}, clock) == [job_id]
        for task in s.query(TaskRow).filter_by(job_id=job_id, state="WAITING").filter(TaskRow.index > 0):
            transitions.task_launched(task, s.get(JobRow, job_id), clock.now())  # the new workers start now
    t1 = clock.now().timestamp()
    usage(db, keeper, clock)  # the first cycle after the resize sees it
    clock.advance(200)
    now = t1 + 200
    expected = run_usage(1, t0, t1, now, H) + run_usage(3, t1, now, now, H)
    assert same(usage(db, keeper, clock), ({("default", "alice"): expected}, {}))
    finish(db, clock, job_id)
    clock.advance(50)
    after = now + 50
    ended = run_usage(1, t0, now, after, H) + run_usage(2, t1, now, after, H)
    assert same(usage(db, keeper, clock), ({("default", "alice"): ended}, {}))
    # A restarted controller reads the same from the store: each worker for its own time.
    assert same(usage(db, FairShareUsage(H), clock), ({("default", "alice"): ended}, {}))
