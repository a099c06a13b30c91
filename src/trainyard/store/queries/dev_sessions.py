"""Queries about interactive sessions (``services/dev_sessions.py`` starts them,
``controller/sessions.py`` keeps their lifetimes and reads their activity)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core.states import FINAL_JOB_STATES, JobState, TaskState
from trainyard.store.rows import DevSessionRow, JobRow, TaskRow


def dev_session(session: Session, job_id: int) -> DevSessionRow | None:
    """The session of job ``job_id``; None when that job is not a session (or does not exist)."""
    return session.get(DevSessionRow, job_id)


def dev_sessions(session: Session, user_id: int | None = None) -> list[DevSessionRow]:
    """The sessions of one user or (``None``) of every user, newest first."""
    query = select(DevSessionRow).join(JobRow, JobRow.id == DevSessionRow.job_id).order_by(JobRow.id.desc())
    if user_id is not None:
        query = query.where(JobRow.user_id == user_id)
    return list(session.scalars(query).unique())


def started_without_end(session: Session) -> list[DevSessionRow]:
    """Sessions whose job has started and whose end (``expires_at``) is not set yet."""
    return list(session.scalars(select(DevSessionRow).join(JobRow, JobRow.id == DevSessionRow.job_id).where(
        DevSessionRow.expires_at.is_(None), JobRow.started_at.is_not(None))))


def past_their_end(session: Session, now: datetime) -> list[DevSessionRow]:
    """Sessions at or past their end whose job has neither ended nor is being stopped."""
    return list(session.scalars(select(DevSessionRow).join(JobRow, JobRow.id == DevSessionRow.job_id).where(
        DevSessionRow.expires_at <= now, JobRow.state.not_in([*FINAL_JOB_STATES, JobState.STOPPING]))))


def running_session_tasks(session: Session, role: str, index: int) -> list[tuple[JobRow, TaskRow]]:
    """(job, task) of every running session's running task ``role/index``."""
    rows = session.execute(
        select(JobRow, TaskRow).join(DevSessionRow, DevSessionRow.job_id == JobRow.id)
        .join(TaskRow, TaskRow.job_id == JobRow.id)
        .where(JobRow.state == JobState.RUNNING, TaskRow.state == TaskState.RUNNING,
               TaskRow.role == role, TaskRow.index == index)).unique().all()
    return [(job, task) for job, task in rows]
