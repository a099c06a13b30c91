"""The store's own identity (a random cluster id made once, when the store is new) and the
few settings kept in it that belong to no row of their own."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from trainyard.store.rows import MetaRow

CLUSTER_ID = "cluster_id"


def cluster_id(session: Session) -> str:
    """This store's cluster id, created on first call.

    Backends keep their state per cluster id, so a new or different database never
    mistakes another database's task directories (same job ids) for its own tasks.
    """
    row = session.get(MetaRow, CLUSTER_ID)
    if row is None:
        row = MetaRow(key=CLUSTER_ID, value=uuid.uuid4().hex[:16])
        session.add(row)
        session.flush()
    return row.value


def known_cluster_id(session: Session) -> str | None:
    """This store's cluster id, or None while it has none (read only: ``yard doctor``)."""
    row = session.get(MetaRow, CLUSTER_ID)
    return None if row is None else row.value


def value(session: Session, key: str) -> str | None:
    """A setting kept in the store itself (e.g. the built-in ``default`` VC's, which has no
    row of its own), or None while it is unset."""
    row = session.get(MetaRow, key)
    return None if row is None else row.value


def set_value(session: Session, key: str, text: str | None) -> None:
    """Set a setting kept in the store itself; None unsets it."""
    row = session.get(MetaRow, key)
    if text is None:
        if row is not None:
            session.delete(row)
    elif row is None:
        session.add(MetaRow(key=key, value=text))
    else:
        row.value = text
