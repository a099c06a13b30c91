"""What each state change does (core/transitions.py), on plain records like the store's rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from trainyard.core import transitions
from trainyard.core.states import AttemptState, IllegalTransition, JobState, TaskState
from trainyard.core.transitions import EventKind

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Job:
    state: str = ""
    submitted_at: datetime = T0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 0
    retries_used: int = 0
    grace_seconds: float = 30.0
    pending_reason: str | None = None
    pending_message: str | None = None
    pending_short: str | None = None
    pending_position: int | None = None
    pending_eta: datetime | None = None
    state_message: str = ""
    exit_code: int | None = None
    stopped_by: str | None = None
    stop_reason: str | None = None


@dataclass
class Attempt:
    number: int = -1
    state: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str = ""
    stop_requested_at: datetime | None = None
    borrowed: bool = False


@dataclass
class Task:
    role: str = "worker"
    index: int = 0
    state: str = ""
    run: int = 0
    exit_code: int | None = None
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    stop_sent: bool = False


def waiting(reason: str = "NO_FIT") -> Job:
    job = Job()
    transitions.submit(job, "alice", T0)
    job.pending_reason, job.pending_message, job.pending_position = reason, "no node fits", 3
    return job


def placed(job: Job | None = None) -> tuple[Job, Attempt]:
    job = job or waiting()
    attempt = Attempt()
    transitions.start_attempt(job, attempt, "worker/0 on n1", T0)
    return job, attempt


def test_a_submitted_job_waits_as_attempt_0_with_no_retry_spent() -> None:
    job = Job(attempt=7, retries_used=2)
    event = transitions.submit(job, "alice", T0)
    assert (job.state, job.attempt, job.retries_used, job.submitted_at) == ("WAITING", 0, 0, T0)
    assert event == transitions.Event(EventKind.SUBMITTED, "submitted by alice", T0)


def test_placing_a_job_clears_its_pending_fields_and_numbers_its_attempt() -> None:
    job = waiting()
    job.attempt = 2
    job, attempt = placed(job)
    assert job.state == JobState.RUNNING and job.pending_reason is job.pending_position is None
    assert (attempt.number, attempt.state, attempt.started_at) == (2, AttemptState.RUNNING, T0)


def test_stopping_a_waiting_job_ends_it_at_once_and_a_running_one_starts_its_grace() -> None:
    job = waiting()
    events = transitions.request_stop(job, None, "bob", T0)
    assert (job.state, job.finished_at, job.pending_reason, job.stopped_by) == ("STOPPED", T0, None, "bob")
    # Its final event too (a trial: a job stopped while it waited sent no "stopped" notice).
    assert [(e.kind, e.message) for e in events] == [(EventKind.STOP_REQUESTED, "stop requested by bob"),
                                                     (EventKind.STOPPED, "stopped by bob before it started")]
    job, attempt = placed()
    events = transitions.request_stop(job, attempt, "bob", T0 + timedelta(seconds=5))
    assert (job.state, attempt.stop_requested_at) == ("STOPPING", T0 + timedelta(seconds=5))
    assert [e.kind for e in events] == [EventKind.STOP_REQUESTED]  # its stopped event comes as its tasks end


def test_a_preempted_attempt_is_requeued_as_a_new_attempt_without_spending_a_retry() -> None:
    job, attempt = placed()
    assert transitions.preempt(job, attempt, "for job 9", T0).kind == EventKind.PREEMPTED
    assert attempt.state == AttemptState.PREEMPTED and attempt.stop_requested_at == T0
    with pytest.raises(IllegalTransition):
        transitions.preempt(job, attempt, "again", T0)
    event = transitions.requeue_preempted(job, attempt, T0)
    assert (job.state, job.attempt, job.retries_used) == ("WAITING", 1, 0)
    assert event.kind == EventKind.REQUEUED and "waiting as attempt 1" in event.message


def test_a_job_stopped_while_waiting_again_after_a_preemption_says_so_and_counts_only_its_run_time() -> None:
    """Issue 13: it read "stopped ... before it started", and its runtime counted queue time."""
    from trainyard.core.lifecycle import run_seconds

    job, attempt = placed()
    attempt.started_at, job.started_at = T0 + timedelta(seconds=10), T0 + timedelta(seconds=10)
    transitions.preempt(job, attempt, "preempted for job 9", T0 + timedelta(seconds=60))
    attempt.finished_at = T0 + timedelta(seconds=70)
    transitions.requeue_preempted(job, attempt, T0 + timedelta(seconds=70))
    transitions.request_stop(job, None, "bob", T0 + timedelta(seconds=500))
    assert job.state == JobState.STOPPED
    assert job.state_message == "stopped by bob while waiting to run attempt 1 (requeued: preempted for job 9)"
    spans = [(attempt.started_at, attempt.finished_at)]
    assert run_seconds(spans, T0 + timedelta(seconds=500)) == 60  # not 490 from first start to stop
    assert run_seconds([*spans, (T0 + timedelta(seconds=600), None)], T0 + timedelta(seconds=630)) == 90
    assert run_seconds([(None, None)], T0) is None  # never ran: no runtime, not zero
    never = waiting()
    transitions.request_stop(never, None, "bob", T0)
    assert never.state_message == "stopped by bob before it started"


def test_a_failed_attempt_retried_spends_one_retry_and_keeps_its_exit_code() -> None:
    job, attempt = placed()
    transitions.complete_attempt(attempt, AttemptState.FAILED, "1 task(s) failed", 3)
    event = transitions.retry_failed(job, attempt, 2, T0)
    assert (job.state, job.attempt, job.retries_used, job.exit_code) == ("WAITING", 1, 1, 3)
    assert event.kind == EventKind.RETRIED and "(retry 1 of 2)" in event.message


def test_a_lost_attempt_is_a_platform_retry() -> None:
    job, attempt = placed()
    transitions.complete_attempt(attempt, AttemptState.LOST, "1 task(s) lost", None)
    event = transitions.requeue_lost(job, attempt, 1, T0)
    assert (job.state, job.attempt, job.retries_used) == ("WAITING", 1, 0)
    assert event.kind == EventKind.PLATFORM_RETRIED and "platform retry 1 of 3" in event.message


@pytest.mark.parametrize(
    ("outcome", "state", "exit_code", "kind"),
    [
        (AttemptState.SUCCEEDED, JobState.SUCCEEDED, 0, EventKind.SUCCEEDED),
        (AttemptState.FAILED, JobState.FAILED, 2, EventKind.FAILED),
        (AttemptState.TIMED_OUT, JobState.FAILED, None, EventKind.FAILED),
    ],
)
def test_a_job_ends_when_its_attempt_last_ended(outcome: AttemptState, state: JobState, exit_code: int | None,
                                                kind: EventKind) -> None:
    job, attempt = placed()
    if outcome == AttemptState.TIMED_OUT:
        assert transitions.time_out(job, attempt, 60, T0).kind == EventKind.TIMED_OUT
    else:
        transitions.complete_attempt(attempt, outcome, "done", 2 if outcome == AttemptState.FAILED else 0)
    ended = T0 + timedelta(seconds=10)
    transitions.attempt_ended(attempt, ended, T0 + timedelta(seconds=99))
    if outcome == AttemptState.SUCCEEDED:
        event = transitions.succeed(job, attempt, T0)
    else:
        event = transitions.fail(job, attempt, "why", T0)
    assert (job.state, job.exit_code, job.finished_at, event.kind) == (state, exit_code, ended, kind)


def test_a_task_retried_in_place_waits_as_its_next_run() -> None:
    job, _ = placed()
    task = Task()
    transitions.place_task(task)
    transitions.task_launched(task, job, T0)
    assert (task.state, job.started_at) == (TaskState.RUNNING, T0)
    event = transitions.task_rerun(task, 1, "exited with 1", 2, T0)
    assert (task.state, task.run, task.exit_code) == (TaskState.WAITING, 1, 1)
    assert event.kind == EventKind.TASK_RETRIED and "(1 of 2 task retries)" in event.message
    transitions.task_launched(task, job, T0 + timedelta(seconds=1))
    assert job.started_at == T0  # the job started with its first task
    event = transitions.task_ended(task, TaskState.LOST, None, "lost", T0, T0)
    assert (task.state, event.kind) == (TaskState.LOST, EventKind.TASK_LOST)
