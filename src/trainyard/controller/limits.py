"""Run-time limits: an attempt running past its job's ``maxRunTimeSeconds`` is ended.

The attempt becomes TIMED_OUT; reconcile then stops its tasks with the job's grace period
and fails the job without a retry, as Slurm does with ``--time``.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.store.events import record_event
from trainyard.store.queries import jobs as job_queries


def end_overdue_attempts(session: Session, clock: Clock) -> list[int]:
    """Mark attempts past their limit TIMED_OUT; returns the jobs concerned."""
    now = clock.now()
    ended = []
    for job, attempt in job_queries.running_attempts_with_limits(session):
        limit = job.max_runtime_seconds
        if limit is None or attempt.started_at is None or attempt.started_at + timedelta(seconds=limit) > now:
            continue
        record_event(session, job.id, transitions.time_out(job, attempt, limit, now))
        ended.append(job.id)
    return ended
