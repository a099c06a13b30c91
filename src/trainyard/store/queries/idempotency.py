"""Queries of submits' idempotency keys (``services.idempotency``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from trainyard.store.rows import IdempotencyKeyRow


def stored_key(session: Session, user_id: int, key: str) -> IdempotencyKeyRow | None:
    """The row ``key`` of user ``user_id`` made, if it is kept."""
    return session.scalars(select(IdempotencyKeyRow).where(
        IdempotencyKeyRow.user_id == user_id, IdempotencyKeyRow.key == key)).first()


def delete_keys_made_by(session: Session, cutoff: datetime) -> None:
    """Remove every key made at or before ``cutoff``."""
    session.execute(delete(IdempotencyKeyRow).where(IdempotencyKeyRow.created_at <= cutoff))
