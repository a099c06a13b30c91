"""What a dependency's condition (``afterok``, ``afterany``, ``afternotok``: the job file's
``dependencies``, as Slurm's ``--dependency``) makes of the state of the job waited for.

A job waited for that has not ended (waiting, running, suspended, requeued) may still meet
any condition. Once it has ended the answer is final: met, or never (Slurm's
``DependencyNeverSatisfied``): then the waiting job is ended, and so in turn are the jobs
that waited for it to succeed.
"""

from __future__ import annotations

from enum import StrEnum

from trainyard.core.states import JobState


class Status(StrEnum):
    WAITING = "waiting"  # the job waited for has not ended
    MET = "met"
    NEVER = "never"  # it ended in a way the condition excludes


# The words for each condition: "waits for job 12 to succeed".
WANTS = {"afterok": "succeed", "afterany": "end", "afternotok": "fail or be stopped"}


def status(condition: str, state: JobState | str) -> Status:
    """Whether a dependency with ``condition`` on a job in ``state`` is met, may still be, or never will."""
    state = JobState(state)
    if not state.is_final:
        return Status.WAITING
    if condition == "afterany":
        return Status.MET
    succeeded = state == JobState.SUCCEEDED
    if condition == "afterok":
        return Status.MET if succeeded else Status.NEVER
    if condition == "afternotok":
        return Status.NEVER if succeeded else Status.MET
    raise ValueError(f"unknown dependency condition {condition!r}")


def waiting_words(condition: str, job_id: int) -> str:
    return f"job {job_id} to {WANTS[condition]}"


def never_words(condition: str, job_id: int, state: JobState | str) -> str:
    """Why a dependency can never be met: "job 12 FAILED, and this job waited for it to succeed"."""
    return f"job {job_id} {JobState(state)}, and this job waited for it to {WANTS[condition]}"
