"""The store's own identity: a random cluster id made once, when the store is new."""

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
