"""Queries about datasets and their grants."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.store.rows import DatasetRow


def dataset_named(session: Session, name: str) -> DatasetRow | None:
    return session.scalar(select(DatasetRow).where(DatasetRow.name == name))


def datasets_named(session: Session, names: list[str]) -> dict[str, DatasetRow]:
    """The datasets of these names (grants come with them: ``selectin``), by name."""
    rows = session.scalars(select(DatasetRow).where(DatasetRow.name.in_(names)))
    return {row.name: row for row in rows}


def all_datasets(session: Session) -> list[DatasetRow]:
    return list(session.scalars(select(DatasetRow).order_by(DatasetRow.name)))
