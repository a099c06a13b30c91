"""Job, attempt and task states, and the one table of transitions allowed between them.

Every state change in Trainyard is made by ``transitions.py``, which checks it here
(``check_job_transition`` / ``check_attempt_transition`` / ``check_task_transition``): no
caller assigns a state that this module has not approved. See ``lifecycle.py`` for the
rules that decide *which* state comes next.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    # Its last attempt was suspended (it saved its state): it waits to resume as a new
    # attempt, keeping its place; held (``jobs.held_by``) while its owner keeps it suspended.
    SUSPENDED = "SUSPENDED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def is_final(self) -> bool:
        return self in FINAL_JOB_STATES


FINAL_JOB_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED})
# The states of a job the scheduler may place (a held SUSPENDED job excepted).
QUEUED_JOB_STATES = (JobState.WAITING, JobState.SUSPENDED)

# WAITING -> RUNNING        placed and launched
# RUNNING -> WAITING        the attempt failed and a retry is due, it was preempted, or it was
#                           lost (a new attempt each time; preemption and a lost attempt,
#                           platform faults both, do not use the retry budget)
# RUNNING -> SUCCEEDED/FAILED  completion policy decided
# RUNNING -> STOPPING      a user asked to stop; tasks are being signalled
# WAITING -> STOPPED        stop before anything ran
# WAITING -> FAILED         it can never start (its placement could not be prepared)
# WAITING -> SUSPENDED      its owner holds it (``yard suspend`` before it ran again)
# RUNNING -> SUSPENDED      its suspended attempt has ended (a new attempt, no retry spent)
# SUSPENDED -> RUNNING      resumed: placed as a new attempt
# SUSPENDED -> WAITING      released, held while it waited: it has no saved state to resume
# SUSPENDED -> STOPPED/FAILED  as from WAITING
# STOPPING -> STOPPED       every task has ended
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.WAITING: frozenset({JobState.RUNNING, JobState.STOPPED, JobState.FAILED, JobState.SUSPENDED}),
    JobState.RUNNING: frozenset(
        {JobState.WAITING, JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPING, JobState.SUSPENDED}
    ),
    JobState.SUSPENDED: frozenset({JobState.RUNNING, JobState.WAITING, JobState.STOPPED, JobState.FAILED}),
    JobState.STOPPING: frozenset({JobState.STOPPED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.STOPPED: frozenset(),
}


class AttemptState(StrEnum):
    RUNNING = "RUNNING"  # placed; its tasks are starting or running
    SUCCEEDED = "SUCCEEDED"  # decided by the completion policy (tasks may still be ending)
    FAILED = "FAILED"
    STOPPED = "STOPPED"  # ended by a stop request
    PREEMPTED = "PREEMPTED"  # the scheduler needs its resources: stopped, then requeued
    # Asked to save its state and stop (the scheduler or its owner): told, stopped at the
    # end of its suspend grace period if still running, then the job waits SUSPENDED.
    SUSPENDED = "SUSPENDED"
    TIMED_OUT = "TIMED_OUT"  # ran past the job's maxRunTimeSeconds: stopped; the job fails
    # Failed only because tasks were LOST (a platform fault): requeued as a new attempt
    # without spending jobRetryCount, at most lifecycle.MAX_PLATFORM_RETRIES times.
    LOST = "LOST"

    @property
    def is_final(self) -> bool:
        return self != AttemptState.RUNNING


ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.RUNNING: frozenset(
        {
            AttemptState.SUCCEEDED,
            AttemptState.FAILED,
            AttemptState.STOPPED,
            AttemptState.PREEMPTED,
            AttemptState.SUSPENDED,
            AttemptState.TIMED_OUT,
            AttemptState.LOST,
        }
    ),
    # Preempted too late: every task had already ended on its own, so its outcome stands.
    AttemptState.PREEMPTED: frozenset({AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.LOST}),
    AttemptState.SUSPENDED: frozenset({AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.LOST}),
    AttemptState.TIMED_OUT: frozenset(),
    AttemptState.LOST: frozenset(),
    AttemptState.SUCCEEDED: frozenset(),
    AttemptState.FAILED: frozenset(),
    AttemptState.STOPPED: frozenset(),
}


class TaskState(StrEnum):
    WAITING = "WAITING"  # placed, not yet launched
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"  # ended because Trainyard stopped it (user stop, completion, preemption, suspension)
    # Ended, but how is unknown: nothing recorded its exit status (its supervision was lost
    # with it, its node failed). A platform fault, not the task's: see lifecycle.
    LOST = "LOST"

    @property
    def is_final(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.LOST)


TASK_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.WAITING: frozenset({TaskState.RUNNING, TaskState.STOPPED, TaskState.FAILED}),
    # RUNNING -> WAITING is an in-place task retry (taskRetryCount): the next run of the
    # task is launched like a new one.
    TaskState.RUNNING: frozenset(
        {TaskState.WAITING, TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.LOST}
    ),
    TaskState.SUCCEEDED: frozenset(),
    TaskState.LOST: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.STOPPED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A state change the lifecycle does not allow; always a bug in the caller."""


def check_job_transition(current: JobState, new: JobState) -> JobState:
    if new not in JOB_TRANSITIONS[current]:
        raise IllegalTransition(f"job cannot go from {current} to {new}")
    return new


def check_attempt_transition(current: AttemptState, new: AttemptState) -> AttemptState:
    if new not in ATTEMPT_TRANSITIONS[current]:
        raise IllegalTransition(f"attempt cannot go from {current} to {new}")
    return new


def check_task_transition(current: TaskState, new: TaskState) -> TaskState:
    if new not in TASK_TRANSITIONS[current]:
        raise IllegalTransition(f"task cannot go from {current} to {new}")
    return new


class EnvironmentState(StrEnum):
    """Where an environment (``yard env``) stands: custom ones follow their build job."""

    BUILDING = "BUILDING"  # its build job has not ended
    READY = "READY"
    FAILED = "FAILED"  # its build job failed or was stopped: its log says why
