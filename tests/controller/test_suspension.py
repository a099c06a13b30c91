"""Suspension under the controller, with the real local backend and store: a job that
declared ``preemption: suspend`` is told to save its state, waits SUSPENDED (held by its
owner, or for the scheduler to resume it) and resumes as a new attempt that knows it
resumes, with its place and its retries kept; one that cannot save its state is refused."""

from __future__ import annotations

import pytest
from e2e.server import wait_until
from sqlalchemy import select
from worlds import World

from trainyard.controller.scheduling import preempt_jobs
from trainyard.core.clock import SystemClock
from trainyard.scheduler.snapshot import Preempt
from trainyard.services import jobs as job_service
from trainyard.services import suspension
from trainyard.services.errors import Conflict, Forbidden, NotFound
from trainyard.services.specs import StoredSpecs
from trainyard.store.rows import JobRow, TaskRow

CLOCK = SystemClock()


@pytest.fixture
def world(make_world) -> World:
    return make_world(gpus=2, users=("alice", "bob", "root"), admins=("root",))


def saving_job(marker, *, gpu: int = 1, grace: int = 30, signal: str = "SIGUSR1", name: str = "saver") -> str:
    """A job that records each attempt and, told to suspend (its signal, or SIGTERM from a
    backend that cannot deliver one), writes "saved" and exits 85."""
    return f"""
name: {name}
preemption: suspend
suspendGracePeriodSeconds: {grace}
suspendSignal: {signal}
taskRoles:
  m:
    resourcePerInstance: {{gpu: {gpu}}}
    commands:
      - trap 'echo saved >> {marker}; exit 85' USR1 USR2 TERM
      - echo "attempt $TRAINYARD_ATTEMPT resumed=$TRAINYARD_RESUMED" >> {marker}
      - sleep 300 & wait
"""


def started(marker, attempts: int):
    return wait_until(lambda: marker.exists() and marker.read_text().count("attempt") >= attempts,
                      what=f"attempt {attempts - 1} to start")


def test_an_owner_suspends_a_running_job_which_saves_waits_held_and_resumes_as_a_new_attempt(world, tmp_path):
    marker = tmp_path / "runs"
    job_id = world.submit(saving_job(marker))
    world.drive(job_id, ("RUNNING",))
    started(marker, 1)

    suspension.suspend_job(world.db, world.alice, job_id, specs=StoredSpecs(), clock=CLOCK)
    job = world.drive(job_id, ("SUSPENDED",))
    assert job.held_by == "alice" and job.attempt == 1 and job.retries_used == 0
    assert "suspended by alice" in job.state_message
    assert marker.read_text().splitlines()[:2] == ["attempt 0 resumed=0", "saved"]
    [first] = world.attempts(job_id)
    assert first.state == "SUSPENDED" and first.reason == "suspended by alice"
    with world.db.session() as s:
        [task] = s.scalars(select(TaskRow).where(TaskRow.job_id == job_id)).all()
        assert task.state == "STOPPED" and task.exit_code == 85 and "saved its state" in task.message
    kinds = [kind for kind, _ in world.events(job_id)]
    assert kinds[-3:] == ["suspend-requested", "task-exited", "suspended"]
    assert "its task saved its state; held by alice until resumed" in world.events(job_id)[-1][1]

    for _ in range(5):  # held: the scheduler leaves it alone though the GPUs are free
        world.cycle()
    assert world.drive(job_id, ("SUSPENDED",)).attempt == 1

    suspension.resume_job(world.db, world.alice, job_id, clock=CLOCK)
    job = world.drive(job_id, ("RUNNING",))
    started(marker, 2)
    assert marker.read_text().splitlines()[2] == "attempt 1 resumed=1"
    assert job.attempt == 1 and job.retries_used == 0 and job.held_by is None
    kinds = [kind for kind, _ in world.events(job_id)]
    assert kinds[-2:] == ["resume-requested", "placed"]
    assert "(resuming its suspended state)" in world.events(job_id)[-1][1]


@pytest.mark.postgres
def test_the_scheduler_suspends_a_job_which_resumes_on_its_own_with_its_gpu_time_counted(world, tmp_path):
    marker = tmp_path / "runs"
    job_id = world.submit(saving_job(marker, gpu=2))
    world.drive(job_id, ("RUNNING",))
    started(marker, 1)
    with world.db.session() as s:
        assert preempt_jobs(s, [Preempt(job_id, 0, "taking turns with job 9", 9, suspend=True)], CLOCK,
                            StoredSpecs().of) == [job_id]
    # Not held: it resumes as soon as the GPUs are free again, which they are at once.
    job = world.drive(job_id, ("RUNNING",), until=lambda j: j.attempt == 1)
    started(marker, 2)
    assert marker.read_text().splitlines() == ["attempt 0 resumed=0", "saved", "attempt 1 resumed=1"]
    assert job.attained_gpu_seconds > 0  # two GPUs for as long as attempt 0 ran
    assert [a.state for a in world.attempts(job_id)] == ["SUSPENDED", "RUNNING"]
    messages = dict(world.events(job_id))
    assert "waiting to resume as attempt 1, with its place in the queue" in messages["suspended"]


def test_a_task_that_does_not_save_in_time_is_stopped_at_the_end_of_the_grace_period(world, tmp_path):
    marker = tmp_path / "runs"
    job_id = world.submit(f"""
name: deaf
preemption: suspend
suspendGracePeriodSeconds: 1
suspendSignal: none
taskRoles:
  m:
    commands:
      - echo "attempt $TRAINYARD_ATTEMPT" >> {marker}
      - sleep 300
""")
    world.drive(job_id, ("RUNNING",))
    started(marker, 1)
    suspension.suspend_job(world.db, world.alice, job_id, specs=StoredSpecs(), clock=CLOCK)
    job = world.drive(job_id, ("SUSPENDED",))
    assert job.held_by == "alice"
    assert "0 of 1 task(s) saved their state; the rest were stopped" in world.events(job_id)[-1][1]


def test_a_job_that_cannot_save_its_state_is_not_suspended_while_it_runs(world, tmp_path):
    job_id = world.submit("name: plain\ntaskRoles:\n  m:\n    commands: [sleep 300]\n")
    world.drive(job_id, ("RUNNING",))
    with pytest.raises(Conflict, match="does not say 'preemption: suspend'.*yard stop"):
        suspension.suspend_job(world.db, world.alice, job_id, specs=StoredSpecs(), clock=CLOCK)
    assert world.drive(job_id, ("RUNNING",)).held_by is None


def test_a_waiting_job_is_held_until_resumed_and_a_held_job_can_be_stopped(world, tmp_path):
    blocker = world.submit("name: big\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n"
                           "    commands: [sleep 300]\n")
    world.drive(blocker, ("RUNNING",))
    waiting = world.submit("name: next\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n"
                           "    commands: ['true']\n")
    suspension.suspend_job(world.db, world.alice, waiting, specs=StoredSpecs(), clock=CLOCK)
    suspension.suspend_job(world.db, world.alice, waiting, specs=StoredSpecs(), clock=CLOCK)  # twice: no change
    job_service.stop_job(world.db, world.alice, blocker, clock=CLOCK)
    world.drive(blocker, ("STOPPED",))
    for _ in range(5):
        world.cycle()
    held = world.drive(waiting, ("SUSPENDED",))
    assert held.held_by == "alice" and held.pending_reason is None and held.started_at is None
    assert [k for k, _ in world.events(waiting)] == ["submitted", "suspended"]

    suspension.resume_job(world.db, world.alice, waiting, clock=CLOCK)
    with world.db.session() as s:
        assert s.get(JobRow, waiting).state == "WAITING"  # it never ran: nothing saved to resume
    assert world.drive(waiting, ("SUCCEEDED",)).attempt == 0

    again = world.submit("name: again\ntaskRoles:\n  m:\n    commands: ['true']\n")
    suspension.suspend_job(world.db, world.alice, again, specs=StoredSpecs(), clock=CLOCK)
    job_service.stop_job(world.db, world.alice, again, clock=CLOCK)
    stopped = world.drive(again, ("STOPPED",))
    assert stopped.state_message == "stopped by alice while suspended" and stopped.held_by is None


def test_who_may_suspend_and_resume(world, tmp_path):
    marker = tmp_path / "runs"
    job_id = world.submit(saving_job(marker))
    with pytest.raises(NotFound):
        suspension.suspend_job(world.db, world.bob, job_id, specs=StoredSpecs(), clock=CLOCK)
    with pytest.raises(Conflict, match="is not suspended"):
        suspension.resume_job(world.db, world.alice, job_id, clock=CLOCK)
    suspension.suspend_job(world.db, world.root, job_id, specs=StoredSpecs(), clock=CLOCK)  # an admin holds it
    with pytest.raises(Forbidden, match="suspended by root, an admin: only an admin may resume it"):
        suspension.resume_job(world.db, world.alice, job_id, clock=CLOCK)
    suspension.resume_job(world.db, world.root, job_id, clock=CLOCK)
    world.drive(job_id, ("RUNNING",))
    started(marker, 1)
    with pytest.raises(Conflict, match="is not suspended \\(RUNNING\\)"):
        suspension.resume_job(world.db, world.alice, job_id, clock=CLOCK)
    job_service.stop_job(world.db, world.alice, job_id, clock=CLOCK)
    world.drive(job_id, ("STOPPED",))
    with pytest.raises(Conflict, match="has already ended"):
        suspension.suspend_job(world.db, world.alice, job_id, specs=StoredSpecs(), clock=CLOCK)


def test_a_more_urgent_job_suspends_a_suspendable_one_which_resumes_when_it_is_done(world, tmp_path):
    marker = tmp_path / "runs"
    low = world.submit(saving_job(marker, gpu=2, name="low").replace("name: low", "name: low\npriority: oppo"))
    world.drive(low, ("RUNNING",))
    started(marker, 1)
    urgent = world.submit("name: urgent\npriority: prod\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n"
                          "    commands: ['sleep 1']\n")
    suspended = world.drive(low, ("SUSPENDED",))
    assert suspended.held_by is None and f"job {urgent}" in suspended.state_message
    world.drive(urgent, ("SUCCEEDED",))
    world.drive(low, ("RUNNING",), until=lambda j: j.attempt == 1)
    started(marker, 2)
    assert marker.read_text().splitlines() == ["attempt 0 resumed=0", "saved", "attempt 1 resumed=1"]
    kinds = [kind for kind, _ in world.events(low)]
    assert "suspend-requested" in kinds and "preempted" not in kinds and "requeued" not in kinds


@pytest.mark.postgres
def test_jobs_of_one_priority_take_turns_on_a_full_cluster(make_world, tmp_path):
    from trainyard.scheduler.snapshot import SchedulerConfig

    world = make_world(gpus=2, clock=CLOCK, config=SchedulerConfig(time_slice=1.0, turn_floor=0.0))
    first_marker, second_marker = tmp_path / "first", tmp_path / "second"
    first = world.submit(saving_job(first_marker, gpu=2, name="first"))
    world.drive(first, ("RUNNING",))
    started(first_marker, 1)
    second = world.submit(saving_job(second_marker, gpu=2, name="second"))
    # Once first has run its slice, second (which has had no service) takes its turn...
    world.drive(first, ("SUSPENDED",))
    world.drive(second, ("RUNNING",))
    started(second_marker, 1)
    # ...and after second's slice, first (which has had less) takes it back, resuming.
    world.drive(first, ("RUNNING",), until=lambda j: j.attempt == 1)
    started(first_marker, 2)
    assert first_marker.read_text().splitlines() == ["attempt 0 resumed=0", "saved", "attempt 1 resumed=1"]
    assert world.drive(second, ("SUSPENDED", "RUNNING")).retries_used == 0
    assert f"job {second}" in dict(world.events(first))["suspend-requested"]  # whose turn it was
