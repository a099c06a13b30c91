"""The simulator's jobs as the live controller's state machine sees them.

A simulated job moves through the same states as a live one, and only through
``core.transitions`` — the functions the controller and the services call — so that a
trace replays the lifecycle that runs (a preempted attempt is stopped, then requeued as a
new attempt with no retry spent; one that finished within its grace keeps its outcome),
and a change the lifecycle does not allow fails the simulation as it would fail a live
cycle. Simulated time (seconds) is read as seconds since the Unix epoch, UTC.

``SimJob`` and ``SimAttempt`` are plain records with the attributes of
``transitions.JobRecord`` and ``transitions.AttemptRecord``; each keeps its job's history
(the events a live job would have recorded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from trainyard.core import transitions
from trainyard.core.states import AttemptState, JobState
from trainyard.core.transitions import Event

EPOCH = datetime.fromtimestamp(0, UTC)
SIMULATOR = "the simulator"


def at(seconds: float) -> datetime:
    """A simulated instant as the datetime the transitions record."""
    return datetime.fromtimestamp(seconds, UTC)


@dataclass
class SimAttempt:
    number: int = 0
    state: str = AttemptState.RUNNING
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str = ""
    stop_requested_at: datetime | None = None
    borrowed: bool = False


@dataclass
class SimJob:
    job_id: int
    grace_seconds: float = 0.0
    state: str = JobState.WAITING
    submitted_at: datetime = EPOCH
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 0
    retries_used: int = 0
    pending_reason: str | None = None
    pending_message: str | None = None
    pending_short: str | None = None
    pending_position: int | None = None
    pending_eta: datetime | None = None
    state_message: str = ""
    exit_code: int | None = None
    stopped_by: str | None = None
    stop_reason: str | None = None
    held_by: str | None = None
    attempts: list[SimAttempt] = field(default_factory=list)
    history: list[Event] = field(default_factory=list)

    @property
    def current(self) -> SimAttempt:
        return self.attempts[-1]


def submitted(job_id: int, now: float, grace_seconds: float = 0.0) -> SimJob:
    """A job arrives: WAITING as attempt 0."""
    job = SimJob(job_id, grace_seconds)
    job.history.append(transitions.submit(job, SIMULATOR, at(now)))
    return job


def started(job: SimJob, where: str, now: float) -> None:
    """The scheduler placed it: a new attempt runs."""
    attempt = SimAttempt()
    job.history.append(transitions.start_attempt(job, attempt, where, at(now)))
    job.attempts.append(attempt)


def preempted(job: SimJob, reason: str, now: float) -> None:
    """The scheduler preempts it: its attempt stops after the grace period."""
    job.history.append(transitions.preempt(job, job.current, reason, at(now)))


def ended(job: SimJob, now: float) -> None:
    """Its work is done. A preempted attempt that finished within its grace period keeps
    its outcome, as in the controller."""
    attempt = job.current
    note = " (it ended before its preemption took effect)" if attempt.state == AttemptState.PREEMPTED else ""
    transitions.complete_attempt(attempt, AttemptState.SUCCEEDED, "all tasks ended" + note, 0)
    transitions.attempt_ended(attempt, at(now), at(now))
    job.history.append(transitions.succeed(job, attempt, at(now)))


def requeued(job: SimJob, now: float) -> None:
    """A preempted attempt has stopped with work left: the job waits again as a new attempt."""
    attempt = job.current
    transitions.attempt_ended(attempt, at(now), at(now))
    job.history.append(transitions.requeue_preempted(job, attempt, at(now)))
