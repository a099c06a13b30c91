"""Queries about datasets and their grants."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from trainyard.core.states import JobState
from trainyard.store.rows import DatasetRow, JobRow


def dataset_named(session: Session, name: str) -> DatasetRow | None:
    return session.scalar(select(DatasetRow).where(DatasetRow.name == name))


def datasets_named(session: Session, names: list[str]) -> dict[str, DatasetRow]:
    """The datasets of these names (grants come with them: ``selectin``), by name."""
    rows = session.scalars(select(DatasetRow).where(DatasetRow.name.in_(names)))
    return {row.name: row for row in rows}


def all_datasets(session: Session) -> list[DatasetRow]:
    return list(session.scalars(select(DatasetRow).order_by(DatasetRow.name)))


def jobs_next_in_line(session: Session, ahead: int) -> list[JobRow]:
    """Waiting jobs at most ``ahead``-th in their VC's queue (as the last cycle put them),
    with their owners: the jobs whose datasets are worth fetching before they start."""
    query = (select(JobRow).where(JobRow.state == JobState.WAITING, JobRow.pending_position.is_not(None),
                                  JobRow.pending_position <= ahead)
             .options(joinedload(JobRow.user)).order_by(JobRow.pending_position, JobRow.id))
    return list(session.scalars(query).unique())
