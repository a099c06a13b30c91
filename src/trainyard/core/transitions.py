"""The one owner of what each state change *does*: timestamps, pending fields, attempt
numbers, retry counts, messages, and the event the change leaves in a job's history.

``states.py`` says which changes are allowed; ``lifecycle.py`` decides which one comes
next; this module carries it out. In the spirit of Prefect's orchestration rules, every
caller that moves a job, an attempt or a task — the controller's loops, the services
(submit, stop), the simulator and the tests — calls one of the functions below and never
assigns a state itself, so a new state (suspend/resume, the portal's) is one edit here.

Why the functions take protocols and return events: ``core`` imports nothing of ours
(DESIGN.md's layering), so it cannot know the store's rows. The functions work on
anything with the attributes of ``JobRecord`` / ``AttemptRecord`` / ``TaskRecord`` (the
store's ``JobRow``, ``AttemptRow``, ``TaskRow`` match them, and so do the simulator's plain
records) and return the ``Event`` to record; writing it is the store's part
(``store/events.py``), done by the caller in the same transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from trainyard.core.lifecycle import MAX_PLATFORM_RETRIES
from trainyard.core.states import (
    AttemptState,
    JobState,
    TaskState,
    check_attempt_transition,
    check_job_transition,
    check_task_transition,
)


class EventKind(StrEnum):
    """What happened to a job, as its history (``job_events.kind``) names it."""

    SUBMITTED = "submitted"
    PLACED = "placed"
    STOP_REQUESTED = "stop-requested"
    PREEMPTED = "preempted"
    SUSPEND_REQUESTED = "suspend-requested"  # its tasks are told to save their state
    SUSPENDED = "suspended"  # its attempt ended suspended (or, waiting, it is held)
    RESUME_REQUESTED = "resume-requested"  # its owner let a held job resume
    HUNG = "hung"  # the watchdog found no output for watchdogSeconds
    TIMED_OUT = "timed-out"
    IMAGE_PULLED = "image-pulled"  # a task's image reached its node (or was there), or could not
    DATASETS = "datasets"  # the datasets (and versions) a role's tasks of an attempt were launched to read
    PORT_OPENED = "port-opened"  # a user reached a task's port (the proxy, yard port-forward)
    EXEC = "exec"  # a user ran a command or opened a shell in a task (yard exec, yard shell, the portal)
    SESSION_RENEWED = "session-renewed"  # an interactive session's lifetime was extended
    SESSION_IDLE = "session-idle"  # an interactive session has had no activity for a while
    RESIZED = "resized"  # an elastic job grew or shrank: its workers restart at the new size
    TASK_RETRIED = "task-retried"
    TASK_EXITED = "task-exited"
    TASK_LOST = "task-lost"
    REQUEUED = "requeued"  # after a preemption
    PLATFORM_RETRIED = "platform-retried"  # after a lost attempt
    RETRIED = "retried"  # after a failed attempt, spending one of jobRetryCount
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


# The event a job's final state leaves (``finish``).
FINAL_EVENTS = {
    JobState.SUCCEEDED: EventKind.SUCCEEDED,
    JobState.FAILED: EventKind.FAILED,
    JobState.STOPPED: EventKind.STOPPED,
}


@dataclass(frozen=True)
class Event:
    """One entry of a job's history, for the caller to record."""

    kind: EventKind
    message: str
    at: datetime


class JobRecord(Protocol):
    state: str
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempt: int  # the current attempt's number
    retries_used: int  # of jobRetryCount
    grace_seconds: float
    pending_reason: str | None
    pending_message: str | None
    pending_short: str | None
    pending_position: int | None
    pending_eta: datetime | None
    state_message: str
    exit_code: int | None
    stopped_by: str | None
    stop_reason: str | None  # why, when given (an admin stopping a job an alert flagged)
    held_by: str | None  # who keeps it SUSPENDED until it is resumed


class AttemptRecord(Protocol):
    number: int
    state: str
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    reason: str
    stop_requested_at: datetime | None
    borrowed: bool  # it runs over its VC's quota, on other VCs' idle GPUs: reclaimable


class TaskRecord(Protocol):
    role: str
    index: int
    state: str
    run: int  # in-place re-runs so far
    exit_code: int | None
    message: str
    started_at: datetime | None
    finished_at: datetime | None
    stop_sent: bool
    resizes: int  # of its runs, those an elastic job's resize began (not retries)


def _move_job(job: JobRecord, new: JobState) -> None:
    job.state = check_job_transition(JobState(job.state), new)


def _move_attempt(attempt: AttemptRecord, new: AttemptState) -> None:
    attempt.state = check_attempt_transition(AttemptState(attempt.state), new)


def _move_task(task: TaskRecord, new: TaskState) -> None:
    task.state = check_task_transition(TaskState(task.state), new)


def _clear_pending(job: JobRecord) -> None:
    """A job that no longer waits has no reason to wait."""
    job.pending_reason = job.pending_message = job.pending_short = None
    job.pending_position = job.pending_eta = None


# -- jobs: submit, place, stop, finish ------------------------------------------------------


def submit(job: JobRecord, by: str, now: datetime, *, cloned_from: int | None = None) -> Event:
    """A new job: WAITING as attempt 0, no retry spent; a clone's history names its original."""
    job.state = JobState.WAITING
    job.submitted_at = now
    job.attempt = 0
    job.retries_used = 0
    job.state_message = ""
    origin = "" if cloned_from is None else f", a clone of job {cloned_from}"
    return Event(EventKind.SUBMITTED, f"submitted by {by}{origin}", now)


def start_attempt(
    job: JobRecord, attempt: AttemptRecord, where: str, now: datetime, *, borrowed_by: str | None = None
) -> Event:
    """WAITING or SUSPENDED -> RUNNING: ``attempt`` (new, not yet numbered) is the job's
    current one; from SUSPENDED it resumes what the last attempt saved.

    ``where`` says where its tasks were placed, for the history; ``borrowed_by`` names the
    job's VC when it starts over that VC's quota, on GPUs borrowed from other VCs.
    """
    resuming = job.state == JobState.SUSPENDED
    _move_job(job, JobState.RUNNING)
    _clear_pending(job)
    job.state_message = ""
    job.held_by = None
    attempt.number = job.attempt
    attempt.state = AttemptState.RUNNING
    attempt.started_at = now
    attempt.borrowed = borrowed_by is not None
    how = " (resuming its suspended state)" if resuming else ""
    borrowed = (
        "" if borrowed_by is None else
        f"; started on borrowed GPUs: VC {borrowed_by} is over its quota, and it is reclaimed (suspended if it "
        "can be, else requeued) when the lending VC needs them"
    )
    return Event(EventKind.PLACED, f"attempt {job.attempt} placed{how}: {where}{borrowed}", now)


def cannot_start(job: JobRecord, why: str, now: datetime) -> Event:
    """WAITING or SUSPENDED -> FAILED: the job can never start (e.g. its stored job file is invalid)."""
    _move_job(job, JobState.FAILED)
    job.finished_at = now
    job.state_message = f"cannot start: {why}"
    _clear_pending(job)
    return Event(EventKind.FAILED, job.state_message, now)


def request_stop(
    job: JobRecord, current: AttemptRecord | None, by: str, now: datetime, *, because: str = ""
) -> list[Event]:
    """A user's stop: a waiting job is STOPPED at once; a running one is STOPPING until its
    tasks end (reconcile signals them; its attempt's grace period runs from now). ``because``
    (e.g. the alert that made an admin stop it) is kept, and every message about the stop
    says it, so that the job's owner is told why. The events: the request, and for a job
    stopped at once its final ``stopped`` (what a job's notices and `yard job` go by)."""
    job.stop_reason = because or None
    why_stop = f": {because}" if because else ""
    if job.state in (JobState.WAITING, JobState.SUSPENDED):
        suspended = job.state == JobState.SUSPENDED
        _move_job(job, JobState.STOPPED)
        job.finished_at = now
        job.held_by = None
        _clear_pending(job)
        if suspended:
            job.state_message = f"stopped by {by}{why_stop} while suspended"
        elif job.started_at is None:
            job.state_message = f"stopped by {by}{why_stop} before it started"
        else:  # it ran, then was requeued (preempted, retried, lost) and waited again
            why = f" ({job.state_message})" if job.state_message else ""
            job.state_message = f"stopped by {by}{why_stop} while waiting to run attempt {job.attempt}{why}"
    else:
        _move_job(job, JobState.STOPPING)
        job.state_message = f"stopping on request of {by}{why_stop}"
        if current is not None and current.stop_requested_at is None:
            current.stop_requested_at = now
    job.stopped_by = by
    requested = Event(EventKind.STOP_REQUESTED, f"stop requested by {by}{why_stop}", now)
    if job.state == JobState.STOPPED:
        return [requested, Event(FINAL_EVENTS[JobState.STOPPED], job.state_message, now)]
    return [requested]


def finish(job: JobRecord, state: JobState, message: str, ended_at: datetime | None, now: datetime) -> Event:
    """RUNNING or STOPPING -> a final state; ``ended_at``: when its last attempt ended."""
    _move_job(job, state)
    job.finished_at = ended_at or now
    job.state_message = message
    return Event(FINAL_EVENTS[state], message, now)


def succeed(job: JobRecord, attempt: AttemptRecord, now: datetime) -> Event:
    """The attempt succeeded: so does the job."""
    job.exit_code = 0
    return finish(job, JobState.SUCCEEDED, attempt.reason, attempt.finished_at, now)


def fail(job: JobRecord, attempt: AttemptRecord, message: str, now: datetime) -> Event:
    """The attempt failed (or timed out) and no retry follows; a failed attempt's exit code
    becomes the job's (a timed-out one has none of its own)."""
    if attempt.state == AttemptState.FAILED:
        job.exit_code = attempt.exit_code
    return finish(job, JobState.FAILED, message, attempt.finished_at, now)


def stopped(job: JobRecord, attempt: AttemptRecord, now: datetime) -> Event:
    """STOPPING -> STOPPED once every task has ended; a running attempt ends STOPPED too."""
    message = f"stopped by {job.stopped_by}" + (f": {job.stop_reason}" if job.stop_reason else "")
    if attempt.state == AttemptState.RUNNING:
        _move_attempt(attempt, AttemptState.STOPPED)
        attempt.reason = message
    return finish(job, JobState.STOPPED, message, attempt.finished_at, now)


# -- jobs: a new attempt after the last one ended ------------------------------------------


def _next_attempt(job: JobRecord, message: str) -> None:
    _move_job(job, JobState.WAITING)
    job.attempt += 1
    job.state_message = message


def requeue_preempted(job: JobRecord, attempt: AttemptRecord, now: datetime) -> Event:
    """A preempted attempt has stopped: the job waits again as a new attempt, with its place
    in the queue (its submit time) and no retry spent."""
    _next_attempt(job, f"requeued: {attempt.reason}")
    return Event(
        EventKind.REQUEUED,
        f"attempt {attempt.number} preempted ({attempt.reason}); waiting as attempt {job.attempt}",
        now,
    )


def suspended(job: JobRecord, attempt: AttemptRecord, saved: int, told: int, now: datetime) -> Event:
    """RUNNING -> SUSPENDED: the suspended attempt has ended (``saved`` of its ``told`` tasks
    said they saved their state); the job waits to resume as a new attempt, with its place
    in the queue and no retry spent, or, held by its owner, until it is resumed."""
    next_number = attempt.number + 1
    _move_job(job, JobState.SUSPENDED)
    job.attempt = next_number
    if saved == told:
        how = f"{'its task' if told == 1 else f'all {told} tasks'} saved {'its' if told == 1 else 'their'} state"
    else:
        how = f"{saved} of {told} task(s) saved their state; the rest were stopped"
    if job.held_by:
        job.state_message = f"suspended by {job.held_by}: held until resumed (yard resume)"
        then = f"held by {job.held_by} until resumed"
    else:
        job.state_message = f"suspended: {attempt.reason}; waiting to resume as attempt {next_number}"
        then = f"waiting to resume as attempt {next_number}, with its place in the queue"
    return Event(
        EventKind.SUSPENDED, f"attempt {attempt.number} suspended ({attempt.reason}): {how}; {then}", now
    )


def hold(job: JobRecord, by: str, now: datetime) -> Event:
    """WAITING -> SUSPENDED: its owner (or an admin) keeps a waiting job from starting until
    it is resumed (Slurm's ``scontrol hold``); a SUSPENDED one waiting to resume is held too."""
    if job.state != JobState.SUSPENDED:
        _move_job(job, JobState.SUSPENDED)
    _clear_pending(job)
    job.held_by = by
    job.state_message = f"suspended by {by}: held until resumed (yard resume)"
    return Event(EventKind.SUSPENDED, f"suspended by {by} while waiting: it will not start until resumed", now)


def release(job: JobRecord, by: str, saved_state: bool, now: datetime) -> Event:
    """Its holder lets a held job go on: it waits for the scheduler again, SUSPENDED when it
    has a ``saved_state`` to resume (its last attempt was suspended), else WAITING (it was
    held while it waited). A job whose suspension is still under way waits for it to end."""
    held = job.held_by
    job.held_by = None
    if job.state == JobState.SUSPENDED and saved_state:
        job.state_message = f"waiting to resume as attempt {job.attempt} (resumed by {by})"
    elif job.state == JobState.SUSPENDED:
        _move_job(job, JobState.WAITING)
        job.state_message = f"released by {by}"
    return Event(EventKind.RESUME_REQUESTED, f"resume requested by {by} (it was held by {held})", now)


def requeue_lost(job: JobRecord, attempt: AttemptRecord, platform_retry: int, now: datetime) -> Event:
    """A lost attempt (a platform fault): a new attempt that spends none of jobRetryCount.
    ``platform_retry`` is this one's number (derived from the attempts, see lifecycle)."""
    _next_attempt(job, f"requeued: attempt {attempt.number} lost ({attempt.reason})")
    return Event(
        EventKind.PLATFORM_RETRIED,
        f"attempt {attempt.number} lost: {attempt.reason}; a platform fault, so attempt {job.attempt} starts "
        f"without spending jobRetryCount (platform retry {platform_retry} of {MAX_PLATFORM_RETRIES})",
        now,
    )


def retry_failed(job: JobRecord, attempt: AttemptRecord, job_retry_count: int, now: datetime) -> Event:
    """A failed attempt with a retry due: a new attempt, one retry spent."""
    job.exit_code = attempt.exit_code
    _next_attempt(job, f"retrying: attempt {attempt.number} failed ({attempt.reason})")
    job.retries_used += 1
    return Event(
        EventKind.RETRIED,
        f"attempt {attempt.number} failed: {attempt.reason}; starting attempt {job.attempt} "
        f"(retry {job.retries_used} of {job_retry_count})",
        now,
    )


# -- attempts ---------------------------------------------------------------------------------


def preempt(job: JobRecord, attempt: AttemptRecord, reason: str, now: datetime) -> Event:
    """RUNNING -> PREEMPTED: the scheduler needs its resources; reconcile stops its tasks
    with the job's grace period, then ``requeue_preempted``."""
    _move_attempt(attempt, AttemptState.PREEMPTED)
    attempt.reason = reason
    attempt.stop_requested_at = attempt.stop_requested_at or now
    job.state_message = f"being preempted: {reason}"
    return Event(
        EventKind.PREEMPTED, f"{reason}; tasks get SIGTERM and {job.grace_seconds:g} s to exit", now
    )


def suspend(
    job: JobRecord, attempt: AttemptRecord, reason: str, grace: float, signal: str, now: datetime,
    *, by: str | None = None,
) -> Event:
    """RUNNING -> SUSPENDED: its tasks are told to save their state (``signal`` and the
    request file) and stopped after ``grace`` seconds if still running; ``by`` (its owner,
    ``yard suspend``) holds the job suspended until it is resumed."""
    _move_attempt(attempt, AttemptState.SUSPENDED)
    attempt.reason = reason
    attempt.stop_requested_at = attempt.stop_requested_at or now
    if by is not None:
        job.held_by = by
    job.state_message = f"suspending: {reason}"
    told = "the request file" if signal == "none" else f"{signal} and the request file"
    return Event(
        EventKind.SUSPEND_REQUESTED,
        f"{reason}; tasks are told to save their state ({told}) and get {grace:g} s before they are stopped",
        now,
    )


def hang(
    job: JobRecord, attempt: AttemptRecord, silent_for: float, limit: int, retry_due: bool, now: datetime
) -> Event:
    """RUNNING -> LOST (or FAILED once the platform retries are spent): no task wrote output
    for ``watchdogSeconds``; its tasks are stopped with the grace period and the job is
    retried as after a platform fault."""
    attempt.reason = f"hung: no task wrote output for {silent_for:.0f} s (watchdogSeconds: {limit})"
    if not retry_due:
        attempt.reason += f"; its {MAX_PLATFORM_RETRIES} platform retries are used up, so this counts as a failure"
    _move_attempt(attempt, AttemptState.LOST if retry_due else AttemptState.FAILED)
    attempt.stop_requested_at = attempt.stop_requested_at or now
    job.state_message = f"stopping: {attempt.reason}"
    return Event(
        EventKind.HUNG,
        f"attempt {attempt.number} {attempt.reason}; tasks get SIGTERM and {job.grace_seconds:g} s to exit",
        now,
    )


def time_out(job: JobRecord, attempt: AttemptRecord, limit: int, now: datetime) -> Event:
    """RUNNING -> TIMED_OUT: past ``maxRunTimeSeconds``; its tasks are stopped, the job fails."""
    _move_attempt(attempt, AttemptState.TIMED_OUT)
    attempt.stop_requested_at = attempt.stop_requested_at or now
    attempt.reason = f"ran past its maximum run time (maxRunTimeSeconds: {limit})"
    job.state_message = f"stopping: {attempt.reason}"
    return Event(
        EventKind.TIMED_OUT,
        f"attempt {attempt.number} {attempt.reason}; tasks get SIGTERM and {job.grace_seconds:g} s to exit",
        now,
    )


def complete_attempt(attempt: AttemptRecord, outcome: AttemptState, reason: str, exit_code: int | None) -> None:
    """The completion policy decided (``lifecycle.evaluate_completion``: SUCCEEDED, FAILED or
    LOST); no event: the job's next step (finish, retry, requeue) records one."""
    _move_attempt(attempt, outcome)
    attempt.reason = reason
    attempt.exit_code = exit_code


def attempt_ended(attempt: AttemptRecord, last_task_end: datetime | None, now: datetime) -> None:
    """Every task of the attempt has ended: it ended when its last task did (the controller
    may see it only later, e.g. after a restart)."""
    attempt.finished_at = attempt.finished_at or last_task_end or now


# -- tasks ------------------------------------------------------------------------------------


def place_task(task: TaskRecord) -> None:
    """A new task of a just-started attempt: WAITING for reconcile to launch it, first run."""
    task.state = TaskState.WAITING
    task.run = 0
    task.stop_sent = False


def image_pulled(task: TaskRecord, note: str, now: datetime) -> Event:
    """How the task's image came to its node (the backend's words, e.g. "pulled IMAGE on node X
    in 12.3 s"); no state changes."""
    return Event(EventKind.IMAGE_PULLED, f"task {task.role}/{task.index}: {note}", now)


def datasets_read(attempt: int, role: str, datasets: list[tuple[str, str, str]], now: datetime) -> Event:
    """Which datasets an attempt's tasks of ``role`` were launched to read: (name, version,
    mountPath) each, as resolved at launch; no state changes."""
    read = ", ".join(f"{name} (version {version}) at {target}" for name, version, target in datasets)
    return Event(EventKind.DATASETS, f"attempt {attempt}, role {role}: {read}", now)


def task_launched(task: TaskRecord, job: JobRecord, now: datetime) -> None:
    """WAITING -> RUNNING: the backend took it; the job has started once its first task has."""
    _move_task(task, TaskState.RUNNING)
    task.started_at = task.started_at or now
    if job.started_at is None:
        job.started_at = now


def task_found_running(task: TaskRecord, now: datetime) -> None:
    """WAITING -> RUNNING: a task about to be stopped turned out to have been launched (just
    before a crash); it is watched to its end like any running task."""
    _move_task(task, TaskState.RUNNING)
    task.started_at = task.started_at or now


def stop_sent(task: TaskRecord) -> None:
    """The backend was told to stop the task: from now on its end counts as STOPPED (not its
    own success or failure), and it is not signalled again."""
    task.stop_sent = True


def task_launch_failed(task: TaskRecord, error: str, now: datetime) -> None:
    _move_task(task, TaskState.FAILED)
    task.message = error
    task.finished_at = now


def task_stopped_unlaunched(task: TaskRecord, now: datetime) -> None:
    _move_task(task, TaskState.STOPPED)
    task.message = "stopped before it was launched"
    task.finished_at = now


def task_rerun(task: TaskRecord, exit_code: int | None, detail: str, retry_count: int, now: datetime) -> Event:
    """RUNNING -> WAITING: a failed task re-run in place (``taskRetryCount``), as a new run."""
    _move_task(task, TaskState.WAITING)
    task.run += 1
    task.exit_code = exit_code
    task.message = f"run {task.run - 1} {detail}; re-running ({task.run}/{retry_count})"
    return Event(
        EventKind.TASK_RETRIED,
        f"task {task.role}/{task.index} {detail}; re-running in place ({task.run} of {retry_count} task retries)",
        now,
    )


_RESIZE = re.compile(r"(?:grows|shrinks) from (\d+) to (\d+) worker\(s\)")


def resized(before: int, after: int, why: str, now: datetime) -> Event:
    """An elastic job's size changes (``controller/elastic.py``): workers join or leave, and
    the others restart at the new size (``resize_of`` reads the sizes back)."""
    verb = "grows" if after > before else "shrinks"
    return Event(EventKind.RESIZED, f"{verb} from {before} to {after} worker(s): {why}", now)


def resize_of(message: str) -> tuple[int, int] | None:
    """The (before, after) sizes a ``resized`` event's message tells; None for another message."""
    found = _RESIZE.match(message)
    return None if found is None else (int(found[1]), int(found[2]))


def task_restarted(task: TaskRecord) -> None:
    """RUNNING -> WAITING: a worker of an elastic job stopped for a resize starts again in
    place, as a new run; not a retry (``resizes`` counts such runs)."""
    _move_task(task, TaskState.WAITING)
    task.run += 1
    task.resizes += 1
    task.exit_code = None
    task.message = f"restarted for a resize (run {task.run})"


def task_ended(
    task: TaskRecord, state: TaskState, exit_code: int | None, detail: str, ended_at: datetime, now: datetime
) -> Event:
    """RUNNING -> a final state (SUCCEEDED, FAILED, STOPPED, LOST), as the backend saw it end."""
    _move_task(task, state)
    task.exit_code = exit_code
    task.message = detail
    task.finished_at = ended_at
    kind = EventKind.TASK_LOST if state == TaskState.LOST else EventKind.TASK_EXITED
    return Event(kind, f"task {task.role}/{task.index} {detail}", now)
