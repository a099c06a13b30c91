"""A job's history: writing the events ``core.transitions`` returns, and reading them back."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core.transitions import Event
from trainyard.store.queries import notices
from trainyard.store.rows import JobEventRow


def record_event(session: Session, job_id: int, event: Event) -> None:
    """Add ``event`` to the job's history, in the caller's transaction (with the change it
    records), and queue the notices its owner asked for of it (``queries.notices``)."""
    row = JobEventRow(job_id=job_id, at=event.at, kind=event.kind.value, message=event.message)
    session.add(row)
    notices.queue(session, job_id, row, event.at)


def job_events(session: Session, job_id: int) -> list[JobEventRow]:
    """The job's history, oldest first."""
    return list(session.scalars(select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)))
