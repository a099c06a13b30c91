"""Run-time limits: an attempt running past its job's ``maxRunTimeSeconds`` is ended.

The attempt becomes TIMED_OUT; reconcile then stops its tasks with the job's grace period
and fails the job without a retry, as Slurm does with ``--time``.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.core.states import AttemptState, JobState, check_attempt_transition
from trainyard.services.jobs import record_event
from trainyard.store.rows import AttemptRow, JobRow


def end_overdue_attempts(session: Session, clock: Clock) -> list[int]:
    """Mark attempts past their limit TIMED_OUT; returns the jobs concerned."""
    now = clock.now()
    rows = session.execute(
        select(JobRow, AttemptRow)
        .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
        .where(
            JobRow.state == JobState.RUNNING,
            JobRow.max_runtime_seconds.is_not(None),
            AttemptRow.state == AttemptState.RUNNING,
        )
    ).all()
    ended = []
    for job, attempt in rows:
        limit = job.max_runtime_seconds
        if limit is None or attempt.started_at is None or attempt.started_at + timedelta(seconds=limit) > now:
            continue
        attempt.state = check_attempt_transition(AttemptState.RUNNING, AttemptState.TIMED_OUT)
        attempt.stop_requested_at = attempt.stop_requested_at or now
        attempt.reason = f"ran past its maximum run time (maxRunTimeSeconds: {limit})"
        job.state_message = f"stopping: {attempt.reason}"
        record_event(session, job, "timed-out", f"attempt {attempt.number} {attempt.reason}; tasks get "
                     f"SIGTERM and {job.grace_seconds:g} s to exit", clock)
        ended.append(job.id)
    return ended
