"""Queries about storages and their grants, and the built-in storages' roots (``meta``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from trainyard.store.rows import MetaRow, StorageGrantRow, StorageRow

# ``meta`` keys: the server's storage_home_root and storage_group_root settings, written at
# start-up, so that the API and the controller read the same ones. Absent: that kind is off.
HOME_ROOT = "storage_home_root"
GROUP_ROOT = "storage_group_root"
MOUNT_ROOTS = "storage_mount_roots"  # JSON list; absent: the default (``spec.storages``)


def storage_named(session: Session, name: str) -> StorageRow | None:
    return session.scalar(select(StorageRow).where(StorageRow.name == name))


def storages_named(session: Session, names: list[str]) -> list[StorageRow]:
    """The storages of these names, with their grants, in one query (a submit's check and a
    launch read them)."""
    query = select(StorageRow).where(StorageRow.name.in_(names)).options(joinedload(StorageRow.grants))
    return list(session.scalars(query).unique())


def all_storages(session: Session) -> list[StorageRow]:
    """Every admin's storage, by name."""
    return list(session.scalars(select(StorageRow).order_by(StorageRow.name)))


def storage_grants_to_user(session: Session, user_id: int) -> list[StorageGrantRow]:
    """The user's own storage grants (not those through a group)."""
    return list(session.scalars(select(StorageGrantRow).where(StorageGrantRow.user_id == user_id)))


def meta(session: Session, key: str) -> str | None:
    row = session.get(MetaRow, key)
    return None if row is None else row.value


def set_meta(session: Session, key: str, value: str | None) -> None:
    row = session.get(MetaRow, key)
    if value is None:
        if row is not None:
            session.delete(row)
    elif row is None:
        session.add(MetaRow(key=key, value=value))
    else:
        row.value = value
