"""Run-time limits: an attempt running past its job's ``maxRunTimeSeconds`` is ended.

The attempt becomes TIMED_OUT; reconcile then stops its tasks with the job's grace period
and fails the job without a retry, as Slurm does with ``--time``.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.states import AttemptState, JobState
from trainyard.store.events import record_event
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
        if attempt.started_at is None or attempt.started_at + timedelta(seconds=limit) > now:
            continue
        record_event(session, job.id, transitions.time_out(job, attempt, limit, now))
        ended.append(job.id)
    return ended
