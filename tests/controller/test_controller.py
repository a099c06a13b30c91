"""The controller against a real store and the real local backend, driven cycle by cycle."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from deadlines import scaled
from e2e.server import wait_until
from sqlalchemy import select
from worlds import World

from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.loop import Controller
from trainyard.controller.scheduling import apply_decisions
from trainyard.core.clock import SystemClock
from trainyard.scheduler.snapshot import Decisions, KeepWaiting, PendingReason
from trainyard.services import jobs as job_service
from trainyard.store.rows import JobRow


def test_a_failed_task_is_rerun_in_place_up_to_task_retry_count(world, tmp_path) -> None:
    marker = tmp_path / "runs"
    job_id = world.submit(f"""
name: rerun
taskRoles:
  m:
    taskRetryCount: 2
    commands:
      - echo run >> {marker}
      - test "$TRAINYARD_TASK_RUN" -ge 2
""")
    job = world.drive(job_id)
    assert job.state == "SUCCEEDED" and job.attempt == 0
    assert marker.read_text() == "run\nrun\nrun\n"
    assert world.tasks(job_id)[0].run == 2


def test_min_succeeded_ends_the_job_and_stops_the_remaining_tasks(world) -> None:
    job_id = world.submit("""
name: early
taskRoles:
  chief:
    completion: {minSucceededInstances: 1}
    commands: ['true']
  server:
    commands: ['sleep 300']
""")
    job = world.drive(job_id)
    assert job.state == "SUCCEEDED"
    states = {(t.role, t.state) for t in world.tasks(job_id)}
    assert states == {("chief", "SUCCEEDED"), ("server", "STOPPED")}
    server = next(t for t in world.tasks(job_id) if t.role == "server")
    assert server.message == "killed by SIGTERM (Trainyard asked it to stop)"  # the signal named once


def test_failures_are_tolerated_when_min_failed_is_minus_one(world) -> None:
    job_id = world.submit("""
name: tolerant
taskRoles:
  w:
    instances: 2
    completion: {minFailedInstances: -1}
    commands: ['exit $RANK']
""")
    assert world.drive(job_id).state == "SUCCEEDED"
    assert [t.exit_code for t in world.tasks(job_id)] == [0, 1]


def test_command_not_found_is_not_retried(world) -> None:
    job_id = world.submit("name: typo\njobRetryCount: 3\ntaskRoles:\n  m:\n    commands: ['no-such-command-xyz']\n")
    job = world.drive(job_id)
    assert (job.state, job.exit_code, job.retries_used) == ("FAILED", 127, 0)
    assert "command not found" in job.state_message


def test_a_new_controller_launches_placed_tasks_once(world, tmp_path) -> None:
    """A crash between placement and launch: the next controller launches, exactly once."""
    marker = tmp_path / "starts"
    job_id = world.submit(f"name: once\ntaskRoles:\n  m:\n    commands: ['echo x >> {marker}']\n")
    world.controller._schedule()  # placed, not launched: what a crash right after the commit leaves
    assert world.tasks(job_id)[0].state == "WAITING"
    world.controller.stop()  # crashed
    world.controller = again = Controller(world.db, LocalBackend(tmp_path / "local", gpus=simulated_gpus(4)),
                                          SystemClock())
    again.run_once()
    again.reconciler.run()
    assert world.drive(job_id).state == "SUCCEEDED"
    assert marker.read_text() == "x\n"


def test_gpus_are_held_until_tasks_end_and_jobs_wait_with_a_reason(world) -> None:
    # A short grace: this test is about GPUs held, not about stopping (should a stop go
    # astray, the repeat past its deadline enforces it; test_local_stop_delivery).
    first = world.submit("name: a\nstopGracePeriodSeconds: 5\ntaskRoles:\n  m:\n"
                         "    resourcePerInstance: {gpu: 3}\n    commands: ['sleep 300']\n")
    second = world.submit("name: b\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n    commands: ['true']\n")
    world.drive(first, states=("RUNNING",))
    world.cycle()
    with world.db.session() as s:
        waiting = s.get(JobRow, second)
        assert (waiting.state, waiting.pending_reason, waiting.pending_position) == ("WAITING", "NO_FIT", 1)
    world.stop(first)
    assert world.drive(first).state == "STOPPED"
    assert world.drive(second).state == "SUCCEEDED"


def test_a_cycle_stopped_at_its_bound_of_starts_asks_for_the_next_at_once(make_world) -> None:
    from trainyard.scheduler.snapshot import SchedulerConfig

    world = make_world(gpus=2, config=SchedulerConfig(max_starts=1))
    job = "name: {}\ntaskRoles:\n  m:\n    resourcePerInstance: {{gpu: 1}}\n    commands: ['sleep 300']\n"
    first, second = world.submit(job.format("a")), world.submit(job.format("b"))
    world.controller._dirty = True  # as a submit's wake does, without setting the loop's event
    assert not world.controller._wake.is_set()
    world.controller.run_once()
    assert world.job(first).state != "WAITING"
    waiting = world.job(second)
    assert (waiting.state, waiting.pending_reason) == ("WAITING", "BEHIND")
    assert "this cycle started its most jobs (1) before its turn" in waiting.pending_message
    assert world.controller._wake.is_set()  # the loop runs the next cycle without waiting for its tick
    world.controller.run_once()  # as the woken loop does
    assert world.job(second).state != "WAITING"


def test_a_position_that_changed_alone_waits_for_its_refresh_but_a_new_reason_is_written_at_once(world) -> None:
    """``recent``: jobs whose pending fields were written a moment ago (``yard up`` refreshes
    a position or message that changed alone every REASON_REFRESH_SECONDS)."""
    job = world.submit("name: a\ntaskRoles:\n  m:\n    commands: ['true']\n")

    def write(reason: PendingReason, message: str, position: int, before, recent=()):
        decisions = Decisions(waits=(KeepWaiting(job, reason, message, position),))
        with world.db.session() as s:
            _, written = apply_decisions(s, decisions, before, {}, world.clock, recent=recent)
        row = world.job(job)
        return written, (row.pending_reason, row.pending_message, row.pending_position)

    written, stored = write(PendingReason.NO_FIT, "2nd in VC default", 2, {}, recent={job})  # never written: now
    assert stored == ("NO_FIT", "2nd in VC default", 2)
    again, stored = write(PendingReason.NO_FIT, "1st in VC default", 1, written, recent={job})
    assert again == {} and stored == ("NO_FIT", "2nd in VC default", 2)  # its refresh is not due
    again, stored = write(PendingReason.QUOTA, "over its quota", 1, written, recent={job})
    assert job in again and stored == ("QUOTA", "over its quota", 1)  # a new reason: at once
    again, stored = write(PendingReason.QUOTA, "over its quota, 1st", 1, again)
    assert job in again and stored == ("QUOTA", "over its quota, 1st", 1)  # due: written


def test_a_job_whose_stored_file_no_longer_validates_fails_alone(world) -> None:
    broken = world.submit("name: old\ntaskRoles:\n  m:\n    commands: ['true']\n")
    with world.db.session() as s:
        row = s.get(JobRow, broken)
        row.spec = {**row.spec, "taskRoles": {"m": {**row.spec["taskRoles"]["m"], "instances": 0}}}
    healthy = world.submit("name: new\ntaskRoles:\n  m:\n    commands: ['true']\n")
    job = world.drive(broken)
    assert job.state == "FAILED" and "no longer valid" in job.state_message
    assert world.drive(healthy).state == "SUCCEEDED"


def test_a_task_launched_just_before_a_crash_keeps_its_gpus_until_it_ends(world, tmp_path) -> None:
    """Stop arrives for a task the store still thinks unlaunched, but that runs."""
    from trainyard.controller.launching import build_launch
    from trainyard.controller.reconcile import current_attempt

    job_id = world.submit("""
name: racing
stopGracePeriodSeconds: 5
taskRoles:
  m:
    resourcePerInstance: {gpu: 4}
    commands:
      - sleep 300
""")
    world.controller._schedule()
    with world.db.session() as s:
        job = s.get(JobRow, job_id)
        attempt = current_attempt(job)
        world.backend.launch(build_launch(job, attempt, attempt.tasks[0], world.controller.spec_of(job), {}))
        job_service.request_stop(s, s.merge(world.user), job_id, clock=SystemClock())
    world.controller.reconciler.run()
    assert [t.state for t in world.tasks(job_id)] == ["RUNNING"]  # not "stopped before launch"
    assert world.drive(job_id).state == "STOPPED"
    assert world.tasks(job_id)[0].exit_code is not None  # its real end was observed


def test_a_preempted_job_gets_its_grace_then_runs_again_as_a_new_attempt_without_using_retries(
    world, tmp_path
) -> None:
    from trainyard.controller.scheduling import preempt_jobs
    from trainyard.scheduler.snapshot import Preempt
    from trainyard.services.specs import StoredSpecs

    marker = tmp_path / "runs"
    job_id = world.submit(f"""
name: victim
jobRetryCount: 0
stopGracePeriodSeconds: 5
taskRoles:
  m:
    resourcePerInstance: {{gpu: 2}}
    commands:
      - echo "attempt $TRAINYARD_ATTEMPT" >> {marker}
      - trap 'echo checkpointed >> {marker}; exit 0' TERM
      - sleep 300 & wait
""")
    world.drive(job_id, states=("RUNNING",))
    deadline = time.monotonic() + scaled(10)
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # the trap must be set before the SIGTERM comes
    with world.db.session() as s:
        assert preempt_jobs(s, [
            Preempt(job_id, 0, "preempted for job 99", 0)], SystemClock(), StoredSpecs().of) == [job_id]
    with world.db.session() as s:
        assert preempt_jobs(s, [Preempt(job_id, 0, "again", 0)], SystemClock(), StoredSpecs().of) == []  # never twice
    requeued = world.drive(job_id, states=("RUNNING",), until=lambda j: j.attempt == 1)
    assert requeued.attempt == 1 and requeued.retries_used == 0
    deadline = time.monotonic() + scaled(10)
    while marker.read_text().count("attempt") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.read_text().splitlines()[:3] == ["attempt 0", "checkpointed", "attempt 1"]
    with world.db.session() as s:
        from trainyard.store.rows import AttemptRow, JobEventRow

        attempts = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)).all()
        assert [a.state for a in attempts] == ["PREEMPTED", "RUNNING"]
        kinds = [e.kind for e in s.scalars(select(JobEventRow).where(JobEventRow.job_id == job_id))]
        assert kinds.count("preempted") == 1 and "requeued" in kinds


def test_a_job_that_ended_on_its_own_before_its_preemption_took_effect_keeps_its_outcome(world) -> None:
    """The race of a preemption with a job's own end: the scheduler marks the attempt
    PREEMPTED, but every task had exited 0 before any stop was sent. The job succeeded;
    it must not be requeued and run again."""
    from trainyard.controller.launching import task_key
    from trainyard.controller.scheduling import preempt_jobs
    from trainyard.scheduler.snapshot import Preempt
    from trainyard.services.specs import StoredSpecs
    from trainyard.store.rows import AttemptRow

    job_id = world.submit("name: quick\ntaskRoles:\n  w:\n    instances: 2\n    resourcePerInstance: {gpu: 1}\n"
                          "    commands: ['exit 0']\n")
    world.drive(job_id, states=("RUNNING",))
    with world.db.session() as s:
        job = s.get(JobRow, job_id)
        attempt = job.attempts[0]
        keys = [task_key(job, attempt, t) for t in attempt.tasks]
    deadline = time.monotonic() + scaled(10)
    while any(st.running for st in world.backend.observe(keys).values()) and time.monotonic() < deadline:
        time.sleep(0.02)  # both processes have exited; the controller has not looked yet
    with world.db.session() as s:
        assert preempt_jobs(s, [
            Preempt(job_id, 0, "reclaimed for job 99", 0)], SystemClock(), StoredSpecs().of) == [job_id]
    reconcile_until(world, job_id, "SUCCEEDED")
    with world.db.session() as s:
        job = s.get(JobRow, job_id)
        attempts = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id)).all()
        assert (job.attempt, job.exit_code) == (0, 0)
        assert [a.state for a in attempts] == ["SUCCEEDED"]
        assert "ended before its preemption took effect" in attempts[0].reason
    assert [t.state for t in world.tasks(job_id)] == ["SUCCEEDED", "SUCCEEDED"]


def reconcile_until(world: World, job_id: int, state: str) -> None:
    """Reconcile passes only (no scheduling) until the job is in ``state``."""
    deadline = time.monotonic() + scaled(20)
    while time.monotonic() < deadline:
        world.controller.reconciler.run()
        with world.db.session() as s:
            if s.get(JobRow, job_id).state == state:
                return
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} did not reach {state}")


def test_a_retried_job_waiting_again_for_the_same_reason_still_shows_it(world) -> None:
    # The hog holds the GPUs until the test stops it (a `sleep 1` could end between the two
    # cycles on a loaded machine, and the flaky job would be placed, not NO_FIT).
    hog = world.submit("name: h\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: 4}\n    commands: ['sleep 600']\n")
    world.cycle()
    flaky = world.submit("name: f\njobRetryCount: 2\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: 1}\n"
                         "    commands: ['exit 1']\n")
    world.cycle()
    with world.db.session() as s:
        first = (s.get(JobRow, flaky).pending_reason, s.get(JobRow, flaky).pending_message)
    assert first[0] == "NO_FIT"
    world.stop(hog)
    reconcile_until(world, hog, "STOPPED")
    world.cycle()  # places the flaky job
    # A prod job comes; the flaky job fails and is requeued without a scheduling cycle in
    # between, then waits behind the prod job for the same reason as before.
    world.submit("name: p\npriority: prod\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: 4}\n"
                 "    commands: ['sleep 600']\n")
    reconcile_until(world, flaky, "WAITING")
    world.cycle()
    with world.db.session() as s:
        job = s.get(JobRow, flaky)
        assert (job.state, job.retries_used) == ("WAITING", 1)
        assert (job.pending_reason, job.pending_message) == first


def test_a_task_that_ended_unwatched_keeps_the_end_its_supervisor_recorded(make_world) -> None:
    """A controller that sees an exit late (it was down, or busy) records when the task
    ended, not when it looked: runtimes after a restart are not inflated."""
    from datetime import UTC, datetime, timedelta

    from trainyard.core.clock import FakeClock

    clock = FakeClock(datetime.now(UTC) - timedelta(seconds=30))  # launched before it really ends
    world = make_world(gpus=1, cpu_milli=2000, memory_mb=4096, clock=clock)
    job_id = world.submit("name: quick\ntaskRoles:\n  w:\n    commands: ['true']\n")
    deadline = time.monotonic() + scaled(20)
    while not world.tasks(job_id) or world.tasks(job_id)[0].started_at is None:  # launched, by the fake clock
        assert time.monotonic() < deadline, "the task was not launched"
        clock.advance(1)
        world.controller.run_once()
    while time.monotonic() < deadline:
        clock.advance(3600)  # every look comes an hour later than the last
        world.controller.run_once()
        with world.db.session() as s:
            if s.get(JobRow, job_id).state == "SUCCEEDED":
                break
        time.sleep(0.02)
    (task,) = world.tasks(job_id)
    assert task.state == "SUCCEEDED" and (task.finished_at - task.started_at).total_seconds() < 60
    with world.db.session() as s:
        job = s.get(JobRow, job_id)
        assert job.attempts[0].finished_at == task.finished_at == job.finished_at


def _claim_of_running_task(tmp_path, job_id: int) -> dict:
    """The ``pid.json`` of attempt 0 of the job's one task, once the task is recorded in it."""
    def claim() -> dict | None:
        for path in (tmp_path / "local" / "tasks" / str(job_id) / "0").glob("*/pid.json"):
            record = json.loads(path.read_text())
            if record.get("task"):
                return record
        return None

    return wait_until(claim, what=f"job {job_id}'s task to be recorded")


def test_a_task_that_finishes_after_its_supervisor_was_killed_succeeds_and_is_not_run_again(world, tmp_path) -> None:
    starts, go = tmp_path / "starts", tmp_path / "go"
    job_id = world.submit(f"""
name: orphaned
jobRetryCount: 1
taskRoles:
  m:
    commands:
      - echo start >> {starts}
      - while [ ! -e {go} ]; do sleep 0.02; done
""")
    world.drive(job_id, states=("RUNNING",))
    wait_until(starts.exists, what="the task to start")
    supervisor = _claim_of_running_task(tmp_path, job_id)["supervisor"]["pid"]
    os.kill(supervisor, signal.SIGKILL)
    go.touch()  # the task finishes its work with no supervisor left to record it
    job = world.drive(job_id)
    assert (job.state, job.attempt, job.retries_used, job.exit_code) == ("SUCCEEDED", 0, 0, 0)
    assert starts.read_text() == "start\n"
    (task,) = world.tasks(job_id)
    assert (task.state, task.exit_code) == ("SUCCEEDED", 0) and "supervisor was lost" in task.message


def _lose_supervision(attempts: str) -> str:
    """A command that, in the attempts matching the shell pattern ``attempts``, kills the
    task's supervisor and waiter and then the task itself: nothing records how it ended."""
    kill_both = ("import json, os, signal; c = json.load(open('../pid.json')); "
                 "[os.kill(c[p]['pid'], signal.SIGKILL) for p in ('supervisor', 'waiter')]")
    return f'case "$TRAINYARD_ATTEMPT" in {attempts}) {sys.executable} -c "{kill_both}"; kill -9 $$;; esac'


def test_a_lost_task_is_retried_as_a_platform_fault_without_spending_job_retries(world, tmp_path,
                                                                                monkeypatch) -> None:
    from trainyard.cli.render import job_detail as render_job
    from trainyard.services.views import job_detail as job_view
    from trainyard.store.rows import JobEventRow

    # The inventory is read again once a task is lost (its node may have failed), before
    # the retry is placed, not only every INVENTORY_REFRESH_SECONDS.
    world.controller.run_once()  # the first read
    reads: list[float] = []
    read = world.controller.backend.inventory
    monkeypatch.setattr(world.controller.backend, "inventory", lambda: reads.append(1) or read())
    job_id = world.submit(f"""
name: unlucky
jobRetryCount: 0
taskRoles:
  m:
    commands:
      - {json.dumps(_lose_supervision("0"))}
      - echo "finished attempt $TRAINYARD_ATTEMPT"
""")
    job = world.drive(job_id)
    assert (job.state, job.attempt, job.retries_used) == ("SUCCEEDED", 1, 0)
    assert reads
    with world.db.session() as s:
        row = s.get(JobRow, job_id)
        assert [a.state for a in row.attempts] == ["LOST", "SUCCEEDED"]
        lost_task = row.attempts[0].tasks[0]
        assert (lost_task.state, lost_task.exit_code) == ("LOST", None)
        assert "no exit status" in lost_task.message
        events = list(s.scalars(select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)))
        kinds = [e.kind for e in events]
        assert "task-lost" in kinds and "retried" not in kinds
        (retry,) = [e.message for e in events if e.kind == "platform-retried"]
        assert "without spending jobRetryCount" in retry and "platform retry 1 of" in retry
        shown = render_job(job_view(row, events, [], spec=world.controller.spec_of(row), now=SystemClock().now()))
    assert "Attempt 0: LOST" in shown and "m/0   LOST" in shown
    assert "retries used 0 of 0; platform retries 1 of 3" in shown


def test_a_job_lost_before_the_next_cycle_reads_the_queue_is_retried_away_from_its_node(world, monkeypatch) -> None:
    """A task lost so soon that no cycle saw its job running: the retry is a new waiting job
    (it avoids the node, its attempt is counted), not the job as it waited before."""
    from trainyard.backends.base import TaskKey

    seen = []
    decide = world.controller.scheduler.decide
    monkeypatch.setattr(world.controller.scheduler, "decide", lambda snap: seen.append(snap) or decide(snap))
    job_id = world.submit(f"""
name: quickly-lost
jobRetryCount: 0
taskRoles:
  m:
    commands:
      - {json.dumps(_lose_supervision("0"))}
      - echo "finished attempt $TRAINYARD_ATTEMPT"
""")
    world.cycle()  # placed and started
    [task] = world.tasks(job_id)
    key = TaskKey(job_id, 0, "m", 0)
    wait_until(lambda: not world.controller.backend.observe([key])[key].running, what="the task to die")
    world.cycle()  # sees the loss, requeues the job and places its retry
    [first, second] = [s for s in seen if any(p.job_id == job_id for p in s.pending)]
    [retry] = [p for p in second.pending if p.job_id == job_id]
    assert retry.avoid_nodes == {task.node} and retry.waiting_since is not None
    assert world.drive(job_id).state == "SUCCEEDED"


def test_a_job_lost_every_time_gets_a_bounded_number_of_platform_retries_then_fails(world, tmp_path) -> None:
    from trainyard.core.lifecycle import MAX_PLATFORM_RETRIES

    job_id = world.submit(f"""
name: cursed
jobRetryCount: 0
taskRoles:
  m:
    commands:
      - {json.dumps(_lose_supervision("*"))}
""")
    job = world.drive(job_id, timeout=60)
    assert (job.state, job.retries_used, job.exit_code) == ("FAILED", 0, None)
    assert "platform retries are used up" in job.state_message
    with world.db.session() as s:
        states = [a.state for a in s.get(JobRow, job_id).attempts]
    assert states == ["LOST"] * MAX_PLATFORM_RETRIES + ["FAILED"]


def test_a_job_whose_ports_cannot_be_reserved_waits_with_the_reason_and_starts_when_they_can(
        world, monkeypatch) -> None:
    """Ports held by another program are the node's trouble, not the job's: it is not failed
    (nor does it spend a retry: no attempt was made); it waits, saying why, and is placed again."""
    real = world.backend.allocate_ports
    refusals = []

    def busy(node, count, taken=()):
        if not refusals:
            refusals.append(node)
            raise OSError(f"{count} ports asked for on node {node}, 0 free")
        return real(node, count, taken)

    monkeypatch.setattr(world.backend, "allocate_ports", busy)
    job_id = world.submit("name: web\ntaskRoles:\n  m:\n    resourcePerInstance: {ports: {http: 1}}\n"
                          "    commands: ['true']\n")
    world.cycle()
    with world.db.session() as s:
        job = s.get(JobRow, job_id)
        assert (job.state, job.pending_reason, job.attempt) == ("WAITING", "PORTS", 0)
        assert "its ports could not be reserved" in job.pending_message and "0 free" in job.pending_message
    job = world.drive(job_id)  # the next cycle places it again
    assert (job.state, job.retries_used) == ("SUCCEEDED", 0) and refusals


def test_gangs_are_launched_side_by_side_so_one_slow_launch_holds_up_no_other(world) -> None:
    """Each launch waits until the other has begun: launched one after the other, the first
    would give up (BrokenBarrierError: its job fails) and the test fails."""
    import threading

    both = threading.Barrier(2, timeout=scaled(30))
    backend = world.controller.reconciler.backend
    real = backend.launch

    def slow_launch(task) -> None:
        both.wait()
        real(task)

    backend.launch = slow_launch  # this instance only
    jobs = [world.submit(f"name: j{i}\ntaskRoles:\n  w:\n    resourcePerInstance: {{gpu: 1}}\n"
                         "    commands: ['sleep 600']\n") for i in range(2)]
    world.cycle()
    assert [world.job(j).state for j in jobs] == ["RUNNING", "RUNNING"], [world.explain(j) for j in jobs]
